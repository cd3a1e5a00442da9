package rollout

import (
	"testing"

	"github.com/magosfleet/magos/hub/hubtest"
)

// TestMetricNames: the Rollout metrics keep the names, help texts and labels dashboards use.
func TestMetricNames(t *testing.T) {
	perRollout := []string{"namespace", "name"}
	hubtest.RequireRegistered(t,
		hubtest.Metric{Name: "magos_rollout_reconciles_total", Help: "Rollout reconciles, by result (success or error).",
			Labels: []string{"namespace", "name", "result"}},
		hubtest.Metric{Name: "magos_rollout_current_step", Help: "Index of the Rollout's current step (the number of steps when completed).",
			Labels: perRollout},
		hubtest.Metric{Name: "magos_rollout_step_transitions_total", Help: "Changes of the Rollout's current step.",
			Labels: perRollout},
		hubtest.Metric{Name: "magos_rollout_progress_deadline_exceeded", Help: "1 while the Rollout's current step has not progressed for its spec.progressDeadline, else 0.",
			Labels: perRollout},
		hubtest.Metric{Name: "magos_rollouts_in_progress", Help: "Rollouts in phase Reconciling on the hub."},
	)
}
