package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// singleClusterHubValues are the hub's values of docs/install.md's single-cluster setup: the
// cluster registered as a direct cluster of itself, reached with the hub's own identity
// (kubeconfig.inCluster), and bound to every namespace.
func singleClusterHubValues() map[string]any {
	return map[string]any{
		"config": map[string]any{"clusters": []any{map[string]any{
			"name":       "local",
			"kubeconfig": map[string]any{"inCluster": true},
		}}, "bindings": []any{map[string]any{"namespaces": []any{"*"}, "clusters": []any{"local"}}}},
		"admissionPolicy": map[string]any{"enabled": false},
	}
}

// TestInstallIntoAPIServer installs both charts into one real API server with Helm, as the
// single-cluster setup of docs/install.md does, checks the installed RBAC with access reviews,
// upgrades the hub chart with a changed CRD, and uninstalls both: the CRDs and the Workspaces
// stay.
func TestInstallIntoAPIServer(t *testing.T) {
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"cluster"}, Bare: true})
	c := fleet.Spokes["cluster"]
	kube := newClient(t, c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, ns := range []string{namespace, "payments", "unrelated"} {
		if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	helm := newHelmClient(t, c.Kubeconfig)
	hubChart, agentChart := loadChart(t, "magos-hub"), loadChart(t, "magos-agent")
	agentValues := func(installCRDs bool) map[string]any {
		return map[string]any{"clusterName": "local", "crds": map[string]any{"install": installCRDs},
			"workspaceNamespaces": []any{"payments"}}
	}

	hubRelease, err := helm.install(ctx, "magos-hub", hubChart, singleClusterHubValues())
	if err != nil {
		t.Fatalf("helm install magos-hub: %v", err)
	}
	// The second chart with its CRDs too is what crds.install exists for: Helm refuses objects
	// another release owns.
	_, err = helm.install(ctx, "magos-agent", agentChart, agentValues(true))
	if err == nil || !strings.Contains(err.Error(), "CustomResourceDefinition") || !strings.Contains(err.Error(), "magos-hub") {
		t.Fatalf("helm install magos-agent with its CRDs: error %v, want a conflict with the CRDs of release magos-hub", err)
	}
	agentRelease, err := helm.install(ctx, "magos-agent", agentChart, agentValues(false))
	if err != nil {
		t.Fatalf("helm install magos-agent --set crds.install=false: %v", err)
	}
	for _, name := range magosCRDs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := kube.Get(ctx, client.ObjectKey{Name: name + ".magosproject.io"}, crd); err != nil {
			t.Fatal(err)
		}
		if crd.Annotations["helm.sh/resource-policy"] != "keep" || crd.Annotations["meta.helm.sh/release-name"] != "magos-hub" {
			t.Errorf("CRD %s: annotations %v, want the keep policy and release magos-hub", crd.Name, crd.Annotations)
		}
	}

	t.Run("access", func(t *testing.T) { checkAccess(ctx, t, kubernetes.NewForConfigOrDie(c.Config)) })

	t.Run("a terraform.version the runner image does not carry is warned about when applied", func(t *testing.T) {
		checkVersionWarnings(ctx, t, c.Config)
	})

	t.Run("the hub and the agent work under the charts' RBAC, and helm test passes", func(t *testing.T) {
		runInstalled(ctx, t, c.Kubeconfig, kube, releaseObjects(t, hubRelease), releaseObjects(t, agentRelease))
	})

	t.Run("helm upgrade keeps the key of planned inputs the agent wrote", func(t *testing.T) {
		key := client.ObjectKey{Namespace: namespace, Name: "magos-agent-inputs-key"}
		before := &corev1.Secret{}
		if err := kube.Get(ctx, key, before); err != nil {
			t.Fatal(err)
		}
		if len(before.Data["key"]) != 32 {
			t.Fatalf("the agent's run left a key of %d bytes in %s, want 32", len(before.Data["key"]), key)
		}
		if _, err := helm.upgrade(ctx, "magos-agent", agentChart, agentValues(false)); err != nil {
			t.Fatalf("helm upgrade magos-agent: %v", err)
		}
		after := &corev1.Secret{}
		if err := kube.Get(ctx, key, after); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(after.Data["key"], before.Data["key"]) {
			t.Error("helm upgrade changed the key: every plan waiting for its apply would be planned again")
		}
	})

	t.Run("helm upgrade updates the CRDs", func(t *testing.T) {
		changed := loadChart(t, "magos-hub")
		const file = "files/crds/magosproject.io_workspaces.yaml"
		found := false
		for _, f := range changed.Files {
			if f.Name == file {
				f.Data = []byte(strings.Replace(string(f.Data), "    singular: workspace\n", "    singular: workspace\n    shortNames: [wsupgraded]\n", 1))
				found = true
			}
		}
		if !found {
			t.Fatalf("the hub chart has no %s", file)
		}
		if _, err := helm.upgrade(ctx, "magos-hub", changed, singleClusterHubValues()); err != nil {
			t.Fatalf("helm upgrade magos-hub: %v", err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "workspaces.magosproject.io"}, crd); err != nil {
			t.Fatal(err)
		}
		if strings.Join(crd.Spec.Names.ShortNames, ",") != "wsupgraded" {
			t.Errorf("after helm upgrade the Workspace CRD's shortNames are %v, want [wsupgraded]", crd.Spec.Names.ShortNames)
		}
	})

	t.Run("helm upgrade with crds.install=false keeps the CRDs", func(t *testing.T) {
		without := singleClusterHubValues()
		without["crds"] = map[string]any{"install": false}
		if _, err := helm.upgrade(ctx, "magos-hub", hubChart, without); err != nil {
			t.Fatalf("helm upgrade magos-hub --set crds.install=false: %v", err)
		}
		for _, name := range magosCRDs {
			if err := kube.Get(ctx, client.ObjectKey{Name: name + ".magosproject.io"}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
				t.Errorf("CRD %s after helm upgrade --set crds.install=false: %v", name, err)
			}
		}
		// And back: the release owns them again (the uninstall below keeps them by policy).
		if _, err := helm.upgrade(ctx, "magos-hub", hubChart, singleClusterHubValues()); err != nil {
			t.Fatalf("helm upgrade magos-hub --set crds.install=true: %v", err)
		}
	})

	t.Run("helm uninstall keeps the CRDs and the Workspaces", func(t *testing.T) {
		ws := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "magosproject.io/v1alpha1", "kind": "Workspace",
			"metadata": map[string]any{"name": "cdn", "namespace": "payments"},
			"spec": map[string]any{
				"projectRef": map[string]any{"name": "cdn"},
				"source":     map[string]any{"repoURL": "https://git.example/cdn.git", "targetRevision": "main", "path": "."},
				"terraform":  map[string]any{"version": "1.10.6"},
			},
		}}
		if err := kube.Create(ctx, ws); err != nil {
			t.Fatal(err)
		}
		for _, release := range []string{"magos-agent", "magos-hub"} {
			kept, err := helm.uninstall(release)
			if err != nil {
				t.Fatalf("helm uninstall %s: %v", release, err)
			}
			if release == "magos-hub" && !strings.Contains(kept, "[CustomResourceDefinition] workspaces.magosproject.io") {
				t.Errorf("helm uninstall magos-hub kept %q, want the CRDs kept by their resource policy", kept)
			}
		}
		for _, name := range magosCRDs {
			if err := kube.Get(ctx, client.ObjectKey{Name: name + ".magosproject.io"}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
				t.Errorf("CRD %s after helm uninstall: %v", name, err)
			}
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(schema.GroupVersionKind{Group: "magosproject.io", Version: "v1alpha1", Kind: "Workspace"})
		if err := kube.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
			t.Errorf("the Workspace after helm uninstall: %v", err)
		}
		// What the charts did not keep is gone (the uninstall did run).
		err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "magos-hub"}, &corev1.ServiceAccount{})
		if err == nil {
			t.Error("the hub's ServiceAccount survived helm uninstall")
		}
	})
}

