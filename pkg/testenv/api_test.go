package testenv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// One API server serves every test of this file.
var api *localcluster.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.MainOptions{Setup: func(e *testenv.MainEnv) error {
		api = e.Fleet.Hub
		return nil
	}})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func validWorkspace(name string) *magosv1.Workspace {
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: "payments"},
			Source:     magosv1.Source{RepoURL: "https://example.com/infra.git", TargetRevision: "main"},
			Terraform:  magosv1.TerraformSpec{Version: "1.10.6"},
		},
	}
}

func validRollout(name string) *magosv1.Rollout {
	return &magosv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: magosv1.RolloutSpec{
			ProjectRef: name,
			Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
				{Name: "dev", Selector: magosv1.MatchLabels(map[string]string{"env": "dev"})},
				{Name: "prod", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"})},
			}},
		},
	}
}

// TestRolloutStepControlsAccepted: the step controls' valid forms are accepted and read back.
func TestRolloutStepControlsAccepted(t *testing.T) {
	r := validRollout("r-controls")
	r.Spec.Strategy.Steps[0].MaxConcurrency = ptr.To(intstr.FromString("25%"))
	r.Spec.Strategy.Steps[0].MaxFailures = ptr.To(intstr.FromInt32(2))
	r.Spec.Strategy.Steps[0].MinSuccessTime = &metav1.Duration{Duration: 30 * time.Minute}
	r.Spec.Strategy.Steps[1].MaxConcurrency = ptr.To(intstr.FromInt32(1))
	r.Spec.Strategy.Steps[1].MaxFailures = ptr.To(intstr.FromString("100%"))
	r.Spec.ProgressDeadline = &metav1.Duration{Duration: 10 * time.Minute}
	r.Spec.ChangeWindows = []magosv1.ChangeWindow{
		{Schedule: "0 9 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}, TimeZone: "Europe/Paris"},
		{Schedule: "@daily", Duration: metav1.Duration{Duration: time.Hour}},
	}
	if err := api.Client.Create(ctx(t), r); err != nil {
		t.Fatal(err)
	}
	got := &magosv1.Rollout{}
	if err := api.Client.Get(ctx(t), client.ObjectKeyFromObject(r), got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, r.Spec) {
		t.Fatalf("read back %+v, want %+v", got.Spec.Strategy.Steps, r.Spec.Strategy.Steps)
	}
}

func TestWorkspaceDefaults(t *testing.T) {
	ws := validWorkspace("defaults")
	if err := api.Client.Create(ctx(t), ws); err != nil {
		t.Fatal(err)
	}
	got := &magosv1.Workspace{}
	if err := api.Client.Get(ctx(t), client.ObjectKeyFromObject(ws), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.AutoApply == nil || !*got.Spec.AutoApply {
		t.Errorf("autoApply = %v, want true", got.Spec.AutoApply)
	}
	if got.Spec.Source.Path != "." {
		t.Errorf("source.path = %q, want .", got.Spec.Source.Path)
	}
	if got.Spec.Terraform.Binary != magosv1.BinaryOpenTofu {
		t.Errorf("terraform.binary = %q, want tofu", got.Spec.Terraform.Binary)
	}
	if got.Spec.ServiceAccountName != magosv1.DefaultServiceAccountName {
		t.Errorf("serviceAccountName = %q, want magos-job", got.Spec.ServiceAccountName)
	}
	if !got.Spec.AutoApplies() {
		t.Error("AutoApplies() = false")
	}
}

func TestExplicitFalseAutoApplyIsKept(t *testing.T) {
	ws := validWorkspace("manual-apply")
	ws.Spec.AutoApply = ptr.To(false)
	if err := api.Client.Create(ctx(t), ws); err != nil {
		t.Fatal(err)
	}
	got := &magosv1.Workspace{}
	if err := api.Client.Get(ctx(t), client.ObjectKeyFromObject(ws), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.AutoApplies() {
		t.Fatal("autoApply: false was defaulted back to true")
	}
}

// TestAdmissionRejections checks that what upstream accepts and then mishandles is refused by
// the API server, with a message that names the problem.
func TestAdmissionRejections(t *testing.T) {
	cases := []struct {
		name string
		obj  func() client.Object
		want string
	}{
		{"workspace run history over 50", func() client.Object {
			w := validWorkspace("w-history-big")
			w.Spec.RunHistory = &magosv1.RunHistorySpec{Limit: new(int32(51))}
			return w
		}, "spec.runHistory.limit: Invalid value: 51: spec.runHistory.limit in body should be less than or equal to 50"},
		{"workspace run history negative", func() client.Object {
			w := validWorkspace("w-history-negative")
			w.Spec.RunHistory = &magosv1.RunHistorySpec{Limit: new(int32(-1))}
			return w
		}, "spec.runHistory.limit in body should be greater than or equal to 0"},
		{"rollout empty step name", func() client.Object {
			r := validRollout("r-empty-step")
			r.Spec.Strategy.Steps[0].Name = ""
			return r
		}, "spec.strategy.steps[0].name"},
		{"rollout duplicate step names", func() client.Object {
			r := validRollout("r-dup")
			r.Spec.Strategy.Steps[1].Name = "dev"
			return r
		}, "step names must be unique"},
		{"rollout empty projectRef", func() client.Object {
			r := validRollout("r-noproject")
			r.Spec.ProjectRef = ""
			return r
		}, "spec.projectRef"},
		{"rollout name differs from projectRef", func() client.Object {
			r := validRollout("r-mismatch")
			r.Spec.ProjectRef = "other"
			return r
		}, "Rollout name must exactly match the projectRef"},
		{"rollout selector unknown operator", func() client.Object {
			r := validRollout("r-op")
			r.Spec.Strategy.Steps[0].Selector.MatchExpressions = []magosv1.LabelSelectorRequirement{{Key: "env", Operator: "Equals", Values: []string{"dev"}}}
			return r
		}, `Unsupported value: "Equals"`},
		{"rollout selector In without values", func() client.Object {
			r := validRollout("r-novalues")
			r.Spec.Strategy.Steps[0].Selector.MatchExpressions = []magosv1.LabelSelectorRequirement{{Key: "env", Operator: "In"}}
			return r
		}, "values must be non-empty for the In and NotIn operators"},
		{"rollout selector Exists with values", func() client.Object {
			r := validRollout("r-exists")
			r.Spec.Strategy.Steps[0].Selector.MatchExpressions = []magosv1.LabelSelectorRequirement{{Key: "env", Operator: "Exists", Values: []string{"x"}}}
			return r
		}, "empty for Exists and DoesNotExist"},
		{"rollout selector bad key", func() client.Object {
			r := validRollout("r-badkey")
			r.Spec.Strategy.Steps[0].Selector.MatchLabels = map[string]magosv1.LabelValue{"env name!": "dev"}
			return r
		}, "matchLabels keys must be label keys"},
		{"rollout selector bad value", func() client.Object {
			r := validRollout("r-badvalue")
			r.Spec.Strategy.Steps[0].Selector.MatchLabels = map[string]magosv1.LabelValue{"env": "dev/prod"}
			return r
		}, "spec.strategy.steps[0].selector.matchLabels.env"},
		{"rollout empty clusterSelector", func() client.Object {
			r := validRollout("r-emptycluster")
			r.Spec.Strategy.Steps[0].ClusterSelector = &magosv1.LabelSelector{}
			return r
		}, "clusterSelector must not be empty"},
		{"rollout maxConcurrency 0", func() client.Object {
			r := validRollout("r-conc0")
			r.Spec.Strategy.Steps[0].MaxConcurrency = ptr.To(intstr.FromInt32(0))
			return r
		}, "maxConcurrency must be a number of at least 1 or a percentage from 1% to 100%"},
		{"rollout maxConcurrency 0%", func() client.Object {
			r := validRollout("r-conc0p")
			r.Spec.Strategy.Steps[0].MaxConcurrency = ptr.To(intstr.FromString("0%"))
			return r
		}, "maxConcurrency must be a number of at least 1"},
		{"rollout maxConcurrency not a number", func() client.Object {
			r := validRollout("r-concx")
			r.Spec.Strategy.Steps[0].MaxConcurrency = ptr.To(intstr.FromString("two"))
			return r
		}, "maxConcurrency must be a number of at least 1"},
		{"rollout maxFailures negative", func() client.Object {
			r := validRollout("r-failneg")
			r.Spec.Strategy.Steps[0].MaxFailures = ptr.To(intstr.FromInt32(-1))
			return r
		}, "maxFailures must be a number of at least 0 or a percentage from 0% to 100%"},
		{"rollout maxFailures above 100%", func() client.Object {
			r := validRollout("r-fail150")
			r.Spec.Strategy.Steps[0].MaxFailures = ptr.To(intstr.FromString("150%"))
			return r
		}, "maxFailures must be a number of at least 0"},
		{"rollout minSuccessTime 0s", func() client.Object {
			r := validRollout("r-soak0")
			r.Spec.Strategy.Steps[0].MinSuccessTime = &metav1.Duration{}
			return r
		}, "minSuccessTime must be a duration above 0s and at most 720h"},
		{"rollout minSuccessTime above 720h", func() client.Object {
			r := validRollout("r-soaklong")
			r.Spec.Strategy.Steps[0].MinSuccessTime = &metav1.Duration{Duration: 721 * time.Hour}
			return r
		}, "minSuccessTime must be a duration above 0s and at most 720h"},
		{"rollout progressDeadline 0s", func() client.Object {
			r := validRollout("r-deadline0")
			r.Spec.ProgressDeadline = &metav1.Duration{}
			return r
		}, "progressDeadline must be a duration above 0s"},
		{"rollout targets Sometimes", func() client.Object {
			r := validRollout("r-targets")
			r.Spec.Targets = "Sometimes"
			return r
		}, `spec.targets: Unsupported value: "Sometimes": supported values: "Dynamic", "Frozen"`},
		{"rollout two approvals of one step", func() client.Object {
			r := validRollout("r-approvals")
			a := magosv1.StepApproval{Step: r.Spec.Strategy.Steps[0].Name, ApprovedBy: "magos-test-admin", ApprovedAt: metav1.Now(),
				Plans: []magosv1.ApprovedPlan{{Workspace: "c/ns/w", Digest: "a1b2c3d4e5f6"}}}
			r.Spec.Approvals = []magosv1.StepApproval{a, a}
			return r
		}, "at most one approval per step"},
		{"rollout changeWindow schedule of four fields", func() client.Object {
			r := validRollout("r-window4")
			r.Spec.ChangeWindows = []magosv1.ChangeWindow{{Schedule: "0 9 * *", Duration: metav1.Duration{Duration: time.Hour}}}
			return r
		}, "schedule must be a cron schedule of five fields"},
		{"rollout changeWindow without a duration", func() client.Object {
			r := validRollout("r-window0")
			r.Spec.ChangeWindows = []magosv1.ChangeWindow{{Schedule: "0 9 * * 1-5"}}
			return r
		}, "duration must be a duration above 0s and at most 8760h"},
		{"rollout minSuccessTime not a duration", func() client.Object {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "magosproject.io/v1alpha1", "kind": "Rollout",
				"metadata": map[string]any{"name": "r-soak-soon", "namespace": "default"},
				"spec": map[string]any{
					"projectRef": "r-soak-soon",
					"strategy": map[string]any{"steps": []any{map[string]any{
						"name": "dev", "selector": map[string]any{"matchLabels": map[string]any{"env": "dev"}}, "minSuccessTime": "soon",
					}}},
				},
			}}
			return u
		}, "spec.strategy.steps[0].minSuccessTime"},
		{"workspace empty projectRef", func() client.Object {
			ws := validWorkspace("w-noproject")
			ws.Spec.ProjectRef.Name = ""
			return ws
		}, "spec.projectRef.name"},
		{"workspace name too long for its Jobs", func() client.Object {
			return validWorkspace(strings.Repeat("a", 64))
		}, "Workspace names must be at most 63 characters"},
		{"workspace repoURL not a URL", func() client.Object {
			ws := validWorkspace("w-badurl")
			ws.Spec.Source.RepoURL = "github.com/acme/infra"
			return ws
		}, "repoURL must be an https://"},
		{"workspace path leaves the repo", func() client.Object {
			ws := validWorkspace("w-badpath")
			ws.Spec.Source.Path = "modules/../../etc"
			return ws
		}, "path must be relative to the repository root"},
		{"workspace absolute tfvarsPath", func() client.Object {
			ws := validWorkspace("w-badtfvars")
			ws.Spec.Terraform.TfvarsPath = "/etc/passwd"
			return ws
		}, "tfvarsPath must be relative"},
		{"workspace version not exact", func() client.Object {
			ws := validWorkspace("w-badversion")
			ws.Spec.Terraform.Version = "~> 1.5"
			return ws
		}, "spec.terraform.version"},
		{"workspace empty version", func() client.Object {
			ws := validWorkspace("w-noversion")
			ws.Spec.Terraform.Version = ""
			return ws
		}, "terraform.version is required"},
		{"workspace terraform {}", func() client.Object {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "magosproject.io/v1alpha1", "kind": "Workspace",
				"metadata": map[string]any{"name": "w-terraform-empty", "namespace": "default"},
				"spec": map[string]any{
					"projectRef": map[string]any{"name": "payments"},
					"source":     map[string]any{"repoURL": "https://example.com/infra.git", "targetRevision": "main"},
					"terraform":  map[string]any{},
				},
			}}
			return u
		}, "terraform.version is required"},
		{"workspace unknown binary", func() client.Object {
			ws := validWorkspace("w-badbinary")
			ws.Spec.Terraform.Binary = "pulumi"
			return ws
		}, `Unsupported value: "pulumi"`},
		{"workspace zero timeout", func() client.Object {
			ws := validWorkspace("w-timeout")
			ws.Spec.Plan = &magosv1.JobOverrides{TimeoutSeconds: ptr.To[int64](0)}
			return ws
		}, "spec.plan.timeoutSeconds"},
		{"workspace reconcile-interval 0s", func() client.Object {
			ws := validWorkspace("w-interval-zero")
			ws.Annotations = map[string]string{"magosproject.io/reconcile-interval": "0s"}
			return ws
		}, `magosproject.io/reconcile-interval must be a positive duration such as 3m or 1h30m, got "0s"`},
		{"workspace reconcile-interval negative", func() client.Object {
			ws := validWorkspace("w-interval-negative")
			ws.Annotations = map[string]string{"magosproject.io/reconcile-interval": "-1m"}
			return ws
		}, `got "-1m"`},
		{"workspace reconcile-interval unparsable", func() client.Object {
			ws := validWorkspace("w-interval-soon")
			ws.Annotations = map[string]string{"magosproject.io/reconcile-interval": "soon"}
			return ws
		}, `got "soon"`},
		{"workspace git-poll-interval zero", func() client.Object {
			ws := validWorkspace("w-poll-zero")
			ws.Annotations = map[string]string{"magosproject.io/git-poll-interval": "0"}
			return ws
		}, "magosproject.io/git-poll-interval must be a positive duration"},
		{"variable with value and valueFrom", func() client.Object {
			return &magosv1.VariableSet{
				ObjectMeta: metav1.ObjectMeta{Name: "vs-both", Namespace: "default"},
				Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{{
					Name: "region", Value: ptr.To("x"),
					ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "s", Key: "k"}},
				}}},
			}
		}, "a variable needs exactly one of value and valueFrom"},
		{"valueFrom with two sources", func() client.Object {
			return &magosv1.VariableSet{
				ObjectMeta: metav1.ObjectMeta{Name: "vs-two", Namespace: "default"},
				Spec: magosv1.VariableSetSpec{Env: []magosv1.EnvironmentVariable{{
					Name: "TOKEN", ValueFrom: &magosv1.ValueSource{
						SecretKeyRef:    &magosv1.KeyReference{Name: "s", Key: "k"},
						ConfigMapKeyRef: &magosv1.KeyReference{Name: "c", Key: "k"},
					},
				}}},
			}
		}, "valueFrom needs exactly one of secretKeyRef and configMapKeyRef"},
		{"env name with a dash", func() client.Object {
			return &magosv1.VariableSet{
				ObjectMeta: metav1.ObjectMeta{Name: "vs-envname", Namespace: "default"},
				Spec:       magosv1.VariableSetSpec{Env: []magosv1.EnvironmentVariable{{Name: "MY-VAR", Value: ptr.To("x")}}},
			}
		}, "spec.env[0].name"},
		{"duplicate variable names", func() client.Object {
			return &magosv1.VariableSet{
				ObjectMeta: metav1.ObjectMeta{Name: "vs-dup", Namespace: "default"},
				Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{
					{Name: "a", Value: ptr.To("1")}, {Name: "a", Value: ptr.To("2")},
				}},
			}
		}, "Duplicate value"},
		{"direct cluster without kubeconfig", func() client.Object {
			return &magosv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "lab"},
				Spec:       magosv1.ClusterSpec{Transport: magosv1.TransportDirect},
			}
		}, "a direct cluster needs a kubeconfig"},
		{"kubeconfig with path and secret", func() client.Object {
			return &magosv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "lab2"},
				Spec: magosv1.ClusterSpec{Transport: magosv1.TransportDirect, Kubeconfig: &magosv1.KubeconfigSource{
					Path: "/k", SecretRef: &magosv1.SecretKeySelector{Namespace: "n", Name: "s"},
				}},
			}
		}, "kubeconfig needs exactly one of path, secretRef and inCluster: true"},
		{"kubeconfig with path and inCluster", func() client.Object {
			return &magosv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "lab3"},
				Spec: magosv1.ClusterSpec{Transport: magosv1.TransportDirect, Kubeconfig: &magosv1.KubeconfigSource{
					Path: "/k", InCluster: true,
				}},
			}
		}, "kubeconfig needs exactly one of path, secretRef and inCluster: true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The admission policy takes a moment to become active on a fresh API server, so an
			// accepted object is deleted and tried again until the deadline.
			testenv.Eventually(t, 30*time.Second, func() error {
				obj := tc.obj()
				err := api.Client.Create(ctx(t), obj)
				if err == nil {
					_ = api.Client.Delete(ctx(t), obj)
					return fmt.Errorf("accepted, want a rejection mentioning %q", tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					return fmt.Errorf("error %q does not mention %q", err, tc.want)
				}
				return nil
			})
		})
	}
}

