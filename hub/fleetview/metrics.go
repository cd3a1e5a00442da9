package fleetview

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	grantsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_hub_grants_total",
		Help: "Grants written on Workspaces, by the controller that decided (rollout or project).",
	}, []string{"by"})

	revokesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_hub_revokes_total",
		Help: "Grants removed from Workspaces, by the controller that decided (rollout or project).",
	}, []string{"by"})

	decisionLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "magos_hub_decision_latency_seconds",
		Help: "Time from the newest Workspace status change a decision reacted to (its Ready condition's " +
			"lastTransitionTime, a whole second) to the grant being written.",
		Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300},
	}, []string{"by"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(grantsTotal, revokesTotal, decisionLatency)
}

// Grants returns how many grants this process has written for the given granted-by value.
// Tests and tools use it to count writes.
func Grants(by string) float64 { return counterValue(grantsTotal.WithLabelValues(by)) }

// Revokes returns how many grants this process has removed for the given granted-by value.
func Revokes(by string) float64 { return counterValue(revokesTotal.WithLabelValues(by)) }

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

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
