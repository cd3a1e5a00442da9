package workspace

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the Workspace controller, on controller-runtime's registry (served at /metrics).
// The first four keep upstream's names and labels.
var (
	reconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workspace_reconcile_total",
		Help: "Reconciles of Workspaces, by result (success or error).",
	}, []string{"namespace", "name", "result"})

	phaseTransitionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workspace_phase_transitions_total",
		Help: "Phase changes of Workspaces, by the phase entered.",
	}, []string{"namespace", "name", "phase"})

	jobDurationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "workspace_job_duration_seconds",
		Help:    "Duration of successful plan and apply runs.",
		Buckets: prometheus.DefBuckets,
	}, []string{"namespace", "name", "type"})

	activeCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "workspace_active_count",
		Help: "Workspaces in Planning or Applying.",
	})

	runDurationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "workspace_run_duration_seconds",
		Help:    "Duration of plan, apply and destroy runs, by operation and outcome.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200},
	}, []string{"operation", "outcome"})

	runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workspace_runs_total",
		Help: "Finished plan, apply and destroy runs, by operation and outcome.",
	}, []string{"operation", "outcome"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(reconcileTotal, phaseTransitionsTotal, jobDurationSeconds, activeCount, runDurationSeconds, runsTotal)
	})
}

// activeSet tracks which Workspaces are in flight, for workspace_active_count, without
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
