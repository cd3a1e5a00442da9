package tests

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestDriftAcceptancesNameTheirWriter: with the hub chart installed in a real API server, its
// magos-rollout-approvals admission policy refuses a drift acceptance (spec.driftAcceptances),
// new or changed, whose acceptedBy is not its writer's own user name, so that the Rollout says
// truthfully who accepted a drift; a writer may add their own, leave others' as they were, and
// remove them. A rollback (spec.rollback) likewise must name its writer in requestedBy when it is
// new or changed; another writer may leave it as it is, or remove it. Fails without the policy's
// rules.
func TestDriftAcceptancesNameTheirWriter(t *testing.T) {
	c, kube, ctx := bareCluster(t, 5*time.Minute, namespace, "payments")
	if _, err := newHelmClient(t, c.Kubeconfig).install(ctx, "magos-hub", loadChart(t, "magos-hub"), singleClusterHubValues()); err != nil {
		t.Fatalf("helm install magos-hub: %v", err)
	}
	writers := map[string]client.Client{}
	for _, name := range []string{"alice", "bob"} {
		for _, o := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: name}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: name}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{"magosproject.io"}, Resources: []string{"rollouts"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "payments", Name: name}}},
		} {
			if err := kube.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		writers[name] = newClient(t, impersonatedConfig(c.Config, "payments", name))
	}
	user := func(name string) string { return "system:serviceaccount:payments:" + name }
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "cdn"}, Spec: magosv1.RolloutSpec{ProjectRef: "cdn",
		Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{{Name: "prod", Drift: magosv1.DriftBlock}}}}}
	if err := kube.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	acceptance := func(ws, digest, by string) magosv1.DriftAcceptance {
		return magosv1.DriftAcceptance{Workspace: ws, Digest: digest, AcceptedBy: by, AcceptedAt: metav1.NewTime(time.Now().Truncate(time.Second))}
	}
	// write sets the Rollout's acceptances as writer, on the Rollout as it is now.
	write := func(writer string, edit func([]magosv1.DriftAcceptance) []magosv1.DriftAcceptance) error {
		t.Helper()
		var cur magosv1.Rollout
		if err := kube.Get(ctx, client.ObjectKeyFromObject(ro), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.DriftAcceptances = edit(cur.Spec.DriftAcceptances)
		return writers[writer].Update(ctx, &cur)
	}
	refused := func(what string, err error, writer string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "acceptedBy must be "+user(writer)) {
			t.Errorf("%s: error %v, want Forbidden, saying acceptedBy must be %s", what, err, user(writer))
		}
	}

	// The policy is in force once the API server's admission has loaded it: the first refusal of
	// its older rule (alice may not approve: she lacks the verb approve).
	untilRefused(t, "alice approving a step without the verb approve", "needs the verb approve", func() error {
		var cur magosv1.Rollout
		if err := kube.Get(ctx, client.ObjectKeyFromObject(ro), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Approvals = []magosv1.StepApproval{{Step: "prod", ApprovedBy: user("alice"), ApprovedAt: metav1.Now(),
			Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/payments/api", Revision: "0123456789abcdef0123456789abcdef01234567", Digest: "d1"}}}}
		return writers["alice"].Update(ctx, &cur)
	})

	refused("alice accepting drift in bob's name", write("alice", func(as []magosv1.DriftAcceptance) []magosv1.DriftAcceptance {
		return append(as, acceptance("eu-west-1/payments/api", "d1", user("bob")))
	}), "alice")
	if err := write("alice", func(as []magosv1.DriftAcceptance) []magosv1.DriftAcceptance {
		return append(as, acceptance("eu-west-1/payments/api", "d1", user("alice")))
	}); err != nil {
		t.Fatalf("alice accepting drift in her own name: %v", err)
	}
	if err := write("bob", func(as []magosv1.DriftAcceptance) []magosv1.DriftAcceptance {
		return append(as, acceptance("us-east-1/payments/api", "d2", user("bob")))
	}); err != nil {
		t.Fatalf("bob accepting other drift in his own name, alice's left as it was: %v", err)
	}
	refused("bob changing alice's acceptance to another digest", write("bob", func(as []magosv1.DriftAcceptance) []magosv1.DriftAcceptance {
		as[0].Digest = "d9"
		return as
	}), "bob")
	if err := write("bob", func(as []magosv1.DriftAcceptance) []magosv1.DriftAcceptance {
		as[0] = acceptance(as[0].Workspace, "d9", user("bob"))
		return as
	}); err != nil {
		t.Errorf("bob accepting the new drift of alice's Workspace in his own name: %v", err)
	}
	if err := write("alice", func(as []magosv1.DriftAcceptance) []magosv1.DriftAcceptance { return as[1:] }); err != nil {
		t.Errorf("alice removing an acceptance: %v", err)
	}
	var got magosv1.Rollout
	if err := kube.Get(ctx, client.ObjectKeyFromObject(ro), &got); err != nil {
		t.Fatal(err)
	}
	if as := got.Spec.DriftAcceptances; len(as) != 1 || as[0].Workspace != "us-east-1/payments/api" || as[0].AcceptedBy != user("bob") {
		t.Errorf("drift acceptances %+v, want bob's one", as)
	}

	// A rollback (spec.rollback) names its writer the same way.
	rollback := func(writer string, edit func(*magosv1.Rollout)) error {
		t.Helper()
		var cur magosv1.Rollout
		if err := kube.Get(ctx, client.ObjectKeyFromObject(ro), &cur); err != nil {
			t.Fatal(err)
		}
		edit(&cur)
		return writers[writer].Update(ctx, &cur)
	}
	to := func(by, reason string) func(*magosv1.Rollout) {
		return func(r *magosv1.Rollout) {
			r.Spec.Rollback = &magosv1.RolloutRollback{RequestedBy: by, RequestedAt: metav1.NewTime(time.Now().Truncate(time.Second)), Reason: reason,
				Commits: []magosv1.RollbackCommit{{RepoURL: "https://git.example/infra.git", TargetRevision: "main", Commit: "0123456789abcdef0123456789abcdef01234567"}}}
		}
	}
	refusedRollback := func(what string, err error, writer string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "requestedBy must be "+user(writer)) {
			t.Errorf("%s: error %v, want Forbidden, saying requestedBy must be %s", what, err, user(writer))
		}
	}
	refusedRollback("alice rolling back in bob's name", rollback("alice", to(user("bob"), "")), "alice")
	if err := rollback("alice", to(user("alice"), "bad release")); err != nil {
		t.Fatalf("alice rolling back in her own name: %v", err)
	}
	refusedRollback("bob changing alice's rollback", rollback("bob", func(r *magosv1.Rollout) { r.Spec.Rollback.Reason = "mine now" }), "bob")
	if err := rollback("bob", func(r *magosv1.Rollout) { r.Spec.Paused = true }); err != nil {
		t.Errorf("bob pausing the Rollout, alice's rollback left as it was: %v", err)
	}
	if err := rollback("bob", func(r *magosv1.Rollout) { r.Spec.Rollback = nil }); err != nil {
		t.Errorf("bob cancelling the rollback: %v", err)
	}
}
