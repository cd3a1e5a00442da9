package testenv_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magosfleet/magos/pkg/testenv"
)

// TestMetricConventionErrors: the checker finds each kind of broken convention and passes the
// conventional names and the standard libraries' own.
func TestMetricConventionErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := func(name string, labels ...string) {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "h"}, labels)
		reg.MustRegister(c)
		values := make([]string, len(labels))
		c.WithLabelValues(values...).Inc()
	}
	gauge := func(name string) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "h"})
		reg.MustRegister(g)
		g.Set(1)
	}
	histogram := func(name string) {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: "h"})
		reg.MustRegister(h)
		h.Observe(1)
	}
	// Conventional.
	counter("magos_workspace_runs_total", "operation", "outcome")
	counter("magos_rollout_reconciles_total", "namespace", "name", "result")
	gauge("magos_workspaces_running")
	histogram("magos_workspace_run_duration_seconds")
	counter("workqueue_adds_total", "name")
	gauge("go_goroutines")
	// Broken, one way each.
	counter("workspace_reconcile_total", "result")
	counter("magos_workspace_reconciles")
	gauge("magos_workspace_active_count")
	gauge("magos_rollouts_total")
	histogram("magos_run_duration")
	counter("magos_workspace_phase_transitions_total", "namespace", "name")
	counter("magos_runs_total", "workspace")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, err := range testenv.MetricConventionErrors(families) {
		got = append(got, err.Error())
	}
	want := []string{
		"magos_rollouts_total: a GAUGE named like a counter",
		"magos_run_duration: a histogram without its unit (_seconds)",
		"magos_runs_total: label workspace names a Workspace",
		"magos_workspace_active_count: a GAUGE named like a counter",
		"magos_workspace_phase_transitions_total: label name names a Workspace",
		"magos_workspace_reconciles: a counter not named _total",
		"workspace_reconcile_total: not prefixed magos_",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
