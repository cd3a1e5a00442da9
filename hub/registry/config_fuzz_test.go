package registry_test

import (
	"testing"

	"github.com/magosfleet/magos/hub/registry"
)

// FuzzLoadConfig: the hub's configuration file is written by an administrator but read by a
// process that holds the hub's credentials; no file may crash it. Whatever the bytes,
// LoadConfig returns an error or a configuration that validates again.
func FuzzLoadConfig(f *testing.F) {
	for _, seed := range []string{
		"",
		"clusters: []\n",
		`
clusters:
  - name: us-east-1
    labels: {region: us-east-1, env: prod}
    agent: {}
  - name: lab
    kubeconfig: {secretRef: {namespace: magos-system, name: lab-kubeconfig}}
  - name: local
    kubeconfig: {path: /etc/magos/hub.kubeconfig}
bindings:
  - {namespaces: [payments], clusters: [us-east-1]}
  - {namespaces: ["*"], clusterSelector: {matchLabels: {env: prod}}}
  - namespaces: [web]
    clusterSelector: {matchExpressions: [{key: region, operator: In, values: [us-east-1]}]}
`,
		"leaderElect: true\nlog: {level: debug, development: true}\nprojectParallelGracePeriod: 45s\n",
		"clusters:\n  - {name: a, agent: {}, kubeconfig: {path: /k}}\n",
		"clusters:\n  - name: a\n    labels: {\"bad key!\": \"v\"}\n    agent: {}\n",
		"projectParallelGracePeriod: -1s\n",
		"clusters: {name: x}\n",
		"&a [*a, *a]\n",
		"bindings:\n  - {namespaces: [], clusters: [nope]}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := registry.LoadConfig(writeConfig(t, string(data)), nil)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("LoadConfig accepted a configuration that does not validate again: %v\nfile:\n%s", err, data)
		}
	})
}