func TestValidObjectsAreAccepted(t *testing.T) {
	r := validRollout("accepted")
	r.Spec.Strategy.Steps[0].Selector.MatchExpressions = []magosv1.LabelSelectorRequirement{
		{Key: "magosproject.io/tier", Operator: "In", Values: []string{"a", "b"}},
		{Key: "canary", Operator: "DoesNotExist"},
	}
	r.Spec.Strategy.Steps[1].ClusterSelector = &magosv1.LabelSelector{MatchLabels: map[string]magosv1.LabelValue{"region": "eu-west-1"}}
	ws := validWorkspace(strings.Repeat("w", 63))
	ws.Annotations = map[string]string{"magosproject.io/reconcile-interval": "1h30m", "magosproject.io/git-poll-interval": "45s"}
	ws.Spec.Source.RepoURL = "git@github.com:acme/infra.git"
	for _, obj := range []client.Object{r, ws} {
		if err := api.Client.Create(ctx(t), obj); err != nil {
			t.Errorf("%T rejected: %v", obj, err)
		}
	}
}

// TestRoundTrip writes every field of every kind, spec and status, and reads it back unchanged.
func TestRoundTrip(t *testing.T) {
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	cond := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "ApplySucceeded", Message: "m", ObservedGeneration: 1, LastTransitionTime: now}}
	sel := &magosv1.LabelSelector{
		MatchLabels:      map[string]magosv1.LabelValue{"policy.magosproject.io/category": "security"},
		MatchExpressions: []magosv1.LabelSelectorRequirement{{Key: "tier", Operator: "NotIn", Values: []string{"x"}}},
	}
	ws := validWorkspace("roundtrip")
	ws.Spec = magosv1.WorkspaceSpec{
		ProjectRef:         magosv1.ProjectReference{Name: "payments"},
		AutoApply:          ptr.To(false),
		Annotations:        map[string]string{"a": "b"},
		Plan:               &magosv1.JobOverrides{Annotations: map[string]string{"p": "1"}, TimeoutSeconds: ptr.To[int64](600)},
		Apply:              &magosv1.JobOverrides{Annotations: map[string]string{"q": "2"}, TimeoutSeconds: ptr.To[int64](1200)},
		Source:             magosv1.Source{RepoURL: "file:///srv/git/infra", TargetRevision: "v1.2.3", Path: "envs/prod"},
		Terraform:          magosv1.TerraformSpec{Binary: "terraform", Version: "1.5.7", TfvarsPath: "envs/prod.tfvars"},
		Validation:         &magosv1.ValidationSpec{PolicySelector: sel},
		ServiceAccountName: "runner",
		VariableSetRefs:    []magosv1.LocalObjectReference{{Name: "common"}, {Name: "prod"}},
		DestroyOnDelete:    true,
	}
	wsStatus := magosv1.WorkspaceStatus{
		ObservedGeneration: 1, Phase: magosv1.PhaseApplied, Reason: "ApplySucceeded", Message: "ok",
		ObservedRevision: strings.Repeat("a", 40), CurrentRevision: strings.Repeat("b", 40),
		LastReconcileTime: &now, NextReconcileTime: &now, ObservedReconcileInterval: "3m0s",
		PolicyViolations: []magosv1.PolicyViolation{{Policy: "p", Message: "m"}},
		ResourceChanges:  &magosv1.ResourceChanges{Add: 1, Change: 2, Destroy: 3},
		CurrentRunID:     "20261202T101010-0123abcd", CurrentRunTrigger: "manual",
		Origin:     &magosv1.WorkspaceOrigin{Cluster: "us-east-1", Namespace: "payments", Name: "api", UID: "u", Generation: 4},
		Conditions: cond,
	}
	project := &magosv1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: "default"},
		Spec: magosv1.ProjectSpec{Description: "d", VariableSetRefs: []magosv1.LocalObjectReference{{Name: "common"}},
			Validation: &magosv1.ValidationSpec{PolicySelector: &magosv1.LabelSelector{}}},
	}
	projectStatus := magosv1.ProjectStatus{ObservedGeneration: 1, Phase: magosv1.PhaseReady, Reason: "DefaultParallel",
		Message: "m", LastReconcileTime: &now, Workspaces: 3, Clusters: []string{"a", "b"}, Conditions: cond}
	rollout := validRollout("roundtrip")
	rollout.Spec.Paused = true
	rollout.Spec.Strategy.Steps[1].ClusterSelector = sel
	rolloutStatus := magosv1.RolloutStatus{ObservedGeneration: 1, Phase: magosv1.PhaseReconciling, CurrentStep: 1,
		CurrentStepName: "prod", Reason: "LevelProgressing", Message: "m", LastReconcileTime: &now,
		AppliedWorkspaces: 1, TotalWorkspaces: 2,
		Steps: []magosv1.StepStatus{{Name: "dev", Phase: "Completed", Matched: 1, Applied: 1, Clusters: []string{"us-east-1"}},
			{Name: "prod", Phase: "Progressing", Matched: 1, Running: 1}},
		Conditions: cond}
	vs := &magosv1.VariableSet{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: "default"},
		Spec: magosv1.VariableSetSpec{
			Variables: []magosv1.Variable{
				{Name: "region", Value: ptr.To("eu-west-1")},
				{Name: "tags", Value: ptr.To(`{team = "x"}`), HCL: true},
				{Name: "token", ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "s", Key: "k"}}, Sensitive: true},
			},
			Env: []magosv1.EnvironmentVariable{
				{Name: "TF_REGISTRY_CLIENT_TIMEOUT", Value: ptr.To("15")},
				{Name: "AWS_PROFILE", ValueFrom: &magosv1.ValueSource{ConfigMapKeyRef: &magosv1.KeyReference{Name: "c", Key: "k"}}},
			},
		},
	}
	vsStatus := magosv1.VariableSetStatus{ObservedGeneration: 1, Conditions: cond}
	cluster := &magosv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Labels: map[string]string{"region": "eu-west-1"}},
		Spec: magosv1.ClusterSpec{Transport: magosv1.TransportDirect, Kubeconfig: &magosv1.KubeconfigSource{
			SecretRef: &magosv1.SecretKeySelector{Namespace: "magos-system", Name: "lab", Key: "config"}}},
	}
	clusterStatus := magosv1.ClusterStatus{ObservedGeneration: 1, Namespace: "magos-cluster-x", LastHeartbeatTime: &now,
		AgentVersion: "v0.1.0", Workspaces: 5, Conditions: cond}

	type pair struct {
		obj    client.Object
		setSt  func(client.Object)
		fresh  client.Object
		specOf func(client.Object) any
	}
	pairs := []pair{
		{ws, func(o client.Object) { o.(*magosv1.Workspace).Status = wsStatus }, &magosv1.Workspace{},
			func(o client.Object) any { w := o.(*magosv1.Workspace); return []any{w.Spec, w.Status} }},
		{project, func(o client.Object) { o.(*magosv1.Project).Status = projectStatus }, &magosv1.Project{},
			func(o client.Object) any { p := o.(*magosv1.Project); return []any{p.Spec, p.Status} }},
		{rollout, func(o client.Object) { o.(*magosv1.Rollout).Status = rolloutStatus }, &magosv1.Rollout{},
			func(o client.Object) any { r := o.(*magosv1.Rollout); return []any{r.Spec, r.Status} }},
		{vs, func(o client.Object) { o.(*magosv1.VariableSet).Status = vsStatus }, &magosv1.VariableSet{},
			func(o client.Object) any { v := o.(*magosv1.VariableSet); return []any{v.Spec, v.Status} }},
		{cluster, func(o client.Object) { o.(*magosv1.Cluster).Status = clusterStatus }, &magosv1.Cluster{},
			func(o client.Object) any { c := o.(*magosv1.Cluster); return []any{c.Spec, c.Status} }},
	}
	for _, p := range pairs {
		t.Run(fmt.Sprintf("%T", p.obj), func(t *testing.T) {
			if err := api.Client.Create(ctx(t), p.obj); err != nil {
				t.Fatal(err)
			}
			p.setSt(p.obj)
			if err := api.Client.Status().Update(ctx(t), p.obj); err != nil {
				t.Fatal(err)
			}
			if err := api.Client.Get(ctx(t), client.ObjectKeyFromObject(p.obj), p.fresh); err != nil {
				t.Fatal(err)
			}
			want, got := p.specOf(p.obj), p.specOf(p.fresh)
			if !equality.Semantic.DeepEqual(want, got) {
				wj, _ := json.MarshalIndent(want, "", " ")
				gj, _ := json.MarshalIndent(got, "", " ")
				t.Fatalf("round trip changed the object:\nwant %s\ngot  %s", wj, gj)
			}
		})
	}
}

