package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestHubScopeRendered checks the hub's scope policy as rendered: it matches the hub's own
// ServiceAccount, whatever its name, and the ClusterRole names what RBAC can name.
func TestHubScopeRendered(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		user   string
	}{
		{nil, "system:serviceaccount:magos-system:magos-hub"},
		{map[string]any{"serviceAccount": map[string]any{"create": true, "name": "hub-sa"}}, "system:serviceaccount:magos-system:hub-sa"},
	} {
		objs := render(t, "magos-hub", tc.values)
		vap := objs["ValidatingAdmissionPolicy/magos-hub-scope"]
		if vap == nil {
			t.Fatal("no scope policy: the hub's writes are confined by nothing")
		}
		conds, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
		if len(conds) != 1 || !strings.Contains(fmt.Sprint(conds[0]), "'"+tc.user+"'") {
			t.Errorf("scope policy matchConditions %v, want the user %s", conds, tc.user)
		}
		if objs["ValidatingAdmissionPolicyBinding/magos-hub-scope"] == nil {
			t.Error("no binding of the scope policy: it would not apply")
		}
	}
	role := as[rbacv1.ClusterRole](t, render(t, "magos-hub", nil)["ClusterRole/magos-hub"])
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			switch res {
			case "serviceaccounts", "serviceaccounts/token", "roles", "rolebindings":
				for _, v := range r.Verbs {
					if v != "create" || res == "serviceaccounts/token" {
						if len(r.ResourceNames) != 1 || r.ResourceNames[0] != "magos-agent" {
							t.Errorf("the hub may %s %s of any name (rule %+v), want magos-agent only", v, res, r)
						}
					}
					if v == "*" || v == "delete" || v == "update" || v == "escalate" || v == "bind" {
						t.Errorf("the hub may %s %s, which the registry never does", v, res)
					}
				}
			}
		}
	}
}

