package testenv

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// HasLabels reports whether a gathered metric series carries every label of labels (and maybe
// others; a label it lacks counts as empty): how tests pick the series they read, from a registry or a scrape.
func HasLabels(m *dto.Metric, labels map[string]string) bool {
	have := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if have[k] != v {
			return false
		}
	}
	return true
}

// MetricSum adds up, over the series of a counter or histogram of controller-runtime's metrics
// registry whose labels include labels, the counter values or the histogram observation counts.
func MetricSum(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !HasLabels(m, labels) {
				continue
			}
			if m.GetHistogram() != nil {
				total += float64(m.GetHistogram().GetSampleCount())
			} else {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// standardMetricPrefixes are the metrics of the libraries Magos Fleet runs on (controller-runtime,
// client-go, the Go and process collectors), which keep their own names.
var standardMetricPrefixes = []string{"controller_runtime_", "workqueue_", "rest_client_", "certwatcher_",
	"leader_election_", "go_", "process_"}

// MetricConventionErrors checks gathered metric families against the conventions Magos Fleet's
// own metrics follow: a magos_ prefix; counters end in _total and nothing else does; histograms
// end in a unit (_seconds); gauges are not named _count; no label names a Workspace (name on a
// magos_workspace metric, or workspace anywhere). Standard libraries' metrics are skipped.
func MetricConventionErrors(families []*dto.MetricFamily) []error {
	var errs []error
	for _, f := range families {
		name := f.GetName()
		if slices.ContainsFunc(standardMetricPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		if !strings.HasPrefix(name, "magos_") {
			errs = append(errs, fmt.Errorf("%s: not prefixed magos_", name))
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(name, "_total") {
				errs = append(errs, fmt.Errorf("%s: a counter not named _total", name))
			}
		case dto.MetricType_HISTOGRAM:
			if !strings.HasSuffix(name, "_seconds") {
				errs = append(errs, fmt.Errorf("%s: a histogram without its unit (_seconds)", name))
			}
		default:
			if strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count") {
				errs = append(errs, fmt.Errorf("%s: a %s named like a counter", name, f.GetType()))
			}
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "workspace" || (l.GetName() == "name" && strings.HasPrefix(name, "magos_workspace")) {
					errs = append(errs, fmt.Errorf("%s: label %s names a Workspace", name, l.GetName()))
				}
			}
			break
		}
	}
	return errs
}

// CheckMetricConventions fails the test when a metric of controller-runtime's registry breaks
// the conventions of MetricConventionErrors.
func CheckMetricConventions(t testing.TB) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range MetricConventionErrors(families) {
		t.Error(err)
	}
}
