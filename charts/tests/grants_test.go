package tests

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
)

// TestOnlyGrantHoldersGrantOnASpoke: on a spoke cluster where only the magos-agent chart is
// installed, a person who may create and edit Workspaces (the verbs of the built-in edit role)
// can neither create a Workspace that carries a grant nor add or change one
// (magosproject.io/execution-allowed, granted-*): the chart's magos-workspace-grants admission
// policy refuses it, naming the verb grant. Other annotations stay theirs to change. The agent's
// ServiceAccount, which copies the hub's grants down, may. Fails without the policy.
func TestOnlyGrantHoldersGrantOnASpoke(t *testing.T) {
	c, kube, ctx := bareCluster(t, 5*time.Minute, namespace, "payments")
	if _, err := newHelmClient(t, c.Kubeconfig).install(ctx, "magos-agent", loadChart(t, "magos-agent"),
		map[string]any{"clusterName": "eu-west-1", "workspaceNamespaces": []any{"payments"}}); err != nil {
		t.Fatalf("helm install magos-agent: %v", err)
	}

	const editor = "editor"
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: editor}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: editor}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"magosproject.io"}, Resources: []string{"workspaces"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: editor},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: editor},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "payments", Name: editor}}},
	} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	asEditor := newClient(t, impersonatedConfig(c.Config, "payments", editor))
	asAgent := newClient(t, impersonatedConfig(c.Config, namespace, "magos-agent"))

	workspace := func(name string, annotations map[string]string) *magosv1.Workspace {
		return &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: name, Annotations: annotations},
			Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: "cdn"},
				Source:    magosv1.Source{RepoURL: "https://git.example/cdn.git", TargetRevision: "main", Path: "."},
				Terraform: magosv1.TerraformSpec{Version: "1.10.6"}}}
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "needs the verb grant") {
			t.Errorf("%s: error %v, want Forbidden, naming the verb grant (the policy's reason)", what, err)
		}
	}
	grant := func(run string) client.Patch {
		return client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"magosproject.io/execution-allowed":"true","magosproject.io/granted-run":"`+run+`"}}}`))
	}

	// The policy is in force once the API server's admission has loaded it: the first refusal.
	untilRefused(t, "an editor creating a Workspace carrying execution-allowed: true", "needs the verb grant", func() error {
		return asEditor.Create(ctx, workspace("granted", map[string]string{"magosproject.io/execution-allowed": "true"}))
	})

	ws := workspace("cdn", map[string]string{"team": "payments"})
	if err := asEditor.Create(ctx, ws); err != nil {
		t.Fatalf("an editor creating a Workspace without a grant: %v", err)
	}
	err := asEditor.Patch(ctx, ws.DeepCopy(), grant("20261206T050645-dbfa49ea"))
	refused("an editor granting a run", err)
	t.Logf("the refusal: %v", err)
	if err := asEditor.Patch(ctx, ws.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"magosproject.io/reconcile-request":"now","team":"cdn"}}}`))); err != nil {
		t.Errorf("an editor changing other annotations: %v", err)
	}
	if err := asAgent.Patch(ctx, ws.DeepCopy(), grant("20261206T050645-dbfa49ea")); err != nil {
		t.Fatalf("the agent copying a grant down: %v", err)
	}
	refused("an editor moving a grant to another run", asEditor.Patch(ctx, ws.DeepCopy(), grant("20261206T060000-00000000")))
	refused("an editor removing a grant", asEditor.Patch(ctx, ws.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"magosproject.io/execution-allowed":null}}}`))))
	if err := asAgent.Patch(ctx, ws.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"magosproject.io/execution-allowed":null,"magosproject.io/granted-run":null}}}`))); err != nil {
		t.Errorf("the agent removing a grant: %v", err)
	}
	got := &magosv1.Workspace{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations["magosproject.io/execution-allowed"]; ok || got.Annotations["team"] != "cdn" {
		t.Errorf("annotations %v, want the editor's change kept and no grant", got.Annotations)
	}
}

// TestPoliciesNameEveryGrantKey: the admission policies that guard grants list the grant's
// annotations in CEL, where pkg/grant cannot reach; each must name every key of grant.Keys
// (the leader fence also magosproject.io/decided-by), so that a key added to the grant is not
// left unguarded by one of them.
func TestPoliciesNameEveryGrantKey(t *testing.T) {
	policies := map[string][]string{
		"../magos-agent/files/grant-policy.yaml":  grant.Keys,
		"../magos-hub/files/approval-policy.yaml": grant.Keys,
		"../magos-hub/files/leader-policy.yaml":   append(slices.Clone(grant.Keys), keys.DecidedBy),
	}
	for path, want := range policies {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range want {
			if !strings.Contains(string(raw), "'"+k+"'") {
				t.Errorf("%s does not name the grant key %s", path, k)
			}
		}
	}
}

// untilRefused repeats write until the API server refuses it with an error that says want: an
// admission policy is in force only once the API server has loaded it. A write that is accepted,
// or still not refused so after a minute, fails the test; what names the write.
func untilRefused(t *testing.T, what, want string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := write()
		if err != nil && strings.Contains(err.Error(), want) {
			return
		}
		if err == nil {
			t.Fatalf("%s was accepted, want a refusal saying %q", what, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v, want a refusal saying %q", what, err, want)
		}
		<-time.After(200 * time.Millisecond) // polling the API server's admission, with a deadline
	}
}