// TestHubScope installs the hub chart with Helm into a real API server and runs the hub as its
// ServiceAccount with two agent clusters registered: under the chart's RBAC and scope policy it
// sets both up, and removes one when the config drops it, refused nothing. Meanwhile,
// impersonating the hub's ServiceAccount and an agent's, it tries what each needs (allowed) and
// what neither may do (refused, by RBAC or by the policy, as each case says).
func TestHubScope(t *testing.T) {
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"cluster"}, Bare: true})
	c := fleet.Spokes["cluster"]
	kube := newClient(t, c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// What is not the hub's: a namespace of someone else, one named like an agent cluster's
	// but not created by the hub, and in each (and in kube-system) a ServiceAccount and a Role
	// named like the agent's, and a Secret.
	others := []string{"unrelated", "magos-cluster-stranger", "kube-system"}
	for _, ns := range []string{namespace, "unrelated", "magos-cluster-stranger"} {
		if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range others {
		for _, o := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "magos-agent"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "magos-agent"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "database-password"}, StringData: map[string]string{"p": "s3cr3t"}},
		} {
			if err := kube.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}

	values := map[string]any{"config": map[string]any{"clusters": []any{
		map[string]any{"name": "east", "agent": map[string]any{}},
		map[string]any{"name": "west", "agent": map[string]any{}},
	}}}
	rel, err := newHelmClient(t, c.Kubeconfig).install(ctx, "magos-hub", loadChart(t, "magos-hub"), values)
	if err != nil {
		t.Fatalf("helm install magos-hub: %v", err)
	}

	// The hub, run as its ServiceAccount with its Deployment's arguments, sets up both clusters.
	objs := releaseObjects(t, rel)
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(as[corev1.ConfigMap](t, objs["ConfigMap/magos-hub-config"]).Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	args, env := localCommand(t, deploymentContainer(t, objs, "magos-hub"), "magos-hub-0", serviceAccountKubeconfig(t, c.Kubeconfig, "magos-hub"),
		map[string]string{"--metrics-bind-address=": "0", "--health-probe-bind-address=": "0", "--config=": config})
	hub := startProcess(t, "magos-hub", filepath.Join(binaries(t), "magos-hub"), args, env)
	for _, ns := range []string{"magos-cluster-east", "magos-cluster-west"} {
		testenv.Eventually(t, 2*time.Minute, func() error {
			return kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "magos-agent"}, &rbacv1.RoleBinding{})
		})
	}

	hubCS := impersonated(t, c.Config, namespace, "magos-hub")
	agentCS := impersonated(t, c.Config, "magos-cluster-east", "magos-agent")
	agentDyn := dynamic.NewForConfigOrDie(impersonatedConfig(c.Config, "magos-cluster-east", "magos-agent"))
	marked := map[string]string{"app.kubernetes.io/managed-by": "magos-hub"}
	label := func(ns string) []byte {
		return fmt.Appendf(nil, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"magos-hub","magosproject.io/cluster":%q}}}`, ns)
	}
	token := func(cs kubernetes.Interface, ns, name string) error {
		_, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		return err
	}
	lease := func(ns string) error {
		_, err := agentCS.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
		return err
	}
	// runOutput creates or deletes, as cs, a Secret like the copy of a run's output an agent
	// keeps on the hub.
	runOutput := func(cs kubernetes.Interface, ns, verb string) error {
		if verb == "delete" {
			return cs.CoreV1().Secrets(ns).Delete(ctx, "cdn-run-plan", metav1.DeleteOptions{})
		}
		_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cdn-run-plan"},
			Type: "magosproject.io/run-output", Data: map[string][]byte{"plan.gz": nil}}, metav1.CreateOptions{})
		return err
	}
	role := func(ns, name string) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: marked}}
	}

	// refused: "" is allowed; "rbac" a refusal by RBAC; any other text a refusal by the scope
	// policy whose message holds it.
	const rbac, notAgentNS, notHubs, notMarked = "rbac", "only in the namespaces of agent clusters", "only what it created", "only in namespaces it created"
	cases := []struct {
		name    string
		do      func() error
		refused string
	}{
		// The hub: what the registry does, in the namespaces it created.
		{"hub mints a token for the east agent", func() error { return token(hubCS, "magos-cluster-east", "magos-agent") }, ""},
		{"hub mints a token for the west agent", func() error { return token(hubCS, "magos-cluster-west", "magos-agent") }, ""},
		{"hub patches the agent's ServiceAccount", func() error {
			_, err := hubCS.CoreV1().ServiceAccounts("magos-cluster-east").Patch(ctx, "magos-agent", types.MergePatchType, label("east"), metav1.PatchOptions{})
			return err
		}, ""},
		{"hub patches the agent's Role", func() error {
			_, err := hubCS.RbacV1().Roles("magos-cluster-east").Patch(ctx, "magos-agent", types.MergePatchType, label("east"), metav1.PatchOptions{})
			return err
		}, ""},
		// The hub: nothing else.
		{"hub reads a Secret in kube-system", func() error {
			_, err := hubCS.CoreV1().Secrets("kube-system").Get(ctx, "database-password", metav1.GetOptions{})
			return err
		}, rbac},
		{"hub reads a Secret in an agent cluster's namespace", func() error {
			_, err := hubCS.CoreV1().Secrets("magos-cluster-east").List(ctx, metav1.ListOptions{})
			return err
		}, rbac},
		{"hub deletes a Secret in kube-system", func() error {
			return hubCS.CoreV1().Secrets("kube-system").Delete(ctx, "database-password", metav1.DeleteOptions{})
		}, notAgentNS},
		{"hub deletes a Secret in a magos-cluster-* namespace it did not create", func() error {
			return hubCS.CoreV1().Secrets("magos-cluster-stranger").Delete(ctx, "database-password", metav1.DeleteOptions{})
		}, notMarked},
		{"hub creates a Secret in kube-system", func() error {
			_, err := hubCS.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted", Labels: marked}}, metav1.CreateOptions{})
			return err
		}, notAgentNS},
		{"hub mints a token for another ServiceAccount in kube-system", func() error { return token(hubCS, "kube-system", "victim") }, rbac},
		{"hub mints a token for a magos-agent ServiceAccount in kube-system", func() error { return token(hubCS, "kube-system", "magos-agent") }, notAgentNS},
		{"hub mints a token in a magos-cluster-* namespace it did not create", func() error { return token(hubCS, "magos-cluster-stranger", "magos-agent") }, notMarked},
		{"hub deletes a namespace it did not create", func() error { return hubCS.CoreV1().Namespaces().Delete(ctx, "unrelated", metav1.DeleteOptions{}) }, notAgentNS},
		{"hub deletes a magos-cluster-* namespace it did not create", func() error {
			return hubCS.CoreV1().Namespaces().Delete(ctx, "magos-cluster-stranger", metav1.DeleteOptions{})
		}, notHubs},
		{"hub marks a magos-cluster-* namespace it did not create as its own", func() error {
			_, err := hubCS.CoreV1().Namespaces().Patch(ctx, "magos-cluster-stranger", types.MergePatchType, label("stranger"), metav1.PatchOptions{})
			return err
		}, notHubs},
		{"hub creates a namespace not of an agent cluster", func() error {
			_, err := hubCS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments", Labels: marked}}, metav1.CreateOptions{})
			return err
		}, notAgentNS},
		{"hub creates an agent cluster namespace without its mark", func() error {
			_, err := hubCS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "magos-cluster-north"}}, metav1.CreateOptions{})
			return err
		}, "must carry its mark"},
		{"hub patches a Role in a namespace it did not create", func() error {
			_, err := hubCS.RbacV1().Roles("unrelated").Patch(ctx, "magos-agent", types.MergePatchType, label("east"), metav1.PatchOptions{})
			return err
		}, notAgentNS},
		{"hub deletes a Role it did not create", func() error {
			return hubCS.RbacV1().Roles("unrelated").Delete(ctx, "magos-agent", metav1.DeleteOptions{})
		}, rbac},
		{"hub creates a Role in kube-system", func() error {
			_, err := hubCS.RbacV1().Roles("kube-system").Create(ctx, role("kube-system", "magos-agent"), metav1.CreateOptions{})
			return err
		}, notAgentNS},
		{"hub creates a Role in a magos-cluster-* namespace it did not create", func() error {
			_, err := hubCS.RbacV1().Roles("magos-cluster-stranger").Create(ctx, role("magos-cluster-stranger", "extra"), metav1.CreateOptions{})
			return err
		}, notMarked},
		{"hub patches the ServiceAccount of a namespace it did not create", func() error {
			_, err := hubCS.CoreV1().ServiceAccounts("magos-cluster-stranger").Patch(ctx, "magos-agent", types.MergePatchType, label("stranger"), metav1.PatchOptions{})
			return err
		}, notMarked},
		// An agent: its own namespace, its own token.
		{"agent writes its Lease", func() error { return lease("magos-cluster-east") }, ""},
		{"agent mints a token for itself", func() error { return token(agentCS, "magos-cluster-east", "magos-agent") }, ""},
		{"agent copies a run's output to its namespace", func() error { return runOutput(agentCS, "magos-cluster-east", "create") }, ""},
		{"hub deletes the copy of an agent's run output", func() error { return runOutput(hubCS, "magos-cluster-east", "delete") }, notHubs},
		{"agent deletes the copy of its run output", func() error { return runOutput(agentCS, "magos-cluster-east", "delete") }, ""},
		// An agent: nothing else.
		{"agent writes a Lease in another cluster's namespace", func() error { return lease("magos-cluster-west") }, rbac},
		{"agent writes a mirror in another cluster's namespace", func() error {
			ws := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "magosproject.io/v1alpha1", "kind": "Workspace",
				"metadata": map[string]any{"name": "cdn"}, "spec": map[string]any{}}}
			_, err := agentDyn.Resource(schema.GroupVersionResource{Group: "magosproject.io", Version: "v1alpha1", Resource: "workspaces"}).
				Namespace("magos-cluster-west").Create(ctx, ws, metav1.CreateOptions{})
			return err
		}, rbac},
		{"agent copies a run's output to another cluster's namespace", func() error { return runOutput(agentCS, "magos-cluster-west", "create") }, rbac},
		{"agent mints a token for another cluster's agent", func() error { return token(agentCS, "magos-cluster-west", "magos-agent") }, rbac},
		{"agent reads Secrets in its namespace", func() error {
			_, err := agentCS.CoreV1().Secrets("magos-cluster-east").List(ctx, metav1.ListOptions{})
			return err
		}, rbac},
		{"agent reads a Secret in kube-system", func() error {
			_, err := agentCS.CoreV1().Secrets("kube-system").Get(ctx, "database-password", metav1.GetOptions{})
			return err
		}, rbac},
		{"agent widens its own Role", func() error {
			_, err := agentCS.RbacV1().Roles("magos-cluster-east").Patch(ctx, "magos-agent", types.MergePatchType,
				[]byte(`{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}`), metav1.PatchOptions{})
			return err
		}, rbac},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.refused == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case !apierrors.IsForbidden(err):
				t.Fatalf("got %v, want Forbidden", err)
			case tc.refused == rbac && !strings.Contains(err.Error(), "cannot "):
				t.Fatalf("refused by %v, want a refusal by RBAC", err)
			case tc.refused != rbac && !strings.Contains(err.Error(), tc.refused):
				t.Fatalf("refused by %v, want the scope policy's refusal %q", err, tc.refused)
			}
		})
	}

	// Deregistering west: the hub deletes the namespace it created for it.
	values["config"] = map[string]any{"clusters": []any{map[string]any{"name": "east", "agent": map[string]any{}}}}
	eastOnly := as[corev1.ConfigMap](t, render(t, "magos-hub", values)["ConfigMap/magos-hub-config"]).Data["config.yaml"]
	if err := os.WriteFile(config, []byte(eastOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		ns := &corev1.Namespace{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "magos-cluster-west"}, ns); err != nil || ns.DeletionTimestamp != nil {
			return nil // gone, or going (no namespace controller runs here to finish it)
		}
		return fmt.Errorf("namespace magos-cluster-west is not being deleted")
	})
	hub.stop(t)
	if lines := hub.forbidden(); len(lines) > 0 {
		t.Errorf("the API server refused the hub while it set up and removed agent clusters:\n%s", strings.Join(lines, "\n"))
	}

	// Nothing of someone else's was lost on the way.
	for _, ns := range others {
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "magos-agent"}, &rbacv1.Role{}); err != nil {
			t.Errorf("Role %s/magos-agent: %v", ns, err)
		}
		n := &corev1.Namespace{}
		if err := kube.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil || n.DeletionTimestamp != nil || n.Labels["app.kubernetes.io/managed-by"] != "" {
			t.Errorf("namespace %s: %v, deleting %v, labels %v", ns, err, n.DeletionTimestamp, n.Labels)
		}
	}
}

// impersonatedConfig is cfg impersonating the ServiceAccount ns/name.
func impersonatedConfig(cfg *rest.Config, ns, name string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	return out
}

// impersonated is a clientset for cfg as the ServiceAccount ns/name.
func impersonated(t *testing.T, cfg *rest.Config, ns, name string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(impersonatedConfig(cfg, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
