package tests

import (
	"strings"
	"testing"
)

// TestValuesSchema checks that each chart's values.schema.json refuses a bad value at install,
// with an error naming the value and what is wrong, and accepts the documented values.
func TestValuesSchema(t *testing.T) {
	agent := func(extra map[string]any) map[string]any {
		v := map[string]any{"clusterName": "eu-west-1"}
		for k, e := range extra {
			v[k] = e
		}
		return v
	}
	cases := []struct {
		name, chart string
		values      map[string]any
		want        []string // each must appear in the error
	}{
		{"log format", "magos-hub", map[string]any{"log": map[string]any{"format": "text"}},
			[]string{"at '/log/format'", "'json', 'console'"}},
		{"hub pull policy", "magos-hub", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}},
			[]string{"at '/image/pullPolicy'", "'Always', 'IfNotPresent', 'Never'"}},
		{"replica count type", "magos-hub", map[string]any{"replicaCount": "two"},
			[]string{"at '/replicaCount'", "want integer"}},
		{"misspelt key", "magos-hub", map[string]any{"leaderElection": map[string]any{"enable": true}},
			[]string{"at '/leaderElection'", "'enable' not allowed"}},
		{"cluster without a name", "magos-hub", map[string]any{"config": map[string]any{"clusters": []any{map[string]any{"agent": map[string]any{}}}}},
			[]string{"at '/config/clusters/0'", "missing property 'name'"}},
		{"cluster name not a DNS label", "magos-hub", map[string]any{"config": map[string]any{"clusters": []any{map[string]any{"name": "US_East", "agent": map[string]any{}}}}},
			[]string{"at '/config/clusters/0/name'", "does not match pattern"}},
		{"hub setting in config", "magos-hub", map[string]any{"config": map[string]any{"leaderElect": true}},
			[]string{"at '/config'", "'leaderElect' not allowed"}},
		{"no cluster name", "magos-agent", map[string]any{},
			[]string{"missing property 'clusterName'"}},
		{"cluster name not a DNS label", "magos-agent", agent(map[string]any{"clusterName": "EU-West-1"}),
			[]string{"at '/clusterName'", "does not match pattern"}},
		{"runner mode", "magos-agent", agent(map[string]any{"runner": map[string]any{"mode": "kubelet"}}),
			[]string{"at '/runner/mode'", "'job', 'local'"}},
		{"runner pull policy", "magos-agent", agent(map[string]any{"runner": map[string]any{"image": map[string]any{"pullPolicy": "sometimes"}}}),
			[]string{"at '/runner/image/pullPolicy'", "'Always', 'IfNotPresent', 'Never'"}},
		{"runner quantity", "magos-agent", agent(map[string]any{"runner": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "lots"}}}}),
			[]string{"at '/runner/resources/limits/memory'", "does not match pattern"}},
		{"no Workspace namespace", "magos-agent", agent(map[string]any{"workspaceNamespaces": []any{}}),
			[]string{"at '/workspaceNamespaces'", "minItems"}},
		{"log level", "magos-agent", agent(map[string]any{"log": map[string]any{"level": "verbose"}}),
			[]string{"at '/log/level'", "'debug', 'info', 'warn', 'error'"}},
		{"hub token expiry", "magos-agent", agent(map[string]any{"hub": map[string]any{"tokenExpiry": "an hour"}}),
			[]string{"at '/hub/tokenExpiry'", "does not match pattern"}},
	}
	for _, tc := range cases {
		t.Run(tc.chart+" "+tc.name, func(t *testing.T) {
			_, err := tryRender(tc.chart, tc.values)
			if err == nil {
				t.Fatalf("values %v accepted", tc.values)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), tc.chart+":") || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q, want it to name %s and say %q", err, tc.chart, want)
				}
			}
		})
	}

	// What the docs show is accepted.
	for name, v := range map[string]map[string]any{
		"magos-hub": {"config": map[string]any{"clusters": []any{
			map[string]any{"name": "us-east-1", "labels": map[string]any{"region": "us-east-1"}, "agent": map[string]any{}},
			map[string]any{"name": "local", "kubeconfig": map[string]any{"secretRef": map[string]any{"namespace": namespace, "name": "local-kubeconfig", "key": "kubeconfig"}}},
		}}, "admissionPolicy": map[string]any{"enabled": false}, "image": map[string]any{"pullPolicy": "Always"}},
		"magos-agent": agent(map[string]any{"workspaceNamespaces": []any{"default", "payments"}, "crds": map[string]any{"install": false},
			"hub":    map[string]any{"kubeconfigSecret": map[string]any{"name": "magos-hub-kubeconfig"}, "tokenExpiry": "2h30m"},
			"runner": map[string]any{"image": map[string]any{"pullPolicy": "Never"}, "resources": map[string]any{"requests": map[string]any{"cpu": 1, "memory": "512Mi"}, "limits": map[string]any{"cpu": "1.5"}}}}),
	} {
		if _, err := tryRender(name, v); err != nil {
			t.Errorf("%s refuses documented values: %v", name, err)
		}
	}
}
