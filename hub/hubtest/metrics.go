package hubtest

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric is a metric as Prometheus exposes it, which users' dashboards and alerts depend on
// (docs/operations.md lists them).
type Metric struct {
	// Name is the metric's full name.
	Name string
	// Help is its help text.
	Help string
	// Labels are its variable labels, in order.
	Labels []string
}

// RequireRegistered fails t unless controller-runtime's registry, which the hub serves, holds
// each metric with exactly its name, help text and labels.
func RequireRegistered(t testing.TB, metrics ...Metric) {
	t.Helper()
	for _, m := range metrics {
		probe := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.Name, Help: m.Help}, m.Labels)
		err := ctrlmetrics.Registry.Register(probe)
		if err == nil {
			ctrlmetrics.Registry.Unregister(probe)
			t.Errorf("metric %s is not registered", m.Name)
			continue
		}
		if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
			t.Errorf("metric %s is registered, but not with help %q and labels %v: %v", m.Name, m.Help, m.Labels, err)
		}
	}
}