// TestPrinterColumns asks the API server for the table view kubectl shows.
func TestPrinterColumns(t *testing.T) {
	ws := validWorkspace("printed")
	if err := api.Client.Create(ctx(t), ws); err != nil {
		t.Fatal(err)
	}
	ws.Status = magosv1.WorkspaceStatus{Phase: magosv1.PhaseApplied, Reason: "ApplySucceeded", ObservedRevision: "abc123",
		Origin: &magosv1.WorkspaceOrigin{Cluster: "eu-west-1", Namespace: "default", Name: "printed", Generation: 1}}
	if err := api.Client.Status().Update(ctx(t), ws); err != nil {
		t.Fatal(err)
	}
	r := validRollout("printed")
	if err := api.Client.Create(ctx(t), r); err != nil {
		t.Fatal(err)
	}
	r.Status = magosv1.RolloutStatus{Phase: magosv1.PhaseReconciling, CurrentStep: 1, CurrentStepName: "prod",
		AppliedWorkspaces: 2, TotalWorkspaces: 5, Reason: "LevelProgressing"}
	if err := api.Client.Status().Update(ctx(t), r); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		resource, name string
		want           map[string]any
	}{
		{"workspaces", "printed", map[string]any{"Cluster": "eu-west-1", "Project": "payments", "Phase": "Applied", "Revision": "abc123"}},
		{"rollouts", "printed", map[string]any{"Phase": "Reconciling", "Project": "printed", "Step": "prod", "Applied": float64(2), "Total": float64(5)}},
	}
	for _, tc := range cases {
		t.Run(tc.resource, func(t *testing.T) {
			row := tableRow(t, api.Config, "/apis/magosproject.io/v1alpha1/namespaces/default/"+tc.resource+"/"+tc.name)
			for col, want := range tc.want {
				if got, ok := row[col]; !ok || got != want {
					t.Errorf("column %s = %v, want %v (row %v)", col, got, want, row)
				}
			}
		})
	}
}

