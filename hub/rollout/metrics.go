package rollout

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/magosfleet/magos/hub/decider"
)

// The Rollout metrics: magos_rollout_reconciles_total (decider.ObjectMetrics) and these.
var (
	metrics = decider.NewObjectMetrics("Rollout")

	currentLevel = metrics.Gauge("magos_rollout_current_step",
		"Index of the Rollout's current step (the number of steps when completed).")

	levelTransitions = metrics.Counter("magos_rollout_step_transitions_total",
		"Changes of the Rollout's current step.")

	deadlineExceeded = metrics.Gauge("magos_rollout_progress_deadline_exceeded",
		"1 while the Rollout's current step has not progressed for its spec.progressDeadline, else 0.")

	activeCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_rollouts_in_progress",
		Help: "Rollouts in phase Reconciling on the hub.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(activeCount)
}
