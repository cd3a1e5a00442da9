package fleetview

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
