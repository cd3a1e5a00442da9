package project

import (
	"testing"

	"github.com/magosfleet/magos/hub/hubtest"
)

// TestMetricNames: the Project metrics keep the names, help texts and labels dashboards use.
func TestMetricNames(t *testing.T) {
	hubtest.RequireRegistered(t,
		hubtest.Metric{Name: "magos_project_reconciles_total", Help: "Project reconciles, by result (success or error).",
			Labels: []string{"namespace", "name", "result"}},
		hubtest.Metric{Name: "magos_project_workspaces", Help: "Workspaces of the Project across the fleet.",
			Labels: []string{"namespace", "name"}},
		hubtest.Metric{Name: "magos_project_managed_by_rollout", Help: "1 when a Rollout orders the Project's Workspaces, 0 when they run in parallel.",
			Labels: []string{"namespace", "name"}},
	)
}
