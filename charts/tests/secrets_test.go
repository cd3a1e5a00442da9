package tests

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestHubSecretAccess checks that the hub may get exactly the Secrets its config names as direct
// clusters' kubeconfigs, and no other: one Role per namespace, by name, get only.
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
	for _, r := range as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-hub"]).Rules {
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") {
			t.Errorf("the hub's ClusterRole grants Secrets in every namespace: %+v", r)
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
