package hubtoken

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the hub token, on controller-runtime's registry (served at /metrics).
var (
	expiryTimestamp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_agent_hub_token_expiry_timestamp_seconds",
		Help: "When the agent's hub token in use expires (Unix time); 0 while it is the bootstrap token, whose expiry the agent does not know.",
	})

	renewalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_agent_hub_token_renewals_total",
		Help: "Requests for a new hub token (TokenRequest), by result: success or failure.",
	}, []string{"result"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(expiryTimestamp, renewalsTotal)
	})
}
