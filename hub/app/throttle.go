package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// throttleWait observes how long each of the hub's requests waited for the client-side rate
// limit (kubeApiQps, kubeApiBurst). client-go has a metric of its own for this, but
// controller-runtime registers only client-go's request counts, so the hub observes it here.
var throttleWait = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "magos_hub_api_throttle_wait_seconds",
	Help:    "How long the hub's requests to its API server waited for its client-side rate limit (kubeApiQps, kubeApiBurst).",
	Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
})

func init() {
	metrics.Registry.MustRegister(throttleWait)
}

// withBudget returns a copy of cfg with the request budget of the hub's config file (kubeApiQps
// and kubeApiBurst), or cfg as it is when qps is not set.
func withBudget(cfg *rest.Config, qps float32, burst int) *rest.Config {
	if qps <= 0 {
		return cfg
	}
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = qps, burst
	return out
}

// sharedLimit returns a copy of cfg whose clients all draw on one token bucket of cfg.QPS and
// cfg.Burst, observed by throttleWait. Without it, each client made from the config (the
// manager's, the Event broadcaster's) would have a bucket of its own, and the hub's requests
// would add up to more than kubeApiQps. cfg is returned as it is when it already has a limiter
// or no QPS.
func sharedLimit(cfg *rest.Config) *rest.Config {
	if cfg.RateLimiter != nil || cfg.QPS <= 0 {
		return cfg
	}
	out := rest.CopyConfig(cfg)
	out.RateLimiter = observedLimiter{flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, max(cfg.Burst, 1))}
	return out
}

// observedLimiter is a rate limiter whose waits are observed by throttleWait.
type observedLimiter struct {
	flowcontrol.RateLimiter
}

// Wait waits for a token, as the wrapped limiter does, and observes how long it took.
func (l observedLimiter) Wait(ctx context.Context) error {
	start := time.Now()
	err := l.RateLimiter.Wait(ctx)
	throttleWait.Observe(time.Since(start).Seconds())
	return err
}
