package workspace_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/app"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// denyData is a policy expression that denies the test modules' terraform_data resource;
// allowAll passes every plan.
const (
	denyData = "object.resource_changes.all(rc, rc.type != 'terraform_data')"
	allowAll = "true"
)

// TestPolicySelectorMatchesNothing: a non-empty policySelector that selects no policy, the
// Workspace's or its Project's, fails the run with NoPolicyMatched and a message naming the
// selector and whose it is; no plan starts, so nothing is applied. Once a policy matches, a
// retry plans and applies, and status.policies lists the policy that ran.
func TestPolicySelectorMatchesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		onProject bool   // the selector is the Project's, else the Workspace's
		whose     string // how the message names it (%s: the namespace)
	}{
		{name: "Workspace selector", whose: "spec.validation.policySelector of Workspace %s/checked"},
		{name: "Project selector", onProject: true, whose: "spec.validation.policySelector of Project %s/demo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := spoke.Client
			ctx := context.Background()
			ns := newNamespace(t)
			// A typo: no policy carries this label (policies are cluster-wide: the namespace
			// keeps it this test's own).
			category := "secrity-" + ns
			selector := &magosv1.ValidationSpec{PolicySelector: ptr.To(magosv1.MatchLabels(map[string]string{"policy.magosproject.io/category": category}))}
			var wsValidation *magosv1.ValidationSpec
			if tt.onProject {
				if err := createWithRetry(ctx, c, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
					Spec: magosv1.ProjectSpec{Validation: selector}}); err != nil {
					t.Fatal(err)
				}
			} else {
				wsValidation = selector
			}
			repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
			key := newWorkspace(t, c, ns, "checked", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.Validation = wsValidation })
			ws := pendingRun(t, c, key, "", "")
			grant(t, c, key, ws.Status.CurrentRunID)
			ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseValidationFailed, magosv1.ReasonNoPolicyMatched))
			want := fmt.Sprintf(tt.whose, ns) + ` ("policy.magosproject.io/category=` + category + `") matches no ValidatingPolicy`
			if !strings.Contains(ws.Status.Message, want) {
				t.Errorf("message %q, want it to say %q", ws.Status.Message, want)
			}
			if ws.Status.ResourceChanges != nil || ws.Status.CurrentRevision != "" || ws.Status.ObservedRevision != "" || len(ws.Status.Policies) != 0 {
				t.Errorf("status %+v: a plan ran although no policy matched", ws.Status)
			}
			waitEvent(t, c, key, magosv1.ReasonNoPolicyMatched)
			if notes := events(t, c, key, magosv1.ReasonPlanJobCreated); len(notes) > 0 {
				t.Errorf("a plan started although no policy matched: %v", notes)
			}

			// The policy the selector meant appears: a retry plans, passes and applies.
			policy := newPolicy(t, c, "checked-"+ns, category, allowAll)
			annotate(t, c, key, map[string]any{keys.ReconcileRequest: "fixed"})
			ws = runToApplied(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
			wantPolicies := []magosv1.EvaluatedPolicy{{Name: policy, Source: magosv1.PolicySourceSelector}}
			if !reflect.DeepEqual(ws.Status.Policies, wantPolicies) {
				t.Errorf("status.policies %+v, want %+v", ws.Status.Policies, wantPolicies)
			}
		})
	}
}

// TestMandatoryPolicies runs an agent with a mandatory policy set on a cluster of its own. A
// mandatory policy that does not exist fails every plan closed (MandatoryPolicyMissing) before
// it starts. Once it exists, the Workspace's selector replaces its Project's (upstream's rule:
// the Project's policy, which would deny, does not run) but the mandatory policies run all the
// same, and one of them denies the plan; status.policies lists what ran and why.
func TestMandatoryPolicies(t *testing.T) {
	t.Parallel()
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"mandatory"}})
	cluster := fleet.Spokes["mandatory"]
	c := cluster.Client
	ctx := context.Background()
	mgr, err := newAgent(cluster.Config, filepath.Join(t.TempDir(), "data"), func(o *app.Options) {
		o.Runner.Kubeconfig = cluster.Kubeconfig
		o.InputsKeySecret = types.NamespacedName{}
		o.Logger = o.Logger.WithName("mandatory")
		o.MandatoryPolicies = []string{"org-deny-data", "org-audit"}
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, ctx, "agent", mgr.Start)

	const ns = "apps"
	label := func(v string) *magosv1.ValidationSpec {
		return &magosv1.ValidationSpec{PolicySelector: ptr.To(magosv1.MatchLabels(map[string]string{"policy.magosproject.io/category": v}))}
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: magosv1.ProjectSpec{Validation: label("project")}},
	} {
		if err := createWithRetry(ctx, c, o); err != nil {
			t.Fatal(err)
		}
	}
	newPolicy(t, c, "project-deny-data", "project", denyData) // the Project's: replaced, never runs
	newPolicy(t, c, "workspace-allow", "workspace", allowAll) // the Workspace's
	newPolicy(t, c, "org-deny-data", "org", denyData)         // mandatory; org-audit is missing

	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "checked", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.Validation = label("workspace") })
	ws := pendingRun(t, c, key, "", "")
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseValidationFailed, magosv1.ReasonMandatoryPolicyMissing))
	if !strings.Contains(ws.Status.Message, "mandatory ValidatingPolicy org-audit") || strings.Contains(ws.Status.Message, "org-deny-data") {
		t.Errorf("message %q, want it to name the missing mandatory policy org-audit (only)", ws.Status.Message)
	}
	if ws.Status.ResourceChanges != nil || ws.Status.CurrentRevision != "" || len(ws.Status.Policies) != 0 {
		t.Errorf("status %+v: a plan ran although a mandatory policy is missing", ws.Status)
	}

	newPolicy(t, c, "org-audit", "org", allowAll)
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "audit-created"})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseValidationFailed, magosv1.ReasonPolicyViolation))
	var violated []string
	for _, v := range ws.Status.PolicyViolations {
		violated = append(violated, v.Policy)
	}
	if !reflect.DeepEqual(violated, []string{"org-deny-data"}) {
		t.Errorf("violations by %v (%+v), want by the mandatory org-deny-data only (the Project's policy is replaced)", violated, ws.Status.PolicyViolations)
	}
	want := []magosv1.EvaluatedPolicy{
		{Name: "org-audit", Source: magosv1.PolicySourceMandatory},
		{Name: "org-deny-data", Source: magosv1.PolicySourceMandatory},
		{Name: "workspace-allow", Source: magosv1.PolicySourceSelector},
	}
	if !reflect.DeepEqual(ws.Status.Policies, want) {
		t.Errorf("status.policies %+v, want %+v", ws.Status.Policies, want)
	}
	if ws.Status.ObservedRevision != "" {
		t.Errorf("observedRevision %q: a denied plan was applied", ws.Status.ObservedRevision)
	}
}
