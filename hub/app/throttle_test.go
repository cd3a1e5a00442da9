package app

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestSharedLimitIsOneObservedBucket: every client of the config draws on one token bucket of
// its QPS and burst, and the time a request waits for it is observed in
// magos_hub_api_throttle_wait_seconds; a config with a limiter of its own is left alone.
func TestSharedLimitIsOneObservedBucket(t *testing.T) {
	cfg := sharedLimit(&rest.Config{QPS: 20, Burst: 1})
	if cfg.RateLimiter == nil {
		t.Fatal("no shared rate limiter")
	}
	before := throttled(t)
	ctx := context.Background()
	for range 3 { // a burst of 1 at 20 a second: the 2nd and 3rd wait about 50 ms each
		if err := cfg.RateLimiter.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after := throttled(t)
	if n := after.GetSampleCount() - before.GetSampleCount(); n != 3 {
		t.Errorf("observed %d waits, want 3", n)
	}
	if waited := after.GetSampleSum() - before.GetSampleSum(); waited < 0.05 {
		t.Errorf("observed %.3f s of waits, want about 0.1 s", waited)
	}

	base := &rest.Config{QPS: 5, Burst: 10}
	if got := withBudget(base, 150, 300); got.QPS != 150 || got.Burst != 300 || base.QPS != 5 {
		t.Errorf("withBudget gave QPS %g and burst %d (base now %g), want 150 and 300 on a copy", got.QPS, got.Burst, base.QPS)
	}
	if got := withBudget(base, 0, 0); got != base {
		t.Error("withBudget changed a config the config file sets no budget for")
	}

	own := flowcontrol.NewFakeAlwaysRateLimiter()
	if got := sharedLimit(&rest.Config{QPS: 20, Burst: 1, RateLimiter: own}); got.RateLimiter != own {
		t.Error("a config's own rate limiter was replaced")
	}
}

func throttled(t *testing.T) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := throttleWait.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}
