package decider

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Values of the result label of magos_<kind>_reconciles_total.
const (
	resultSuccess = "success"
	resultError   = "error"
)

// ObjectMetrics are the metrics of the hub objects one fleet controller decides (Rollouts,
// Projects), named after Prometheus' conventions (docs/operations.md lists upstream's names they
// replace): magos_<kind>_reconciles_total{namespace,name,result}, which Controller.Reconcile
// counts, and the controller's own series by namespace and name (Gauge, Counter), dropped when
// the object is gone. Every metric is registered with controller-runtime's registry.
type ObjectMetrics struct {
	kind       string
	reconciles *prometheus.CounterVec
	series     []interface{ DeleteLabelValues(...string) bool }
}

// NewObjectMetrics returns the metrics of the kind ("Rollout", "Project") with its
// magos_<kind>_reconciles_total registered.
func NewObjectMetrics(kind string) *ObjectMetrics {
	m := &ObjectMetrics{kind: kind, reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_" + strings.ToLower(kind) + "_reconciles_total",
		Help: kind + " reconciles, by result (success or error).",
	}, []string{"namespace", "name", "result"})}
	ctrlmetrics.Registry.MustRegister(m.reconciles)
	return m
}

// Gauge registers a gauge of the kind's objects, by namespace and name.
func (m *ObjectMetrics) Gauge(name, help string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"namespace", "name"})
	m.register(g, g)
	return g
}

// Counter registers a counter of the kind's objects, by namespace and name.
func (m *ObjectMetrics) Counter(name, help string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"namespace", "name"})
	m.register(c, c)
	return c
}

func (m *ObjectMetrics) register(c prometheus.Collector, series interface{ DeleteLabelValues(...string) bool }) {
	ctrlmetrics.Registry.MustRegister(c)
	m.series = append(m.series, series)
}

// count counts a reconcile of the object nn: an error if err is not nil, else a success.
func (m *ObjectMetrics) count(nn types.NamespacedName, err error) {
	result := resultSuccess
	if err != nil {
		result = resultError
	}
	m.reconciles.WithLabelValues(nn.Namespace, nn.Name, result).Inc()
}

// forget drops the series of the object nn (its reconciles stay counted).
func (m *ObjectMetrics) forget(nn types.NamespacedName) {
	for _, s := range m.series {
		s.DeleteLabelValues(nn.Namespace, nn.Name)
	}
}
