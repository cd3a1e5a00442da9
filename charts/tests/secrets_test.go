package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestHubSecretAccess checks that the hub may get exactly the Secrets its config names as direct
// clusters' kubeconfigs, and no other: one Role per namespace, by name, get only (it holds
// create and delete on Secrets, never a read, only to grant them to agents).
func TestHubSecretAccess(t *testing.T) {
	ref := func(ns, name string) map[string]any {
		return map[string]any{"secretRef": map[string]any{"namespace": ns, "name": name, "key": "kubeconfig"}}
	}
	objs := render(t, "magos-hub", map[string]any{"config": map[string]any{"clusters": []any{
		map[string]any{"name": "lab", "kubeconfig": ref(namespace, "lab-kubeconfig")},
		map[string]any{"name": "edge", "kubeconfig": ref(namespace, "edge-kubeconfig")},
		map[string]any{"name": "edge-2", "kubeconfig": ref(namespace, "edge-kubeconfig")},
		map[string]any{"name": "dr", "kubeconfig": ref("dr-secrets", "dr")},
		map[string]any{"name": "file", "kubeconfig": map[string]any{"path": "/etc/kubeconfigs/file"}},
		map[string]any{"name": "us-east-1", "agent": map[string]any{}},
	}}})
	// In every namespace the hub holds create and delete on Secrets, only to grant them to agents
	// (the scope policy confines both: TestHubScope), and may read none.
	for _, r := range as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-hub"]).Rules {
		if slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") && slices.Contains(r.Resources, "secrets") {
			t.Errorf("the hub's ClusterRole grants everything on Secrets: %+v", r)
		}
		if slices.Contains(r.Resources, "secrets") && !slices.Equal(r.Verbs, []string{"create", "delete"}) {
			t.Errorf("the hub's ClusterRole grants %v on Secrets in every namespace, want create and delete only (to grant them to agents)", r.Verbs)
		}
	}
	want := map[string][]string{namespace: {"edge-kubeconfig", "lab-kubeconfig"}, "dr-secrets": {"dr"}}
	for ns, names := range want {
		key := "Role/" + ns + "/magos-hub-kubeconfigs"
		if ns == namespace {
			key = "Role/magos-hub-kubeconfigs"
		}
		role := as[rbacv1.Role](t, objs[key])
		if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) ||
			!slices.Equal(role.Rules[0].ResourceNames, names) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
			t.Errorf("%s rules %+v, want get on secrets %v only", key, role.Rules, names)
		}
		binding := as[rbacv1.RoleBinding](t, objs[strings.Replace(key, "Role/", "RoleBinding/", 1)])
		if binding.RoleRef.Name != "magos-hub-kubeconfigs" || len(binding.Subjects) != 1 ||
			binding.Subjects[0].Name != "magos-hub" || binding.Subjects[0].Namespace != namespace {
			t.Errorf("%s binds %+v to %+v", binding.Name, binding.RoleRef, binding.Subjects)
		}
	}
	// Without direct clusters read from Secrets, the hub reads no Secret at all.
	for key := range render(t, "magos-hub", nil) {
		if strings.Contains(key, "magos-hub-kubeconfigs") {
			t.Errorf("%s rendered without a secretRef in the config", key)
		}
	}
}

// TestHubNotificationAccess checks what notifications add to the hub's rights: a get on exactly
// the Secrets the webhooks name (URL and Authorization), beside the kubeconfigs', and a read of
// Events; without webhooks, neither.
func TestHubNotificationAccess(t *testing.T) {
	secret := func(ns, name, key string) map[string]any {
		return map[string]any{"namespace": ns, "name": name, "key": key}
	}
	objs := render(t, "magos-hub", map[string]any{"config": map[string]any{
		"clusters": []any{map[string]any{"name": "lab", "kubeconfig": map[string]any{"secretRef": secret(namespace, "lab-kubeconfig", "kubeconfig")}}},
		"notifications": map[string]any{"webhooks": []any{
			map[string]any{"name": "oncall", "format": "slack", "urlSecretRef": secret(namespace, "magos-webhooks", "oncall")},
			map[string]any{"name": "audit", "urlSecretRef": secret(namespace, "magos-webhooks", "audit"),
				"authorizationSecretRef": secret("audit", "audit-token", "authorization")},
		}},
	}})
	for key, names := range map[string][]string{
		"Role/magos-hub-kubeconfigs":       {"lab-kubeconfig", "magos-webhooks"},
		"Role/audit/magos-hub-kubeconfigs": {"audit-token"},
	} {
		role := as[rbacv1.Role](t, objs[key])
		if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, names) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
			t.Errorf("%s rules %+v, want get on secrets %v only", key, role.Rules, names)
		}
	}
	readsEvents := func(objs map[string]*unstructured.Unstructured) bool {
		for _, r := range as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-hub"]).Rules {
			if slices.Contains(r.APIGroups, "events.k8s.io") && slices.Contains(r.Resources, "events") && slices.Contains(r.Verbs, "watch") {
				return true
			}
		}
		return false
	}
	if !readsEvents(objs) {
		t.Error("with webhooks, the hub may not watch Events (events.k8s.io)")
	}
	if readsEvents(render(t, "magos-hub", nil)) {
		t.Error("without webhooks, the hub may watch Events")
	}
}