// bareCluster starts one bare API server (no controllers) for a chart test and creates the
// given namespaces in it. It returns the cluster, an admin client, and a context that ends
// after timeout (or with the test).
func bareCluster(t *testing.T, timeout time.Duration, namespaces ...string) (*localcluster.Cluster, client.Client, context.Context) {
	t.Helper()
	c := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"cluster"}, Bare: true}).Spokes["cluster"]
	kube := newClient(t, c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	for _, ns := range namespaces {
		if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return c, kube, ctx
}

// newClient is a client for cfg that knows the built-in kinds, the Magos kinds and CRDs.
func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	s := scheme.New()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkAccess checks the installed RBAC with access reviews: what each ServiceAccount needs, and
// what it must not have.
func checkAccess(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	cases := []struct {
		sa                                       string
		ns, verb, group, resource, subject, name string
		allowed                                  bool
	}{
		{"magos-agent", "payments", "create", "batch", "jobs", "", "", true},
		{"magos-agent", "payments", "patch", "magosproject.io", "workspaces", "status", "", true},
		// It copies the hub's grants down: the verb magos-workspace-grants asks for.
		{"magos-agent", "payments", "grant", "magosproject.io", "workspaces", "", "", true},
		{"magos-agent", "payments", "create", "magosproject.io", "rollouts", "", "", false},
		{"magos-agent", "", "create", "rbac.authorization.k8s.io", "clusterroles", "", "", false},
		// Secrets: read-only, in workspaceNamespaces only.
		{"magos-agent", "payments", "get", "", "secrets", "", "cdn-variables", true},
		{"magos-agent", "payments", "list", "", "secrets", "", "", true},
		{"magos-agent", "payments", "watch", "", "secrets", "", "", true},
		{"magos-agent", "payments", "create", "", "secrets", "", "", true}, // the runs' sensitive values
		{"magos-agent", "payments", "update", "", "secrets", "", "cdn-variables", false},
		{"magos-agent", "unrelated", "get", "", "secrets", "", "database-password", false},
		{"magos-agent", "unrelated", "list", "", "secrets", "", "", false},
		{"magos-agent", namespace, "get", "", "secrets", "", "local-kubeconfig", false},
		// Its own namespace: the Secret of the key of planned inputs, by name, get and update only.
		{"magos-agent", namespace, "get", "", "secrets", "", "magos-agent-inputs-key", true},
		{"magos-agent", namespace, "update", "", "secrets", "", "magos-agent-inputs-key", true},
		{"magos-agent", namespace, "delete", "", "secrets", "", "magos-agent-inputs-key", false},
		{"magos-agent", namespace, "create", "", "secrets", "", "", false},
		{"magos-agent", "", "list", "", "secrets", "", "", false},
		{"magos-hub", "magos-cluster-x", "create", "rbac.authorization.k8s.io", "roles", "", "", true},
		{"magos-hub", "magos-cluster-x", "create", "", "serviceaccounts", "token", "magos-agent", true},
		{"magos-hub", "kube-system", "create", "", "serviceaccounts", "token", "default", false},
		{"magos-hub", "payments", "create", "batch", "jobs", "", "", false},
		// Secrets: none (the single-cluster install reaches its cluster with the hub's own
		// identity: no kubeconfig Secret to read).
		{"magos-hub", namespace, "get", "", "secrets", "", "local-kubeconfig", false},
		// It writes grants on the cluster's Workspaces itself: patch and the verb grant that the
		// magos-workspace-requests admission policy asks for.
		{"magos-hub", "payments", "patch", "magosproject.io", "workspaces", "", "", true},
		{"magos-hub", "payments", "grant", "magosproject.io", "workspaces", "", "", true},
		{"magos-hub", namespace, "update", "", "secrets", "", "local-kubeconfig", false},
		{"magos-hub", namespace, "get", "", "secrets", "", "sh.helm.release.v1.magos-hub.v1", false},
		{"magos-hub", namespace, "list", "", "secrets", "", "", false},
		{"magos-hub", "unrelated", "get", "", "secrets", "", "database-password", false},
		{"magos-hub", "", "list", "", "secrets", "", "", false},
		{"magos-job", "payments", "update", "", "secrets", "", "", true},
		{"magos-job", "payments", "create", "coordination.k8s.io", "leases", "", "", true},
		{"magos-job", "unrelated", "get", "", "secrets", "", "", false},
		{"magos-job", "payments", "get", "magosproject.io", "workspaces", "", "", false},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s %s %s/%s %s in %q", tc.sa, tc.verb, tc.resource, tc.subject, tc.name, tc.ns)
		t.Run(name, func(t *testing.T) {
			saNS := namespace
			if tc.sa == "magos-job" {
				saNS = "payments"
			}
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + saNS + ":" + tc.sa,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: tc.ns, Verb: tc.verb, Group: tc.group, Resource: tc.resource, Subresource: tc.subject, Name: tc.name,
				},
			}}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%s)", got.Status.Allowed, tc.allowed, got.Status.Reason)
			}
		})
	}
}

