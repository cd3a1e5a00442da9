package project

import "github.com/magosfleet/magos/hub/decider"

// The Project metrics: magos_project_reconciles_total (decider.ObjectMetrics) and these.
var (
	metrics = decider.NewObjectMetrics("Project")

	workspaceCount = metrics.Gauge("magos_project_workspaces",
		"Workspaces of the Project across the fleet.")

	managedByRollout = metrics.Gauge("magos_project_managed_by_rollout",
		"1 when a Rollout orders the Project's Workspaces, 0 when they run in parallel.")
)
