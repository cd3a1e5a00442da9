package tests

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestAgentMandatoryPolicies: policy.mandatory reaches the agent as --mandatory-policies (the
// flag magos-agent's TestConfig parses into its mandatoryPolicies), empty by default; a name
// that is not a ValidatingPolicy name, or one listed twice, is refused at install.
func TestAgentMandatoryPolicies(t *testing.T) {
	args := func(values map[string]any) []string {
		objs := render(t, "magos-agent", values)
		return as[appsv1.Deployment](t, objs["Deployment/magos-agent"]).Spec.Template.Spec.Containers[0].Args
	}
	if got := args(map[string]any{"clusterName": "eu-west-1"}); !slices.Contains(got, "--mandatory-policies=") {
		t.Errorf("default args %v lack an empty --mandatory-policies=", got)
	}
	got := args(map[string]any{"clusterName": "eu-west-1",
		"policy": map[string]any{"mandatory": []any{"org-deny-public-buckets", "org.require-tags"}}})
	if !slices.Contains(got, "--mandatory-policies=org-deny-public-buckets,org.require-tags") {
		t.Errorf("args %v lack --mandatory-policies=org-deny-public-buckets,org.require-tags", got)
	}

	for name, tc := range map[string]struct {
		mandatory []any
		want      string
	}{
		"not a name":   {[]any{"Org_Tags"}, "does not match pattern"},
		"listed twice": {[]any{"org-audit", "org-audit"}, "items at 0 and 1 are equal"},
	} {
		_, err := tryRender("magos-agent", map[string]any{"clusterName": "eu-west-1", "policy": map[string]any{"mandatory": tc.mandatory}})
		if err == nil || !strings.Contains(err.Error(), "at '/policy/mandatory") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to name /policy/mandatory and say %q", name, err, tc.want)
		}
	}
}