// warnings collects the API server's warnings.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// checkVersionWarnings applies Workspaces with the agent chart's policy magos-workspace-versions
// installed: upstream's Terraform version 1.14.8 gets a warning naming the OpenTofu version the
// runner image carries; that version gets none. The chart's default is the OpenTofu the test
// assets (and so the runner image) build.
func checkVersionWarnings(ctx context.Context, t *testing.T, cfg *rest.Config) {
	raw, err := os.ReadFile("../../tools/provision-assets.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`TOFU_VERSION=\$\{TOFU_VERSION:-v([0-9.]+)\}`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("tools/provision-assets.sh pins no TOFU_VERSION")
	}
	tofu := string(m[1])
	w := &warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	kube := newClient(t, cfg)
	for _, tc := range []struct {
		name, version string
		warn          bool
	}{{"upstream", "1.14.8", true}, {"carried", tofu, false}, {"carried-v", "v" + tofu, false}} {
		ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "version-" + tc.name},
			Spec: magosv1.WorkspaceSpec{
				ProjectRef: magosv1.ProjectReference{Name: "versions"},
				Source:     magosv1.Source{RepoURL: "https://git.example/cdn.git", TargetRevision: "main", Path: "."},
				Terraform:  magosv1.TerraformSpec{Version: tc.version},
			}}
		var got []string
		testenv.Eventually(t, time.Minute, func() error {
			// The policy may take a moment to be in force after the install: apply until the
			// answer is as expected (each try creates the Workspace afresh).
			_ = kube.Delete(ctx, ws)
			w.take()
			fresh := ws.DeepCopy()
			if err := kube.Create(ctx, fresh); err != nil {
				return err
			}
			got = w.take()
			warned := strings.Contains(strings.Join(got, "\n"), "carries OpenTofu "+tofu+" only")
			if warned != tc.warn {
				return fmt.Errorf("terraform.version %s: warnings %q, want a warning: %v", tc.version, got, tc.warn)
			}
			return nil
		})
		if tc.warn {
			t.Logf("kubectl apply of terraform.version %s warns: %s", tc.version, strings.Join(got, "; "))
		}
		if err := kube.Delete(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
}