// tableRow GETs path as a meta.k8s.io Table and returns its one row by column name.
func tableRow(t *testing.T, cfg *rest.Config, path string) map[string]any {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s: %s", cfg.Host, path, resp.Status, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("want one row, got %d", len(table.Rows))
	}
	row := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		row[col.Name] = table.Rows[0].Cells[i]
	}
	return row
}

// TestHubRefusesProjectDefaults: with the magos-hub chart's admission policy, a hub Project
// that sets Workspace defaults the hub would not enforce is refused with a message that says
// where to set them; a Project without them is accepted. (Its own API server: the policy must
// not reach the other tests' Projects.)
func TestHubRefusesProjectDefaults(t *testing.T) {
	fleet := testenv.Start(t, localcluster.Options{})
	hub := fleet.Hub
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := localcluster.ApplyFile(ctx(t), hub.Client, root+"/charts/magos-hub/files/admission-policy.yaml"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		spec magosv1.ProjectSpec
		want string
	}{
		{"variableSetRef", magosv1.ProjectSpec{VariableSetRefs: []magosv1.LocalObjectReference{{Name: "common"}}},
			"spec.variableSetRef is not enforced on the hub"},
		{"validation", magosv1.ProjectSpec{Validation: &magosv1.ValidationSpec{}}, "spec.validation is not enforced on the hub"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testenv.Eventually(t, 30*time.Second, func() error {
				p := &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "defaults-" + strings.ToLower(tc.name), Namespace: "default"}, Spec: tc.spec}
				err := hub.Client.Create(ctx(t), p)
				if err == nil {
					_ = hub.Client.Delete(ctx(t), p)
					return fmt.Errorf("accepted, want a rejection mentioning %q", tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					return fmt.Errorf("error %q does not mention %q", err, tc.want)
				}
				return nil
			})
		})
	}
	p := &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"}, Spec: magosv1.ProjectSpec{Description: "no defaults"}}
	if err := hub.Client.Create(ctx(t), p); err != nil {
		t.Fatalf("a Project without defaults was refused: %v", err)
	}
}

