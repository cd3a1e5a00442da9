package testenv

import dto "github.com/prometheus/client_model/go"

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
