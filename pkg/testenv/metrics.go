package testenv

import (
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
