package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestDashboardInstalled: the hub chart's dashboard is off by default; with dashboard.enabled
// its Service reaches the container's port, and the hub, run as the chart's ServiceAccount with
// the Deployment's arguments, can review a caller's token and access with the RBAC the chart
// grants: a user bound to a Role that may list Rollouts in a namespace sees that namespace's
// Rollouts, a user with no role sees none, and no token is refused.
func TestDashboardInstalled(t *testing.T) {
	if objs := render(t, "magos-hub", nil); objs["Service/magos-hub-dashboard"] != nil {
		t.Fatal("a dashboard Service by default")
	}
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"cluster"}, Bare: true})
	c := fleet.Spokes["cluster"]
	kube := newClient(t, c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ns := range []string{namespace, "team-a"} {
		if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	rel, err := newHelmClient(t, c.Kubeconfig).install(ctx, "magos-hub", loadChart(t, "magos-hub"),
		map[string]any{"dashboard": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatalf("helm install magos-hub: %v", err)
	}
	objs := releaseObjects(t, rel)
	container := deploymentContainer(t, objs, "magos-hub")
	svc := as[corev1.Service](t, objs["Service/magos-hub-dashboard"])
	if len(svc.Spec.Ports) != 1 || !slices.ContainsFunc(container.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == svc.Spec.Ports[0].TargetPort.String()
	}) {
		t.Fatalf("the dashboard Service targets %v, the container has ports %v", svc.Spec.Ports, container.Ports)
	}

	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(as[corev1.ConfigMap](t, objs["ConfigMap/magos-hub-config"]).Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddress(t)
	args, env := localCommand(t, container, "magos-hub-0", serviceAccountKubeconfig(t, c.Kubeconfig, "magos-hub"),
		map[string]string{"--metrics-bind-address=": "0", "--health-probe-bind-address=": "0", "--config=": config, "--dashboard-bind-address=": addr})
	if !slices.Contains(args, "--dashboard-bind-address="+addr) {
		t.Fatalf("the Deployment's arguments %v do not turn the dashboard on", container.Args)
	}
	startProcess(t, "magos-hub", filepath.Join(binaries(t), "magos-hub"), args, env)

	rollout := &unstructured.Unstructured{}
	rollout.SetGroupVersionKind(magosv1.GroupVersion.WithKind("Rollout"))
	rollout.SetNamespace("team-a")
	rollout.SetName("web")
	if err := unstructured.SetNestedField(rollout.Object, map[string]any{"projectRef": "web", "strategy": map[string]any{
		"steps": []any{map[string]any{"name": "all", "selector": map[string]any{"matchLabels": map[string]any{"tier": "web"}}}}}}, "spec"); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(c.Config)
	token := func(name string, rules ...rbacv1.PolicyRule) string {
		t.Helper()
		objs := []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}}
		if len(rules) > 0 {
			objs = append(objs, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Rules: rules},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
					RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
					Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: name}}})
		}
		for _, o := range objs {
			if err := kube.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := cs.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	if err := kube.Create(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	viewer := token("viewer", rbacv1.PolicyRule{APIGroups: []string{magosv1.GroupVersion.Group}, Resources: []string{"rollouts"}, Verbs: []string{"get", "list"}})
	outsider := token("outsider")

	type list struct {
		Items []struct{ Namespace, Name string } `json:"items"`
	}
	get := func(token string) (int, list) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/rollouts", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, list{}
		}
		defer res.Body.Close()
		var l list
		_ = json.NewDecoder(res.Body).Decode(&l)
		return res.StatusCode, l
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		if code, l := get(viewer); code != http.StatusOK || len(l.Items) != 1 || l.Items[0].Name != "web" {
			return fmt.Errorf("the viewer lists the Rollouts: %d %+v, want team-a/web", code, l)
		}
		return nil
	})
	if code, l := get(outsider); code != http.StatusOK || len(l.Items) != 0 {
		t.Errorf("a user with no role: %d %+v, want 200 and no Rollout", code, l)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
}
