package tests

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestAgentRunnerValues checks that runner.resources, runner.image.pullPolicy and
// runner.storageClassName reach the agent's flags, and that a quantity left out clears the agent's own default.
func TestAgentRunnerValues(t *testing.T) {
	args := func(values map[string]any) []string {
		values["clusterName"] = "x"
		return as[appsv1.Deployment](t, render(t, "magos-agent", values)["Deployment/magos-agent"]).Spec.Template.Spec.Containers[0].Args
	}
	defaults := args(map[string]any{})
	for _, arg := range []string{"--runner-image-pull-policy=IfNotPresent", "--runner-cpu-request=250m",
		"--runner-memory-request=256Mi", "--runner-cpu-limit=", "--runner-memory-limit=1Gi"} {
		if !slices.Contains(defaults, arg) {
			t.Errorf("default args %v lack %s", defaults, arg)
		}
	}
	if slices.ContainsFunc(defaults, func(a string) bool { return strings.HasPrefix(a, "--runner-storage-class") }) {
		t.Errorf("default args %v name a StorageClass: the cluster's default must apply", defaults)
	}
	if sc := args(map[string]any{"runner": map[string]any{"storageClassName": "local-path"}}); !slices.Contains(sc, "--runner-storage-class=local-path") {
		t.Errorf("with runner.storageClassName the args %v lack --runner-storage-class=local-path", sc)
	}
	none := args(map[string]any{"runner": map[string]any{"resources": nil}})
	for _, arg := range []string{"--runner-cpu-request=", "--runner-memory-request=", "--runner-cpu-limit=", "--runner-memory-limit="} {
		if !slices.Contains(none, arg) {
			t.Errorf("with runner.resources null the args %v lack %s (the agent's defaults would apply)", none, arg)
		}
	}
	custom := args(map[string]any{"runner": map[string]any{
		"image":     map[string]any{"pullPolicy": "Always"},
		"resources": map[string]any{"requests": map[string]any{"cpu": 1, "memory": "2Gi"}, "limits": map[string]any{"cpu": "1500m", "memory": nil}},
	}})
	for _, arg := range []string{"--runner-image-pull-policy=Always", "--runner-cpu-request=1",
		"--runner-memory-request=2Gi", "--runner-cpu-limit=1500m", "--runner-memory-limit="} {
		if !slices.Contains(custom, arg) {
			t.Errorf("args %v lack %s", custom, arg)
		}
	}
}