// TestRolloutApprovalNeedsTheApproveVerb: with the magos-hub chart's approval policy (the local
// hub loads it), a user who may update a Rollout but lacks the verb approve cannot add, change
// or remove an approval; an approver can, only in their own name; other edits of a Rollout that
// carries approvals still need no approve verb.
func TestRolloutApprovalNeedsTheApproveVerb(t *testing.T) {
	hub := api
	ns := "approvals"
	if err := hub.Client.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	bindRole(t, ns, "editor-ed", "rollouts", "get", "update", "patch")
	bindRole(t, ns, "approver-amy", "rollouts", "get", "update", "patch", "approve")
	as := func(user string) client.Client { return impersonate(t, user) }
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: magosv1.RolloutSpec{ProjectRef: "web",
		Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{{Name: "prod", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"}), RequireApproval: true}}}}}
	if err := hub.Client.Create(ctx(t), ro); err != nil {
		t.Fatal(err)
	}
	approval := func(by string) magosv1.StepApproval {
		return magosv1.StepApproval{Step: "prod", ApprovedBy: by, ApprovedAt: metav1.NewTime(time.Now().Truncate(time.Second)),
			Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/" + ns + "/app", Revision: "0123abcd", Digest: "a1b2c3d4e5f6"}}}
	}
	// update sets the approvals as user and returns the API server's answer (the policy may take
	// a moment to be enforced after the server started: retried while it lets a forbidden write
	// through).
	update := func(user string, approvals []magosv1.StepApproval, paused bool) error {
		t.Helper()
		c := as(user)
		var cur magosv1.Rollout
		if err := c.Get(ctx(t), client.ObjectKeyFromObject(ro), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Approvals, cur.Spec.Paused = approvals, paused
		return c.Update(ctx(t), &cur)
	}
	refused := func(name, user string, approvals []magosv1.StepApproval, want string) {
		t.Run(name, func(t *testing.T) {
			testenv.Eventually(t, 30*time.Second, func() error {
				err := update(user, approvals, false)
				if err == nil {
					return fmt.Errorf("accepted, want a refusal mentioning %q", want)
				}
				if !strings.Contains(err.Error(), want) {
					return fmt.Errorf("error %q does not mention %q", err, want)
				}
				return nil
			})
		})
	}
	refused("an editor cannot approve", "editor-ed", []magosv1.StepApproval{approval("editor-ed")},
		"needs the verb approve on rollouts.magosproject.io, which user editor-ed does not have")
	refused("an approver approves only in their own name", "approver-amy", []magosv1.StepApproval{approval("someone-else")},
		"approvedBy must be approver-amy")
	if err := update("approver-amy", []magosv1.StepApproval{approval("approver-amy")}, false); err != nil {
		t.Fatalf("the approver's own approval was refused: %v", err)
	}
	// The approval stays; an editor may still change the rest of the Rollout.
	var cur magosv1.Rollout
	if err := hub.Client.Get(ctx(t), client.ObjectKeyFromObject(ro), &cur); err != nil {
		t.Fatal(err)
	}
	if err := update("editor-ed", cur.Spec.Approvals, true); err != nil {
		t.Errorf("an editor's pause of a Rollout with an approval was refused: %v", err)
	}
	refused("an editor cannot remove an approval", "editor-ed", nil, "needs the verb approve")

	// Rejections: the verb approve and the writer's own name, like approvals.
	rejection := func(by string) []magosv1.StepRejection {
		return []magosv1.StepRejection{{Step: "prod", RejectedBy: by, Reason: "not today", RejectedAt: metav1.NewTime(time.Now().Truncate(time.Second)),
			Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/" + ns + "/app", Revision: "0123abcd", Digest: "a1b2c3d4e5f6"}}}}
	}
	reject := func(user string, rejections []magosv1.StepRejection) error {
		c := as(user)
		var cur magosv1.Rollout
		if err := c.Get(ctx(t), client.ObjectKeyFromObject(ro), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Rejections = rejections
		return c.Update(ctx(t), &cur)
	}
	for _, tc := range []struct{ name, user, by, want string }{
		{"an editor cannot reject", "editor-ed", "editor-ed", "changing the rejections of Rollout web needs the verb approve"},
		{"an approver rejects only in their own name", "approver-amy", "someone-else", "rejectedBy must be approver-amy"},
		{"an approver's rejection", "approver-amy", "approver-amy", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := reject(tc.user, rejection(tc.by))
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestWorkspaceRequestsNeedTheirVerbs: with the magos-hub chart's request policy (the local hub
// loads it), asking for a retry or approving a plan on a mirror needs the verb retry or approve,
// in the writer's own name; changing a grant needs the verb grant, which write access to the
// mirror does not give.
func TestWorkspaceRequestsNeedTheirVerbs(t *testing.T) {
	hub := api
	ns := "magos-cluster-requests"
	if err := hub.Client.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	bindRole(t, ns, "watcher-wes", "workspaces", "get", "patch")
	bindRole(t, ns, "operator-olga", "workspaces", "get", "patch", "retry", "approve")
	ws := validWorkspace("app")
	ws.Namespace = ns
	if err := hub.Client.Create(ctx(t), ws); err != nil {
		t.Fatal(err)
	}
	annotate := func(user string, values map[string]any) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": values}})
		return impersonate(t, user).Patch(ctx(t), ws.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
	}
	for _, tc := range []struct {
		name, user string
		values     map[string]any
		want       string // "" for accepted
	}{
		{"a retry needs the verb retry", "watcher-wes", map[string]any{"magosproject.io/retry-run": "r1", "magosproject.io/requested-by": "watcher-wes"},
			"asking for a retry of app needs the verb retry on workspaces.magosproject.io in namespace " + ns + ", which user watcher-wes does not have"},
		{"an approval needs the verb approve", "watcher-wes", map[string]any{"magosproject.io/approve-run": "r1", "magosproject.io/requested-by": "watcher-wes"},
			"needs the verb approve"},
		{"a request in another's name", "operator-olga", map[string]any{"magosproject.io/retry-run": "r1", "magosproject.io/requested-by": "someone-else"},
			"magosproject.io/requested-by must be operator-olga"},
		{"a grant needs the verb grant", "operator-olga", map[string]any{"magosproject.io/execution-allowed": "true", "magosproject.io/granted-run": "r1"},
			"changing the grant of app needs the verb grant"},
		{"a plan bound by hand needs the verb grant", "operator-olga", map[string]any{"magosproject.io/granted-plan": "a1b2c3d4e5f6"}, "needs the verb grant"},
		{"an operator's retry", "operator-olga", map[string]any{"magosproject.io/retry-run": "r1", "magosproject.io/requested-by": "operator-olga"}, ""},
		{"an operator's approval", "operator-olga", map[string]any{"magosproject.io/approve-run": "r1", "magosproject.io/requested-by": "operator-olga"}, ""},
		{"other annotations need nothing more", "watcher-wes", map[string]any{"example.com/note": "hello"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.Eventually(t, 30*time.Second, func() error {
				err := annotate(tc.user, tc.values)
				switch {
				case tc.want == "" && err != nil:
					return fmt.Errorf("refused: %v", err)
				case tc.want == "":
					return nil
				case err == nil:
					return fmt.Errorf("accepted, want a refusal mentioning %q", tc.want)
				case !strings.Contains(err.Error(), tc.want):
					return fmt.Errorf("error %q does not mention %q", err, tc.want)
				}
				return nil
			})
		})
	}
}

// bindRole gives user the verbs on the Magos resource in namespace ns of the shared API server:
// a Role and its RoleBinding, both named for the user.
func bindRole(t *testing.T, ns, user, resource string, verbs ...string) {
	t.Helper()
	objs := []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{magosv1.GroupVersion.Group}, Resources: []string{resource}, Verbs: verbs}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}},
	}
	for _, o := range objs {
		if err := api.Client.Create(ctx(t), o); err != nil {
			t.Fatal(err)
		}
	}
}

// impersonate returns a client of the shared API server acting as user.
func impersonate(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(api.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: api.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
