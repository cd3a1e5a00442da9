package workspace

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the Workspace controller, on controller-runtime's registry (served at /metrics),
// named after Prometheus' conventions (docs/operations.md lists upstream's names they replace).
// No label names a Workspace: the namespace is the finest grain.
var (
	reconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_workspace_reconciles_total",
		Help: "Reconciles of Workspaces, by result (success or error).",
	}, []string{"namespace", "result"})

	phaseTransitionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_workspace_phase_transitions_total",
		Help: "Phase changes of Workspaces, by the phase entered.",
	}, []string{"namespace", "phase"})

	activeCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_workspaces_running",
		Help: "Workspaces in Planning or Applying.",
	})

	runDurationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "magos_workspace_run_duration_seconds",
		Help: "Duration of plan, apply and destroy runs, by operation and outcome.",
		// Plans and applies take seconds to an hour.
		Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600},
	}, []string{"operation", "outcome"})

	runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_workspace_runs_total",
		Help: "Finished plan, apply and destroy runs, by operation and outcome.",
	}, []string{"operation", "outcome"})

	driftChecksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_drift_checks_total",
		Help: "Finished drift checks (spec.driftDetection), by result: NoDrift, Drifted or Failed.",
	}, []string{"result"})

	workspaceDrifted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_workspace_drifted",
		Help: "1 when the Workspace's last drift check found drift at the commit it applied, else 0.",
	}, []string{"namespace", "workspace"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(reconcileTotal, phaseTransitionsTotal, activeCount, runDurationSeconds, runsTotal, driftChecksTotal, workspaceDrifted)
	})
}

// activeSet tracks which Workspaces are in flight, for magos_workspaces_running, without
// listing every Workspace on every reconcile (upstream's cost).
type activeSet struct {
	mu  sync.Mutex
	set map[types.NamespacedName]bool
}

func (a *activeSet) update(key types.NamespacedName, active bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.set == nil {
		a.set = map[types.NamespacedName]bool{}
	}
	if active {
		a.set[key] = true
	} else {
		delete(a.set, key)
	}
	activeCount.Set(float64(len(a.set)))
}
