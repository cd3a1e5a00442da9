package project

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Values of the result label of magos_project_reconciles_total.
const (
	resultSuccess = "success"
	resultError   = "error"
)

// The Project metrics, named after Prometheus' conventions (docs/operations.md lists upstream's
// names they replace).
var (
	reconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_project_reconciles_total",
		Help: "Project reconciles, by result (success or error).",
	}, []string{"namespace", "name", "result"})

	workspaceCount = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_project_workspaces",
		Help: "Workspaces of the Project across the fleet.",
	}, []string{"namespace", "name"})

	managedByRollout = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_project_managed_by_rollout",
		Help: "1 when a Rollout orders the Project's Workspaces, 0 when they run in parallel.",
	}, []string{"namespace", "name"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(reconcileTotal, workspaceCount, managedByRollout)
}

// forget drops the gauge series of a deleted Project.
func forget(namespace, name string) {
	workspaceCount.DeleteLabelValues(namespace, name)
	managedByRollout.DeleteLabelValues(namespace, name)
}
