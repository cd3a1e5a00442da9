package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestRefusedGrantsShowOnTheRollout is the single-cluster install of issue 36 that stalled in
// silence: the hub chart installed in a real API server (with its magos-workspace-requests
// admission policy), the cluster registered as a direct cluster of itself through a kubeconfig
// Secret whose identity may get, list, watch and patch Workspaces but lacks the verb grant. The
// API server refuses every grant, and the refusal shows on the Rollout: a Warning Event and a
// Degraded condition (reason GrantRefused) naming the Workspace and the missing verb. Once the
// identity holds grant, the Workspace is granted and the condition goes.
func TestRefusedGrantsShowOnTheRollout(t *testing.T) {
	c, kube, ctx := bareCluster(t, 5*time.Minute, namespace, "payments")
	values := map[string]any{
		"config": map[string]any{"clusters": []any{map[string]any{
			"name": "local",
			"kubeconfig": map[string]any{"secretRef": map[string]any{
				"namespace": namespace, "name": "local-kubeconfig", "key": "kubeconfig"}},
		}}, "bindings": []any{map[string]any{"namespaces": []any{"*"}, "clusters": []any{"local"}}}},
		"admissionPolicy": map[string]any{"enabled": false},
	}
	hubRelease, err := newHelmClient(t, c.Kubeconfig).install(ctx, "magos-hub", loadChart(t, "magos-hub"), values)
	if err != nil {
		t.Fatalf("helm install magos-hub: %v", err)
	}
	hubObjs := releaseObjects(t, hubRelease)

	// The identity of the kubeconfig Secret: what a user following the old docs gave it.
	const identity = "local-direct"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: identity}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"magosproject.io"}, Resources: []string{"workspaces"}, Verbs: []string{"get", "list", "watch", "patch"}},
	}}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: identity}},
		role,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: identity},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: identity},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: identity}}},
	} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(serviceAccountKubeconfig(t, c.Kubeconfig, identity))
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "local-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": raw}}); err != nil {
		t.Fatal(err)
	}

	// The hub, as its Deployment runs it, as its ServiceAccount.
	config := filepath.Join(t.TempDir(), "config.yaml")
	cm := as[corev1.ConfigMap](t, hubObjs["ConfigMap/magos-hub-config"])
	if err := os.WriteFile(config, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	off := map[string]string{"--metrics-bind-address=": "0", "--health-probe-bind-address=": "0", "--config=": config}
	args, env := localCommand(t, deploymentContainer(t, hubObjs, "magos-hub"), "magos-hub-0",
		serviceAccountKubeconfig(t, c.Kubeconfig, "magos-hub"), off)
	hub := startProcess(t, "magos-hub", filepath.Join(binaries(t), "magos-hub"), args, env)
	defer hub.stop(t)

	// A Workspace, its Project and its Rollout, applied together. No agent runs: the
	// Workspace's run ID is set by hand so that it waits for a grant.
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "edge", Labels: map[string]string{"env": "prod"}},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: "edge"},
			Source:     magosv1.Source{RepoURL: "https://git.example/infra.git", TargetRevision: "main", Path: "."},
			Terraform:  magosv1.TerraformSpec{Version: "1.10.6"},
		}}
	for _, o := range []client.Object{
		&magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "edge"}},
		&magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "edge"}, Spec: magosv1.RolloutSpec{
			ProjectRef: "edge", Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
				{Name: "prod", Selector: magosv1.LabelSelector{MatchLabels: map[string]magosv1.LabelValue{"env": "prod"}}}}}}},
		ws,
	} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ws.Status = magosv1.WorkspaceStatus{Phase: magosv1.PhasePending, Reason: magosv1.ReasonAwaitingRollout,
		CurrentRunID: "20261206T000000-0000abcd", ObservedGeneration: ws.Generation}
	if err := kube.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}

	rolloutKey := client.ObjectKey{Namespace: "payments", Name: "edge"}
	testenv.Eventually(t, 2*time.Minute, func() error {
		ro := &magosv1.Rollout{}
		if err := kube.Get(ctx, rolloutKey, ro); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionDegraded)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "GrantRefused" {
			return fmt.Errorf("the Rollout has no Degraded=True GrantRefused condition: %+v\nhub log:\n%s", ro.Status.Conditions, hub.tail())
		}
		for _, want := range []string{"local/payments/edge", "verb grant"} {
			if !strings.Contains(cond.Message, want) {
				return fmt.Errorf("the Degraded condition does not name %q: %s", want, cond.Message)
			}
		}
		var events eventsv1.EventList
		if err := kube.List(ctx, &events, client.InNamespace("payments")); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Kind == "Rollout" && e.Regarding.Name == "edge" && e.Reason == "GrantRefused" && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, "verb grant") {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event GrantRefused naming the verb grant on the Rollout (%d Events)", len(events.Items))
	})

	// The identity gets the verb: the grant lands, and the condition goes.
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"magosproject.io"}, Resources: []string{"workspaces"}, Verbs: []string{"grant"}})
	if err := kube.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		got := &magosv1.Workspace{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
			return err
		}
		if got.Annotations["magosproject.io/granted-run"] != ws.Status.CurrentRunID {
			return fmt.Errorf("the Workspace holds no grant of its run yet: %v", got.Annotations)
		}
		ro := &magosv1.Rollout{}
		if err := kube.Get(ctx, rolloutKey, ro); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionDegraded); c != nil {
			return fmt.Errorf("the Rollout is still Degraded: %+v", c)
		}
		return nil
	})
}