// TestHubDashboardOIDCAccess checks that the dashboard's OIDC client secret is a Secret the hub
// may get, by name, beside the others its config names, and that the values schema takes the
// documented dashboard.oidc and refuses an issuer that is not https.
func TestHubDashboardOIDCAccess(t *testing.T) {
	oidc := map[string]any{"issuerURL": "https://login.example.com", "clientID": "magos",
		"clientSecretRef": map[string]any{"namespace": "sso", "name": "magos-dashboard-oidc"},
		"redirectURL":     "https://magos.example.com/oidc/callback", "scopes": []any{"openid", "groups"}, "sessionTTL": "8h"}
	objs := render(t, "magos-hub", map[string]any{"config": map[string]any{"dashboard": map[string]any{"oidc": oidc}}})
	role := as[rbacv1.Role](t, objs["Role/sso/magos-hub-kubeconfigs"])
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].ResourceNames, []string{"magos-dashboard-oidc"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("Role sso/magos-hub-kubeconfigs rules %+v, want get on secrets [magos-dashboard-oidc] only", role.Rules)
	}
	if objs["RoleBinding/sso/magos-hub-kubeconfigs"] == nil {
		t.Error("no RoleBinding for the OIDC client secret's Role")
	}
	oidc["issuerURL"] = "http://login.example.com"
	_, err := tryRender("magos-hub", map[string]any{"config": map[string]any{"dashboard": map[string]any{"oidc": oidc}}})
	if err == nil || !strings.Contains(err.Error(), "at '/config/dashboard/oidc/issuerURL'") {
		t.Errorf("an http issuer: error %v, want one at /config/dashboard/oidc/issuerURL", err)
	}
}

// TestAgentSecretAccess checks that the agent may read Secrets only in workspaceNamespaces, and
// is told the same namespaces (--secret-namespaces) so that it reads none elsewhere.
func TestAgentSecretAccess(t *testing.T) {
	objs := render(t, "magos-agent", map[string]any{"clusterName": "eu-west-1", "workspaceNamespaces": []any{"payments", "cdn"}})
	role := as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-agent-secrets"])
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) ||
		!slices.Equal(role.Rules[0].Verbs, []string{"get", "list", "watch", "create", "delete"}) {
		t.Errorf("magos-agent-secrets rules %+v, want Secrets read and the runs' Secrets written", role.Rules)
	}
	for key, obj := range objs {
		if obj.GetKind() == "ClusterRoleBinding" && as[rbacv1.ClusterRoleBinding](t, obj).RoleRef.Name == "magos-agent-secrets" {
			t.Errorf("%s grants Secrets in every namespace", key)
		}
	}
	for _, ns := range []string{"payments", "cdn"} {
		b := as[rbacv1.RoleBinding](t, objs["RoleBinding/"+ns+"/magos-agent-secrets"])
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != "magos-agent-secrets" || b.Subjects[0].Name != "magos-agent" {
			t.Errorf("RoleBinding %s/%s: %+v to %+v", ns, b.Name, b.RoleRef, b.Subjects)
		}
	}
	if objs["RoleBinding/default/magos-agent-secrets"] != nil {
		t.Error("Secrets readable in default although not in workspaceNamespaces")
	}
	args := as[appsv1.Deployment](t, objs["Deployment/magos-agent"]).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--secret-namespaces=payments,cdn") {
		t.Errorf("args %v lack --secret-namespaces=payments,cdn", args)
	}

	_, err := tryRender("magos-agent", map[string]any{"clusterName": "x",
		"jobServiceAccount": map[string]any{"create": true, "name": "magos-job", "namespaces": []any{"payments"}}})
	if err == nil || !strings.Contains(err.Error(), "jobServiceAccount.namespaces is now workspaceNamespaces") {
		t.Errorf("the former jobServiceAccount.namespaces: error %v, want a pointer to workspaceNamespaces", err)
	}
}

