package project

import "github.com/magosfleet/magos/hub/fleetview"

// The Project metrics: magos_project_reconciles_total (fleetview.ObjectMetrics) and these.
var (
	metrics = fleetview.NewObjectMetrics("Project")

	workspaceCount = metrics.Gauge("magos_project_workspaces",
		"Workspaces of the Project across the fleet.")

	managedByRollout = metrics.Gauge("magos_project_managed_by_rollout",
		"1 when a Rollout orders the Project's Workspaces, 0 when they run in parallel.")
)
