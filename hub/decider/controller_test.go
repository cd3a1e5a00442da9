package decider

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
)

// TestObjectMetrics: a kind's reconciles are counted by result under magos_<kind>_reconciles_total,
// and forgetting an object drops its own series but keeps its reconciles counted.
func TestObjectMetrics(t *testing.T) {
	m := NewObjectMetrics("Widget")
	size := m.Gauge("magos_widget_size", "Size of the Widget.")
	turns := m.Counter("magos_widget_turns_total", "Turns of the Widget.")
	nn := types.NamespacedName{Namespace: "ns", Name: "w"}
	m.count(nn, nil)
	m.count(nn, errors.New("boom"))
	m.count(nn, nil)
	size.WithLabelValues(nn.Namespace, nn.Name).Set(3)
	turns.WithLabelValues(nn.Namespace, nn.Name).Inc()

	if got := testutil.ToFloat64(m.reconciles.WithLabelValues("ns", "w", "success")); got != 2 {
		t.Errorf("successes: %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.reconciles.WithLabelValues("ns", "w", "error")); got != 1 {
		t.Errorf("errors: %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.reconciles, "magos_widget_reconciles_total"); n != 2 {
		t.Errorf("magos_widget_reconciles_total has %d series, want 2", n)
	}

	m.forget(nn)
	if n := testutil.CollectAndCount(size) + testutil.CollectAndCount(turns); n != 0 {
		t.Errorf("%d series left of a forgotten Widget, want 0", n)
	}
	if n := testutil.CollectAndCount(m.reconciles); n != 2 {
		t.Errorf("the reconciles of a forgotten Widget: %d series, want 2 (they stay counted)", n)
	}
}
