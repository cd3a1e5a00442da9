package rollout

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Values of the result label of magos_rollout_reconciles_total.
const (
	resultSuccess = "success"
	resultError   = "error"
)

// The Rollout metrics, named after Prometheus' conventions (docs/operations.md lists upstream's
// names they replace).
var (
	reconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_rollout_reconciles_total",
		Help: "Rollout reconciles, by result (success or error).",
	}, []string{"namespace", "name", "result"})

	currentLevel = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_rollout_current_step",
		Help: "Index of the Rollout's current step (the number of steps when completed).",
	}, []string{"namespace", "name"})

	levelTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_rollout_step_transitions_total",
		Help: "Changes of the Rollout's current step.",
	}, []string{"namespace", "name"})

	deadlineExceeded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_rollout_progress_deadline_exceeded",
		Help: "1 while the Rollout's current step has not progressed for its spec.progressDeadline, else 0.",
	}, []string{"namespace", "name"})

	activeCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_rollouts_in_progress",
		Help: "Rollouts in phase Reconciling on the hub.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(reconcileTotal, currentLevel, levelTransitions, deadlineExceeded, activeCount)
}
