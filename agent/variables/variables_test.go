package variables_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/variables"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestReservedEnvRefusedUnderAnOlderCRD: when the API server's VariableSet CRD predates the
// rule on reserved env names (simulated by removing the rule from the installed CRD), a
// VariableSet can hold MAGOS_RUN_SPEC or TF_CLI_ARGS_plan; Build still refuses it with a
// ConfigError that names the set, the variable and the rule, so the agent fails the plan (a
// ConfigError is PlanFailed with its message and an Event, TestUserErrorsFailThePlan in
// agent/workspace) and never starts the run.
func TestReservedEnvRefusedUnderAnOlderCRD(t *testing.T) {
	api := testenv.Start(t, localcluster.Options{}).Hub
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dropReservedRule(ctx, t, api.Client)

	for _, name := range []string{runner.EnvSpec, "TF_CLI_ARGS_plan", "KUBE_HOST"} {
		t.Run(name, func(t *testing.T) {
			setName := "vars-" + strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			set := &magosv1.VariableSet{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: setName},
				Spec: magosv1.VariableSetSpec{Env: []magosv1.EnvironmentVariable{
					{Name: "AWS_REGION", Value: ptr.To("eu-west-1")},
					{Name: name, Value: ptr.To(`{"operation":"apply"}`)},
				}},
			}
			// The CRD change takes a moment to reach the API server's validation.
			testenv.Eventually(t, 30*time.Second, func() error { return api.Client.Create(ctx, set) })
			ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "network"},
				Spec: magosv1.WorkspaceSpec{VariableSetRefs: []magosv1.LocalObjectReference{{Name: setName}}}}
			env, _, err := variables.Build(ctx, api.Client, ws, nil)
			if err == nil {
				t.Fatalf("Build accepted env name %s, want it refused; env %v", name, env)
			}
			if !variables.IsConfigError(err) {
				t.Errorf("error %v is not a ConfigError: the run would be retried, not failed", err)
			}
			want := fmt.Sprintf("VariableSet %q (referenced by Workspace network): %v", setName, runner.ReservedEnvError(name))
			if err.Error() != want {
				t.Errorf("error\n%q\nwant\n%q", err, want)
			}
		})
	}
}

// dropReservedRule removes the rule on reserved env names from the installed VariableSet CRD,
// as an API server with an older CRD would have it.
func dropReservedRule(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := c.Get(ctx, client.ObjectKey{Name: "variablesets.magosproject.io"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	dropped := 0
	for _, v := range versions {
		path := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "env", "items", "x-kubernetes-validations"}
		rules, _, _ := unstructured.NestedSlice(v.(map[string]any), path...)
		var kept []any
		for _, r := range rules {
			if strings.Contains(fmt.Sprint(r.(map[string]any)["rule"]), "MAGOS_") {
				dropped++
				continue
			}
			kept = append(kept, r)
		}
		if err := unstructured.SetNestedSlice(v.(map[string]any), kept, path...); err != nil {
			t.Fatal(err)
		}
	}
	if dropped == 0 {
		t.Fatal("the VariableSet CRD has no rule on reserved env names to drop")
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
}