// TestAgentHubTokenSecretAccess checks the Secret the agent keeps its renewed hub token in: with
// a hub Secret, the chart creates it empty and lets the agent get and update exactly it, by name
// (an access review against a real API server: not another Secret of the namespace, not create,
// list or delete), and starts the agent and its helm test with it. Without a hub, none of it.
func TestAgentHubTokenSecretAccess(t *testing.T) {
	objs := render(t, "magos-agent", map[string]any{"clusterName": "eu-west-1",
		"hub": map[string]any{"kubeconfigSecret": map[string]any{"name": "hub-kubeconfig"}, "tokenExpiry": "30m"}})
	const secret = "magos-agent-hub-token"
	s := as[corev1.Secret](t, objs["Secret/"+secret])
	if s.Namespace != namespace || len(s.Data) != 0 || len(s.StringData) != 0 {
		t.Errorf("Secret %s/%s with data %v %v, want an empty Secret in the release namespace", s.Namespace, s.Name, s.Data, s.StringData)
	}
	role := as[rbacv1.Role](t, objs["Role/"+secret])
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) ||
		!slices.Equal(role.Rules[0].ResourceNames, []string{secret}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "update"}) {
		t.Errorf("Role %s rules %+v, want get and update on the Secret %s only", secret, role.Rules, secret)
	}
	binding := as[rbacv1.RoleBinding](t, objs["RoleBinding/"+secret])
	if binding.RoleRef.Name != secret || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "magos-agent" || binding.Subjects[0].Namespace != namespace {
		t.Errorf("RoleBinding %s: %+v to %+v", secret, binding.RoleRef, binding.Subjects)
	}
	args := as[appsv1.Deployment](t, objs["Deployment/magos-agent"]).Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--hub-token-expiry=30m", "--hub-token-secret=" + secret, "--hub-token-secret-namespace=" + namespace} {
		if !slices.Contains(args, want) {
			t.Errorf("agent args %v lack %s", args, want)
		}
	}

	checkOwnSecretAccess(t, objs, secret)

	for key := range render(t, "magos-agent", map[string]any{"clusterName": "local"}) {
		if strings.Contains(key, "hub-token") {
			t.Errorf("%s rendered without a hub Secret", key)
		}
	}
}

// TestAgentInputsKeySecretAccess checks the Secret the agent keeps the key of planned inputs
// in (the key of status.plannedInputs): whatever the values, the chart creates it empty and lets
// the agent get and update exactly it, by name (an access review against a real API server: not
// another Secret of the namespace, not create, list or delete), and starts the agent with it.
func TestAgentInputsKeySecretAccess(t *testing.T) {
	objs := render(t, "magos-agent", map[string]any{"clusterName": "eu-west-1"})
	const secret = "magos-agent-inputs-key"
	s := as[corev1.Secret](t, objs["Secret/"+secret])
	if s.Namespace != namespace || len(s.Data) != 0 || len(s.StringData) != 0 {
		t.Errorf("Secret %s/%s with data %v %v, want an empty Secret in the release namespace", s.Namespace, s.Name, s.Data, s.StringData)
	}
	role := as[rbacv1.Role](t, objs["Role/"+secret])
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) ||
		!slices.Equal(role.Rules[0].ResourceNames, []string{secret}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "update"}) {
		t.Errorf("Role %s rules %+v, want get and update on the Secret %s only", secret, role.Rules, secret)
	}
	binding := as[rbacv1.RoleBinding](t, objs["RoleBinding/"+secret])
	if binding.RoleRef.Name != secret || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "magos-agent" || binding.Subjects[0].Namespace != namespace {
		t.Errorf("RoleBinding %s: %+v to %+v", secret, binding.RoleRef, binding.Subjects)
	}
	args := as[appsv1.Deployment](t, objs["Deployment/magos-agent"]).Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--inputs-key-secret=" + secret, "--inputs-key-secret-namespace=" + namespace} {
		if !slices.Contains(args, want) {
			t.Errorf("agent args %v lack %s", args, want)
		}
	}
	checkOwnSecretAccess(t, objs, secret)
}

// checkOwnSecretAccess creates the Secret secret of the release namespace, its Role and
// RoleBinding as rendered in objs, and checks with access reviews that the agent may get and
// update that Secret and nothing else: not patch or delete it, not read or write another Secret
// there, not create, list or watch Secrets.
func checkOwnSecretAccess(t *testing.T, objs map[string]*unstructured.Unstructured, secret string) {
	t.Helper()
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"cluster"}, Bare: true})
	c := fleet.Spokes["cluster"]
	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"Secret/" + secret, "Role/" + secret, "RoleBinding/" + secret} {
		obj := objs[key].DeepCopy()
		obj.SetNamespace(namespace)
		if err := c.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", key, err)
		}
	}
	cs := kubernetes.NewForConfigOrDie(c.Config)
	review := func(verb, name string) (*authorizationv1.SubjectAccessReview, error) {
		return cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + namespace + ":magos-agent",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Resource: "secrets", Name: name,
			},
		}}, metav1.CreateOptions{})
	}
	// The API server's RBAC authorizer reads Roles and RoleBindings from its own informers, so
	// a binding created a moment ago may not decide yet: wait until it grants what it grants,
	// then judge every case.
	testenv.Eventually(t, 30*time.Second, func() error {
		got, err := review("get", secret)
		if err == nil && !got.Status.Allowed {
			err = fmt.Errorf("get secrets %q not allowed yet: %s", secret, got.Status.Reason)
		}
		return err
	})
	for _, tc := range []struct {
		verb, name string
		allowed    bool
	}{
		{"get", secret, true},
		{"update", secret, true},
		{"patch", secret, false},
		{"delete", secret, false},
		{"get", "magos-hub-kubeconfig", false},
		{"get", "magos-agent-hub-token", secret == "magos-agent-hub-token"},
		{"get", "magos-agent-inputs-key", secret == "magos-agent-inputs-key"},
		{"update", "other", false},
		{"create", "", false},
		{"list", "", false},
		{"watch", "", false},
	} {
		got, err := review(tc.verb, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s secrets %q: allowed %v, want %v", tc.verb, tc.name, got.Status.Allowed, tc.allowed)
		}
	}
}
