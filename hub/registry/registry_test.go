package registry_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/pkg/version"
)

var env *localcluster.Fleet

// TestMain starts the test clusters, but not in `go test -fuzz` worker processes, which run only
// the fuzz target (FuzzLoadConfig) and need none (testenv.Main).
func TestMain(m *testing.M) {
	testenv.Main(m, testenv.MainOptions{
		Fleet: localcluster.Options{Spokes: []string{"us-east-1", "eu-west-1", "ap-south-1"}, ControllerManager: true},
		Setup: func(e *testenv.MainEnv) error {
			env = e.Fleet
			return nil
		},
	})
}

// flagValue is the value of a registered command-line flag ("" when there is none).

// configDir is a config file mounted the way Kubernetes mounts a ConfigMap: config.yaml is a
// symlink to ..data/config.yaml, and ..data a symlink swapped atomically on every update.
type configDir struct {
	t       testing.TB
	dir     string
	version int
}

func newConfigDir(t testing.TB, body string) *configDir {
	c := &configDir{t: t, dir: t.TempDir()}
	c.write(body)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), c.file()); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *configDir) file() string { return filepath.Join(c.dir, "config.yaml") }

// write publishes a new version as the kubelet does: a new timestamped directory, a new ..data
// symlink renamed over the old one, the old directory removed.
func (c *configDir) write(body string) {
	c.t.Helper()
	c.version++
	ver := fmt.Sprintf("..v%d", c.version)
	if err := os.Mkdir(filepath.Join(c.dir, ver), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, ver, "config.yaml"), []byte(body), 0o644); err != nil {
		c.t.Fatal(err)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ver, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.version > 1 {
		if err := os.RemoveAll(filepath.Join(c.dir, fmt.Sprintf("..v%d", c.version-1))); err != nil {
			c.t.Fatal(err)
		}
	}
}

// startHub runs a hub (app.New) on the test hub with the config file until the test ends;
// mutate, if any, changes its options first.
func startHub(t testing.TB, file string, mutate ...func(*app.Options)) *app.Hub {
	t.Helper()
	hub, _ := runHub(t, file, mutate...)
	return hub
}

// runHub is startHub that also returns how to stop the hub before the test ends.
func runHub(t testing.TB, file string, mutate ...func(*app.Options)) (*app.Hub, func()) {
	t.Helper()
	cfg, err := registry.LoadConfig(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	opts := app.Options{
		RestConfig:         env.Hub.Config,
		Config:             cfg,
		ConfigFile:         file,
		Logger:             ctrl.Log.WithName("hub"),
		HealthInterval:     time.Second,
		ConfigDebounce:     200 * time.Millisecond,
		SkipNameValidation: true,
		Fleet:              fleet.Options{MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second},
		// The registry's tests decide no Rollout or Project.
		WithoutDecisionControllers: true,
	}
	for _, m := range mutate {
		m(&opts)
	}
	hub, err := app.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := testenv.Background(t, context.Background(), "hub", hub.Manager.Start)
	return hub, stop
}

func clusterYAML(entries ...string) string {
	return "clusters:\n" + strings.Join(entries, "")
}

func agentEntry(name string, labels string) string {
	return fmt.Sprintf("  - name: %s\n    labels: {%s}\n    agent: {}\n", name, labels)
}

func directEntry(name, path string) string {
	return fmt.Sprintf("  - name: %s\n    kubeconfig: {path: %s}\n", name, path)
}

func getCluster(name string) (*magosv1.Cluster, error) {
	cl := &magosv1.Cluster{}
	return cl, env.Hub.Client.Get(context.Background(), client.ObjectKey{Name: name}, cl)
}

// condition returns a Cluster condition's status and reason, or an error if the Cluster or the
// condition is missing.
func condition(name, typ string) (metav1.ConditionStatus, string, error) {
	cl, err := getCluster(name)
	if err != nil {
		return "", "", err
	}
	c := meta.FindStatusCondition(cl.Status.Conditions, typ)
	if c == nil {
		return "", "", fmt.Errorf("cluster %s has no %s condition yet", name, typ)
	}
	return c.Status, c.Reason, nil
}

func wantCondition(name, typ string, status metav1.ConditionStatus, reason string) func() error {
	return func() error {
		s, r, err := condition(name, typ)
		if err != nil {
			return err
		}
		if s != status || (reason != "" && r != reason) {
			return fmt.Errorf("cluster %s: %s is %s/%s, want %s/%s", name, typ, s, r, status, reason)
		}
		return nil
	}
}

func engaged(h *app.Hub, name string) error {
	_, err := h.Manager.GetCluster(context.Background(), multicluster.ClusterName(name))
	return err
}

func gone(obj client.Object) func() error {
	return func() error {
		err := env.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s %s still exists", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName())
	}
}

// TestRegistrationCreatesClustersAndAgentAccess registers an agent cluster and direct clusters
// (a kubeconfig file, a kubeconfig Secret, and the hub itself) and checks every Cluster object,
// the agent's namespace, ServiceAccount, Role and RoleBinding, and the statuses.
func TestRegistrationCreatesClustersAndAgentAccess(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile(env.Spokes["ap-south-1"].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ap-south-1-kubeconfig"}, Data: map[string][]byte{"kubeconfig": raw}}
	if err := env.Hub.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	cfg := newConfigDir(t, clusterYAML(
		agentEntry("us-east-1", "region: us-east-1, env: prod"),
		directEntry("eu-west-1", env.Spokes["eu-west-1"].Kubeconfig),
		"  - name: ap-south-1\n    kubeconfig: {secretRef: {namespace: default, name: ap-south-1-kubeconfig}}\n",
		directEntry("local", env.Hub.Kubeconfig),
	))
	hub := startHub(t, cfg.file())

	ns := mirror.Namespace("us-east-1")
	testenv.Eventually(t, 60*time.Second, func() error {
		n := &corev1.Namespace{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			return err
		}
		if n.Labels[keys.Cluster] != "us-east-1" || n.Labels[registry.ManagedByLabel] != registry.ManagedByValue {
			return fmt.Errorf("namespace labels %v", n.Labels)
		}
		role := &rbacv1.Role{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: registry.AgentServiceAccount}, role); err != nil {
			return err
		}
		if !equalRules(role.Rules, mirror.AgentRules()) {
			return fmt.Errorf("role rules %v", role.Rules)
		}
		rb := &rbacv1.RoleBinding{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: registry.AgentServiceAccount}, rb); err != nil {
			return err
		}
		if rb.RoleRef.Name != registry.AgentServiceAccount || len(rb.Subjects) != 1 || rb.Subjects[0].Name != registry.AgentServiceAccount {
			return fmt.Errorf("role binding %+v", rb)
		}
		return env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: registry.AgentServiceAccount}, &corev1.ServiceAccount{})
	})
	for _, other := range []string{"eu-west-1", "ap-south-1", "local"} {
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: mirror.Namespace(other)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("direct cluster %s got a namespace: %v", other, err)
		}
	}

	testenv.Eventually(t, 60*time.Second, func() error {
		us, err := getCluster("us-east-1")
		if err != nil {
			return err
		}
		if us.Spec.Transport != magosv1.TransportAgent || us.Labels["region"] != "us-east-1" || us.Labels["env"] != "prod" || us.Status.Namespace != ns {
			return fmt.Errorf("us-east-1: %+v %+v", us.Labels, us.Spec)
		}
		ap, err := getCluster("ap-south-1")
		if err != nil {
			return err
		}
		if ap.Spec.Transport != magosv1.TransportDirect || ap.Spec.Kubeconfig == nil || ap.Spec.Kubeconfig.SecretRef == nil ||
			ap.Spec.Kubeconfig.SecretRef.Key != "kubeconfig" {
			return fmt.Errorf("ap-south-1 spec %+v", ap.Spec)
		}
		for _, check := range []func() error{
			wantCondition("us-east-1", magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged),
			wantCondition("us-east-1", magosv1.ConditionAvailable, metav1.ConditionFalse, magosv1.ReasonAgentNeverSeen),
			wantCondition("us-east-1", magosv1.ConditionReady, metav1.ConditionFalse, magosv1.ReasonAgentNeverSeen),
			wantCondition("us-east-1", registry.ConditionConfigLoaded, metav1.ConditionTrue, registry.ReasonConfigLoaded),
		} {
			if err := check(); err != nil {
				return err
			}
		}
		for _, d := range []string{"eu-west-1", "ap-south-1", "local"} {
			if err := wantCondition(d, magosv1.ConditionReady, metav1.ConditionTrue, registry.ReasonReady)(); err != nil {
				return err
			}
			if err := wantCondition(d, magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonReachable)(); err != nil {
				return err
			}
		}
		return nil
	})
	for _, n := range []string{"us-east-1", "eu-west-1", "ap-south-1", "local"} {
		if err := engaged(hub, n); err != nil {
			t.Errorf("GetCluster(%s): %v", n, err)
		}
	}
	if got := hub.Fleet.ClusterNames(); len(got) != 4 {
		t.Errorf("engaged clusters %v, want 4", got)
	}

	// The Workspaces count follows the cluster's Workspaces.
	spoke := env.Spokes["eu-west-1"].Client
	if err := spoke.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		ws := &magosv1.Workspace{
			ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: name},
			Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: "p"},
				Source:    magosv1.Source{RepoURL: "file:///tmp/repo", TargetRevision: "main"},
				Terraform: magosv1.TerraformSpec{Version: "1.10.6"}},
		}
		if err := spoke.Create(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		cl, err := getCluster("eu-west-1")
		if err != nil || cl.Status.Workspaces != 2 {
			return fmt.Errorf("eu-west-1 counts %d Workspaces (err %v), want 2", cl.Status.Workspaces, err)
		}
		return nil
	})

	// The config file is the truth: a Cluster edited or deleted by hand is put back.
	us, err := getCluster("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	us.Labels["region"] = "mars"
	if err := env.Hub.Client.Update(ctx, us); err != nil {
		t.Fatal(err)
	}
	eu, err := getCluster("eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Hub.Client.Delete(ctx, eu); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		us, err := getCluster("us-east-1")
		if err != nil || us.Labels["region"] != "us-east-1" {
			return fmt.Errorf("us-east-1 labels %v (err %v), want region us-east-1 back", us.Labels, err)
		}
		eu, err := getCluster("eu-west-1")
		if err != nil || eu.UID == "" || eu.Spec.Transport != magosv1.TransportDirect {
			return fmt.Errorf("eu-west-1 not registered again: %v", err)
		}
		return nil
	})
}

// TestResyncRepairsAgentAccess: the hub re-applies its configuration every ConfigResync (10
// minutes by default, a second here), which re-creates an agent cluster's ServiceAccount, Role
// and RoleBinding deleted by hand, and its namespace once the namespace's deletion is over. A
// token of the deleted ServiceAccount is refused even though a ServiceAccount of the same name
// exists again: tokens name the ServiceAccount's UID.
func TestResyncRepairsAgentAccess(t *testing.T) {
	ctx := context.Background()
	cfg := newConfigDir(t, clusterYAML(agentEntry("rs", "")))
	startHub(t, cfg.file(), func(o *app.Options) { o.ConfigResync = time.Second })
	ns := mirror.Namespace("rs")
	var raw []byte
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		raw, err = registry.AgentKubeconfig(ctx, env.Hub.Config, registry.AgentKubeconfigOptions{Cluster: "rs", Duration: time.Hour})
		return err
	})
	agentCfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	agentClient, err := client.New(agentCfg, client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	lease := client.ObjectKey{Namespace: ns, Name: keys.AgentLease}
	if err := agentClient.Get(ctx, lease, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Fatalf("reading the agent Lease with the agent's token: %v, want NotFound (accepted, no Lease yet)", err)
	}

	name := client.ObjectKey{Namespace: ns, Name: registry.AgentServiceAccount}
	sa := &corev1.ServiceAccount{}
	if err := env.Hub.Client.Get(ctx, name, sa); err != nil {
		t.Fatal(err)
	}
	deleted := sa.UID
	for _, o := range []client.Object{sa, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name.Name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name.Name}}} {
		if err := env.Hub.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := env.Hub.Client.Get(ctx, name, sa); err != nil {
			return err
		}
		if sa.UID == deleted {
			return fmt.Errorf("ServiceAccount %s not deleted yet", name)
		}
		return agentAccess(name)
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := agentClient.Get(ctx, lease, &coordinationv1.Lease{}); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("a token of the deleted ServiceAccount: %v, want Unauthorized", err)
		}
		return nil
	})

	namespace := &corev1.Namespace{}
	if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: ns}, namespace); err != nil {
		t.Fatal(err)
	}
	deleted = namespace.UID
	if err := env.Hub.Client.Delete(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: ns}, namespace); err != nil {
			return err
		}
		if namespace.UID == deleted {
			return fmt.Errorf("namespace %s not deleted yet", ns)
		}
		return agentAccess(name)
	})
}

// agentAccess checks that the ServiceAccount, Role and RoleBinding name exist on the hub.
func agentAccess(name client.ObjectKey) error {
	for _, o := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := env.Hub.Client.Get(context.Background(), name, o); err != nil {
			return err
		}
	}
	return nil
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) && slices.Equal(x.Verbs, y.Verbs)
	})
}

// TestHotReloadAddsRemovesAndReaddsClusters edits the config file (ConfigMap-style symlink swaps)
// and checks a cluster is registered, deregistered (disengaged, Cluster and namespace deleted)
// and registered again, while the cluster that stays is never disengaged.
func TestHotReloadAddsRemovesAndReaddsClusters(t *testing.T) {
	ctx := context.Background()
	stay := agentEntry("hr-stay", "env: prod")
	cfg := newConfigDir(t, clusterYAML(stay))
	hub := startHub(t, cfg.file())
	testenv.Eventually(t, 60*time.Second, func() error { return engaged(hub, "hr-stay") })
	stayCluster, _ := hub.Manager.GetCluster(ctx, "hr-stay")

	for round := 1; round <= 2; round++ {
		cfg.write(clusterYAML(stay, agentEntry("hr-new", "env: dev"), directEntry("hr-direct", env.Spokes["us-east-1"].Kubeconfig)))
		testenv.Eventually(t, 90*time.Second, func() error {
			for _, n := range []string{"hr-new", "hr-direct"} {
				if err := engaged(hub, n); err != nil {
					return err
				}
				if _, err := getCluster(n); err != nil {
					return err
				}
			}
			return env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: mirror.Namespace("hr-new"), Name: registry.AgentServiceAccount}, &corev1.ServiceAccount{})
		})
		cl, _ := getCluster("hr-new")
		if cl.Labels["env"] != "dev" {
			t.Fatalf("round %d: hr-new labels %v", round, cl.Labels)
		}

		cfg.write(clusterYAML(stay))
		testenv.Eventually(t, 120*time.Second, func() error {
			for _, n := range []string{"hr-new", "hr-direct"} {
				if err := engaged(hub, n); !errors.Is(err, multicluster.ErrClusterNotFound) {
					return fmt.Errorf("%s: GetCluster = %v, want not found", n, err)
				}
				if err := gone(&magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: n}})(); err != nil {
					return err
				}
			}
			return gone(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace("hr-new")}})()
		})
	}
	if cl, err := hub.Manager.GetCluster(ctx, "hr-stay"); err != nil || cl != stayCluster {
		t.Fatalf("hr-stay was re-engaged or dropped by the reloads: %v", err)
	}
}

// TestConfigEditedBeforeTheHubLeads edits the config file after the hub read it and before its
// registry starts, as happens to a standby replica whose ConfigMap changes while another leads
// (and happened in CI to a hub whose registry started late): the edit takes effect without a
// further one. Before the registry read the file again on starting, the added cluster was
// never registered.
func TestConfigEditedBeforeTheHubLeads(t *testing.T) {
	cfg := newConfigDir(t, clusterYAML(agentEntry("lead-a", "")))
	startHub(t, cfg.file(), func(*app.Options) {
		cfg.write(clusterYAML(agentEntry("lead-a", ""), agentEntry("lead-b", "")))
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, n := range []string{"lead-a", "lead-b"} {
			if err := wantCondition(n, magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged)(); err != nil {
				return err
			}
		}
		return nil
	})
}

// reloads is the hub's count of config reloads with the given result.
func reloads(t *testing.T, result string) float64 {
	t.Helper()
	return counter(t, "magos_hub_config_reloads_total", "result", result)
}

// TestOtherFilesBesideTheConfigDoNotReload writes a log file beside the config file 20 times,
// more slowly than the reload's quiet period, then publishes a real change: the hub applies the
// change and did not load its configuration for any of the log's writes (it did, 20 times,
// when every event in the directory counted).
func TestOtherFilesBesideTheConfigDoNotReload(t *testing.T) {
	cfg := newConfigDir(t, clusterYAML(agentEntry("quiet-a", "")))
	startHub(t, cfg.file())
	testenv.Eventually(t, 60*time.Second, wantCondition("quiet-a", magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
	unchanged, applied := reloads(t, "unchanged"), reloads(t, "applied")
	logFile, err := os.Create(filepath.Join(cfg.dir, "magos-hub.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	for i := range 20 {
		if _, err := fmt.Fprintf(logFile, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
		<-time.After(250 * time.Millisecond) // longer than the 200 ms quiet period: each write would reload
	}
	cfg.write(clusterYAML(agentEntry("quiet-a", ""), agentEntry("quiet-b", "")))
	testenv.Eventually(t, 60*time.Second, wantCondition("quiet-b", magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
	if n := reloads(t, "unchanged") - unchanged; n != 0 {
		t.Errorf("20 writes of a log beside the config file made %v reloads, want none", n)
	}
	if n := reloads(t, "applied") - applied; n != 1 {
		t.Errorf("%v reloads applied, want the one change", n)
	}
}

// TestConfigSymlinkTargetEditedInPlace: the config file is a symlink to another file of its
// directory, which is rewritten in place; the hub reloads on the target's events.
func TestConfigSymlinkTargetEditedInPlace(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "fleet-v1.yaml"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(target, []byte(clusterYAML(agentEntry("link-a", ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fleet-v1.yaml", link); err != nil {
		t.Fatal(err)
	}
	startHub(t, link)
	testenv.Eventually(t, 60*time.Second, wantCondition("link-a", magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
	if err := os.WriteFile(target, []byte(clusterYAML(agentEntry("link-a", ""), agentEntry("link-b", ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, wantCondition("link-b", magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
}

// TestMalformedConfigKeepsTheFleet writes a config that is not YAML, then one with an invalid
// entry: the running fleet stays as it is, every Cluster says so (ConfigLoaded False, a Warning
// Event), the failed-reloads metric counts them, and a good config takes effect again.
func TestMalformedConfigKeepsTheFleet(t *testing.T) {
	ctx := context.Background()
	good := clusterYAML(agentEntry("mc-a", ""), directEntry("mc-b", env.Spokes["eu-west-1"].Kubeconfig))
	cfg := newConfigDir(t, good)
	hub := startHub(t, cfg.file())
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, n := range []string{"mc-a", "mc-b"} {
			if err := wantCondition(n, magosv1.ConditionEngaged, metav1.ConditionTrue, "")(); err != nil {
				return err
			}
		}
		return nil
	})
	before := map[string]any{}
	for _, n := range []string{"mc-a", "mc-b"} {
		before[n], _ = hub.Manager.GetCluster(ctx, multicluster.ClusterName(n))
	}
	failedBefore := reloads(t, "failed")

	cases := []struct {
		name, body, message string
	}{
		{"bad yaml", "clusters: [\n  - name: mc-a\n", "config"},
		{"invalid entry", good + agentEntry("mc-a", ""), `clusters[2].name: duplicate cluster name "mc-a"`},
		{"no transport", clusterYAML("  - name: mc-c\n"), "clusters[0]: set exactly one of agent"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg.write(tc.body)
			testenv.Eventually(t, 60*time.Second, func() error {
				for _, n := range []string{"mc-a", "mc-b"} {
					cl, err := getCluster(n)
					if err != nil {
						return err
					}
					c := meta.FindStatusCondition(cl.Status.Conditions, registry.ConditionConfigLoaded)
					if c == nil || c.Status != metav1.ConditionFalse || c.Reason != registry.ReasonConfigInvalid || !strings.Contains(c.Message, tc.message) {
						return fmt.Errorf("%s: ConfigLoaded = %+v, want False/%s mentioning %q", n, c, registry.ReasonConfigInvalid, tc.message)
					}
				}
				if got := reloads(t, "failed"); got < failedBefore+float64(i+1) {
					return fmt.Errorf("failed reloads = %v, want at least %v", got, failedBefore+float64(i+1))
				}
				return nil
			})
			testenv.Consistently(t, 2*time.Second, func() error {
				for n, cl := range before {
					got, err := hub.Manager.GetCluster(ctx, multicluster.ClusterName(n))
					if err != nil || any(got) != cl {
						return fmt.Errorf("cluster %s changed under a bad config: %v", n, err)
					}
				}
				if _, err := getCluster("mc-c"); !apierrors.IsNotFound(err) {
					return fmt.Errorf("the invalid config registered mc-c: %v", err)
				}
				return nil
			})
		})
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		evs := &eventsv1.EventList{}
		if err := env.Hub.Client.List(ctx, evs, client.InNamespace("default")); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "mc-a" && e.Reason == registry.ReasonConfigInvalid && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no ConfigInvalid Warning Event on Cluster mc-a")
	})

	cfg.write(clusterYAML(agentEntry("mc-a", "")))
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := wantCondition("mc-a", registry.ConditionConfigLoaded, metav1.ConditionTrue, registry.ReasonConfigLoaded)(); err != nil {
			return err
		}
		return gone(&magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "mc-b"}})()
	})
}

// gauge reads a gauge of the controller-runtime metrics registry by its "cluster" label ("" for
// an unlabelled gauge); ok is false when it has no such series.
func gauge(t *testing.T, name, cluster string) (float64, bool) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if cluster == "" && len(m.GetLabel()) == 0 {
				return m.GetGauge().GetValue(), true
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestHeartbeatMakesAgentClusterAvailable renews the agent's Lease with the agent's own bootstrap
// credentials (printed by AgentKubeconfig): the Cluster turns Available, then, once renewals stop,
// turns unavailable within the lease duration, with no event other than the passing of time.
func TestHeartbeatMakesAgentClusterAvailable(t *testing.T) {
	ctx := context.Background()
	ns := mirror.Namespace("hb")
	agentCfg := startHubForAgent(t, "hb")
	agentClient, err := client.New(agentCfg, client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatal(err)
	}

	const leaseSeconds = 3
	// An agent outside the version skew policy heartbeats: the hub refuses it, says why on the
	// Cluster, and writes its own version on the Lease for the agent to check from its side.
	agentVersion := "v9.9.9"
	renew := func() error {
		return renewLease(ctx, agentClient, ns, "hb/test", leaseSeconds, map[string]string{keys.AgentVersion: agentVersion})
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := renew(); err != nil {
			return err
		}
		if err := wantCondition("hb", magosv1.ConditionAvailable, metav1.ConditionFalse, magosv1.ReasonAgentVersionSkew)(); err != nil {
			return err
		}
		cl, _ := getCluster("hb")
		c := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionAvailable)
		want := "agent v9.9.9 is outside the supported version skew: hub " + version.Get() + " supports agents " + version.SupportedBy(version.Get())
		if !strings.Contains(c.Message, want) || cl.Status.AgentVersion != "v9.9.9" {
			return fmt.Errorf("Available says %q with agent version %q, want the message to say %q", c.Message, cl.Status.AgentVersion, want)
		}
		lease := &coordinationv1.Lease{}
		if err := agentClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease); err != nil {
			return err
		}
		if got := lease.Annotations[keys.HubVersion]; got != version.Get() {
			return fmt.Errorf("the Lease names hub version %q, want %q", got, version.Get())
		}
		return wantCondition("hb", magosv1.ConditionReady, metav1.ConditionFalse, magosv1.ReasonAgentVersionSkew)()
	})
	// Upgraded to a version within the policy, the same agent is taken at once.
	agentVersion = "v0.1.7"
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := renew(); err != nil {
			return err
		}
		if err := wantCondition("hb", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)(); err != nil {
			return err
		}
		cl, _ := getCluster("hb")
		if cl.Status.LastHeartbeatTime == nil || cl.Status.AgentVersion != "v0.1.7" {
			return fmt.Errorf("heartbeat %v, agent version %q", cl.Status.LastHeartbeatTime, cl.Status.AgentVersion)
		}
		if v, ok := gauge(t, "magos_hub_cluster_available", "hb"); !ok || v != 1 {
			return fmt.Errorf("magos_hub_cluster_available{cluster=hb} = %v (present %v), want 1", v, ok)
		}
		return wantCondition("hb", magosv1.ConditionReady, metav1.ConditionTrue, registry.ReasonReady)()
	})

	// Silence: nothing happens on the hub but time passing.
	stopped := time.Now()
	testenv.Eventually(t, 30*time.Second, wantCondition("hb", magosv1.ConditionAvailable, metav1.ConditionFalse, magosv1.ReasonAgentSilent))
	if took := time.Since(stopped); took > leaseSeconds*time.Second+10*time.Second {
		t.Errorf("the silent agent turned unavailable after %s, want about its lease duration (%ds)", took, leaseSeconds)
	}
	if v, _ := gauge(t, "magos_hub_cluster_available", "hb"); v != 0 {
		t.Errorf("magos_hub_cluster_available{cluster=hb} = %v, want 0", v)
	}
	if v, ok := gauge(t, "magos_hub_engaged_clusters", ""); !ok || v < 1 {
		t.Errorf("magos_hub_engaged_clusters = %v (present %v), want at least 1", v, ok)
	}
}

func ptr[T any](v T) *T { return &v }

// reconciles is controller-runtime's own count of the reconciles of a controller, all results.
func reconciles(t *testing.T, controller string) float64 {
	t.Helper()
	return counter(t, "controller_runtime_reconcile_total", "controller", controller)
}

// counter sums a counter of the controller-runtime metrics registry over its series whose label
// is value.
func counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// renewLease creates or renews, with c, the agent Lease of hub namespace ns as an agent does:
// held by holder for seconds from now, with annotations set on it.
// startHubForAgent runs a hub whose config registers the one agent cluster name, and returns
// the rest config of that agent's bootstrap kubeconfig, once the hub made it (checking that the
// kubeconfig's namespace is the cluster's).
func startHubForAgent(t *testing.T, name string) *rest.Config {
	t.Helper()
	cfg := newConfigDir(t, clusterYAML(agentEntry(name, "")))
	startHub(t, cfg.file())
	var raw []byte
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		raw, err = registry.AgentKubeconfig(context.Background(), env.Hub.Config, registry.AgentKubeconfigOptions{Cluster: name, Duration: time.Hour})
		return err
	})
	kc, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	if ns := mirror.Namespace(name); kc.Contexts[kc.CurrentContext].Namespace != ns {
		t.Fatalf("bootstrap kubeconfig namespace %q, want %q", kc.Contexts[kc.CurrentContext].Namespace, ns)
	}
	agentCfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	return agentCfg
}

func renewLease(ctx context.Context, c client.Client, ns, holder string, seconds int32, annotations map[string]string) error {
	lease := &coordinationv1.Lease{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentLease}}
	} else if err != nil {
		return err
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr(holder), ptr(seconds)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	// An agent reports its version (the hub refuses one that does not): this build's, unless
	// the test says otherwise.
	if _, ok := lease.Annotations[keys.AgentVersion]; !ok {
		lease.Annotations[keys.AgentVersion] = version.Get()
	}
	maps.Copy(lease.Annotations, annotations)
	if lease.ResourceVersion == "" {
		return c.Create(ctx, lease)
	}
	return c.Update(ctx, lease)
}

// startHubWithAgentCluster runs a hub whose config registers the one agent cluster name, with
// the given health interval, and returns the cluster's hub namespace once the hub made it.
func startHubWithAgentCluster(t *testing.T, name string, healthInterval time.Duration) string {
	t.Helper()
	cfg := newConfigDir(t, clusterYAML(agentEntry(name, "")))
	startHub(t, cfg.file(), func(o *app.Options) { o.HealthInterval = healthInterval })
	ns := mirror.Namespace(name)
	testenv.Eventually(t, 60*time.Second, func() error {
		return env.Hub.Client.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{})
	})
	return ns
}

// TestRoutineRenewalsAreNotReevaluated renews an agent's Lease every 200 ms for 2 s, moving its
// renew time and its sync time as the agent does, and counts the Cluster status reconciles
// (controller-runtime's metric): a routine renewal changes nothing the status shows, so it
// triggers none (fails without the Lease predicate: 10 or more). A renewal after the Lease
// expired is not routine: the Cluster is Available again at once, although the hub re-evaluates
// Clusters on its own only every 10 minutes here.
func TestRoutineRenewalsAreNotReevaluated(t *testing.T) {
	ctx := context.Background()
	ns := startHubWithAgentCluster(t, "renew", 10*time.Minute)
	since := time.Now().Add(-time.Hour).Truncate(time.Second)
	renew := func() error {
		return renewLease(ctx, env.Hub.Client, ns, "renew/test", 4, mirror.Watermark{Since: since, At: time.Now(), Mirrored: 3}.Annotations())
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := renew(); err != nil {
			return err
		}
		return wantCondition("renew", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)()
	})

	before := reconciles(t, "cluster-status")
	for range 10 {
		if err := renew(); err != nil {
			t.Fatal(err)
		}
		<-time.After(200 * time.Millisecond) // the agent's pace, not a synchronisation
	}
	if n := reconciles(t, "cluster-status") - before; n > 3 {
		t.Errorf("10 routine renewals caused %v Cluster status reconciles, want at most the Lease's own expiry checks (3)", n)
	}

	testenv.Eventually(t, 30*time.Second, wantCondition("renew", magosv1.ConditionAvailable, metav1.ConditionFalse, magosv1.ReasonAgentSilent))
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, wantCondition("renew", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating))
}

// TestRenewalsDoNotRewriteTheStatus renews an agent's Lease, valid for 2 s, every 300 ms for 9 s,
// and counts the writes of the Cluster's status at the API server: once Available, the status
// shows nothing that moves with each renewal, so the hub, which reads the Lease again each time
// it would expire, writes nothing (it wrote at each of those reads while the Available
// condition's message carried the renewal time). A new agent replica taking the Lease is a
// heartbeat the status shows at once, within its granularity of 5 minutes.
func TestRenewalsDoNotRewriteTheStatus(t *testing.T) {
	ctx := context.Background()
	cfg := newConfigDir(t, clusterYAML(agentEntry("steady", "")))
	rc, writes := testenv.CountRequests(env.Hub.Config, func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/clusters/steady/status")
	})
	startHub(t, cfg.file(), func(o *app.Options) { o.RestConfig = rc; o.HealthInterval = time.Minute })
	ns := mirror.Namespace("steady")
	renew := func(holder string) error {
		return renewLease(ctx, env.Hub.Client, ns, holder, 2, map[string]string{keys.AgentVersion: version.Get()})
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := renew("steady/a"); err != nil {
			return err
		}
		return wantCondition("steady", magosv1.ConditionReady, metav1.ConditionTrue, registry.ReasonReady)()
	})
	first, _ := getCluster("steady")
	before := writes.Load()
	for range 30 {
		if err := renew("steady/a"); err != nil {
			t.Fatal(err)
		}
		<-time.After(300 * time.Millisecond) // the agent's pace, not a synchronisation
	}
	if n := writes.Load() - before; n > 1 {
		t.Errorf("30 renewals over 9 s of a 2 s Lease wrote the Cluster's status %d times, want none (one for a write of the flip still under way)", n)
	}
	if cl, _ := getCluster("steady"); !cl.Status.LastHeartbeatTime.Equal(first.Status.LastHeartbeatTime) {
		t.Errorf("lastHeartbeatTime moved from %v to %v within its granularity", first.Status.LastHeartbeatTime, cl.Status.LastHeartbeatTime)
	}

	// Another replica takes the Lease, as a restarted agent's new Pod does.
	lease := &coordinationv1.Lease{}
	if err := env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease); err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	lease.Spec.HolderIdentity = ptr("steady/b")
	lease.Spec.AcquireTime = &metav1.MicroTime{Time: acquired}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: acquired}
	if err := env.Hub.Client.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := renew("steady/b"); err != nil {
			return err
		}
		cl, err := getCluster("steady")
		if err != nil {
			return err
		}
		if hb := cl.Status.LastHeartbeatTime; hb == nil || hb.Before(&metav1.Time{Time: acquired.Truncate(time.Second)}) {
			return fmt.Errorf("lastHeartbeatTime %v, want the new holder's, at or after %s", hb, acquired.Truncate(time.Second))
		}
		return nil
	})
}

// TestReloadAppliesWhatChanged registers 20 agent clusters, then adds one by rewriting the config
// file: the hub sets up the new cluster's access and leaves the 20 others alone, so a reload
// costs what it changed (fails when a reload re-applies every cluster: 22 reads). The new
// cluster's objects are created outright; the registration and the status controller's repair
// may both set them up, and the second reads the ServiceAccount once.
func TestReloadAppliesWhatChanged(t *testing.T) {
	var entries []string
	for i := range 20 {
		entries = append(entries, agentEntry(fmt.Sprintf("rw-%02d", i), ""))
	}
	cfg := newConfigDir(t, clusterYAML(entries...))
	rc, reads := testenv.CountRequests(env.Hub.Config, func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/serviceaccounts/"+registry.AgentServiceAccount)
	})
	startHub(t, cfg.file(), func(o *app.Options) { o.RestConfig = rc; o.HealthInterval = time.Minute })
	for i := range 20 {
		testenv.Eventually(t, 60*time.Second, wantCondition(fmt.Sprintf("rw-%02d", i), magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
	}
	before := reads.Load()
	cfg.write(clusterYAML(append(entries, agentEntry("rw-new", ""))...))
	testenv.Eventually(t, 60*time.Second, wantCondition("rw-new", magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
	testenv.Eventually(t, 60*time.Second, func() error {
		return env.Hub.Client.Get(context.Background(), client.ObjectKey{Namespace: mirror.Namespace("rw-new"), Name: registry.AgentServiceAccount}, &corev1.ServiceAccount{})
	})
	if n := reads.Load() - before; n > 1 {
		t.Errorf("adding one cluster read %d agent ServiceAccounts, want at most the new one's, the others left alone", n)
	}
}

// TestLiveLeaseIsNotPolled gives the hub a 200 ms health interval and an agent Lease valid for
// 10 s: while the Lease is live and nothing changes, the hub does not re-evaluate the Cluster
// every interval but when the Lease would expire (fails when the interval caps the wait: about 10
// reconciles in 2 s; 2 with the fix, echoes of the last status write).
func TestLiveLeaseIsNotPolled(t *testing.T) {
	ctx := context.Background()
	ns := startHubWithAgentCluster(t, "live", 200*time.Millisecond)
	// The hub counts the agent live from the first renewal it sees (its own clock), so renew
	// until it does.
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := renewLease(ctx, env.Hub.Client, ns, "live/test", 10, nil); err != nil {
			return err
		}
		return wantCondition("live", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)()
	})
	// The reconcile count is the process's: wait until this hub has removed the Clusters an
	// earlier test left in the shared API server, whose deletions it reconciles too.
	testenv.Eventually(t, 30*time.Second, func() error {
		list := &magosv1.ClusterList{}
		if err := env.Hub.Client.List(ctx, list); err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Name != "live" {
			return fmt.Errorf("%d Clusters registered, want only live", len(list.Items))
		}
		return nil
	})
	before := reconciles(t, "cluster-status")
	<-time.After(2 * time.Second) // a measurement window, not a synchronisation
	// The last status write of the flip to Available may still echo back as an event or two.
	if n := reconciles(t, "cluster-status") - before; n > 3 {
		t.Errorf("%v Cluster status reconciles in 2 s of a live Lease with nothing changing, want none until it would expire (at most the echo of the last status write)", n)
	}
}

// TestResyncKeepsToItsShare: the periodic resync (every second here) re-reads each agent
// cluster's ServiceAccount, Role and RoleBinding at no more than a tenth of the hub's request
// budget (kubeApiQps 100: 10 requests a second, 3 per cluster), and its Cluster object and
// namespace not at all: the hub's cache shows them in place. A pass at full speed read the 20
// clusters' ServiceAccounts every second, and their namespaces and Clusters too.
func TestResyncKeepsToItsShare(t *testing.T) {
	var entries []string
	for i := range 20 {
		entries = append(entries, agentEntry(fmt.Sprintf("rq-%02d", i), ""))
	}
	cfg := newConfigDir(t, clusterYAML(entries...))
	var cached atomic.Int64
	rc, reads := testenv.CountRequests(env.Hub.Config, func(r *http.Request) bool {
		if r.Method != http.MethodGet {
			return false
		}
		if strings.Contains(r.URL.Path, "/namespaces/"+keys.ClusterNamespacePrefix) && !strings.Contains(r.URL.Path, "/serviceaccounts/") &&
			!strings.Contains(r.URL.Path, "/roles/") && !strings.Contains(r.URL.Path, "/rolebindings/") ||
			strings.Contains(r.URL.Path, "/clusters/rq-") {
			cached.Add(1)
		}
		return strings.HasSuffix(r.URL.Path, "/serviceaccounts/"+registry.AgentServiceAccount)
	})
	startHub(t, cfg.file(), func(o *app.Options) { o.RestConfig = rc; o.HealthInterval = time.Minute; o.ConfigResync = time.Second })
	for i := range 20 {
		testenv.Eventually(t, 60*time.Second, wantCondition(fmt.Sprintf("rq-%02d", i), magosv1.ConditionEngaged, metav1.ConditionTrue, magosv1.ReasonEngaged))
	}
	before, cachedBefore := reads.Load(), cached.Load()
	<-time.After(3 * time.Second) // a measurement window, not a synchronisation
	n := reads.Load() - before
	if n > 12 {
		t.Errorf("the resync read %d agent ServiceAccounts in 3 s, want at most 12: 10 requests a second, 3 per cluster, and a burst of one cluster", n)
	}
	if n == 0 {
		t.Error("the resync read no agent ServiceAccount in 3 s: it does not run")
	}
	if m := cached.Load() - cachedBefore; m > 0 {
		t.Errorf("the resync read %d agent namespaces or Clusters from the API server, want none: the hub's cache shows them", m)
	}
}

// TestHeartbeatClockSkew: the hub judges an agent's liveness by when it saw the Lease renewed,
// on its own clock. An agent whose clock runs ten minutes behind, renewing every 500 ms, is
// Available; one whose clock runs ten minutes ahead turns AgentSilent about a lease duration
// after its last renewal, not ten minutes later. (Judged by the renewTime the agent writes, the
// first never counted live and the second stayed live for ten minutes.) Each Cluster's
// status.clockOffset shows its agent's skew, as the hub measured it.
func TestHeartbeatClockSkew(t *testing.T) {
	ctx := context.Background()
	cfg := newConfigDir(t, clusterYAML(agentEntry("behind", ""), agentEntry("ahead", "")))
	startHub(t, cfg.file(), func(o *app.Options) { o.HealthInterval = time.Minute })
	// renewSkewed renews an agent's Lease with its clock skewed; skewed does so as the agent
	// would, reading the Lease again after a conflict (CI once saw one here).
	renewSkewed := func(name string, skew time.Duration) error {
		ns := mirror.Namespace(name)
		lease := &coordinationv1.Lease{}
		err := env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease)
		if apierrors.IsNotFound(err) {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentLease}}
		} else if err != nil {
			return err
		}
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr(name+"/agent"), ptr(int32(3))
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(skew)}
		lease.Annotations = map[string]string{keys.AgentVersion: version.Get()}
		if lease.ResourceVersion == "" {
			return env.Hub.Client.Create(ctx, lease)
		}
		return env.Hub.Client.Update(ctx, lease)
	}
	skewed := func(name string, skew time.Duration) error {
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error { return renewSkewed(name, skew) })
	}
	for _, name := range []string{"behind", "ahead"} {
		testenv.Eventually(t, 60*time.Second, func() error {
			return env.Hub.Client.Get(ctx, client.ObjectKey{Name: mirror.Namespace(name)}, &corev1.Namespace{})
		})
	}
	// Both renew for a while, each with its own clock.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := skewed("behind", -10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := skewed("ahead", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if wantCondition("behind", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)() == nil &&
			wantCondition("ahead", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewing agents are not both Available: behind %v, ahead %v",
				wantCondition("behind", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)(),
				wantCondition("ahead", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)())
		}
		<-time.After(500 * time.Millisecond) // the agents' pace, not a synchronisation
	}
	// The agent ahead falls silent; the one behind keeps renewing.
	stopped := time.Now()
	for time.Since(stopped) < 8*time.Second {
		if err := skewed("behind", -10*time.Minute); err != nil {
			t.Fatal(err)
		}
		<-time.After(500 * time.Millisecond) // the agent's pace, not a synchronisation
	}
	if err := wantCondition("ahead", magosv1.ConditionAvailable, metav1.ConditionFalse, magosv1.ReasonAgentSilent)(); err != nil {
		t.Errorf("8 s after the agent ahead fell silent (its lease lasts 3 s): %v", err)
	}
	if err := wantCondition("behind", magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)(); err != nil {
		t.Errorf("the agent behind, renewing: %v", err)
	}
	// Each Cluster shows how far its agent's clock runs from the hub's, as the hub measured it
	// from the renewals it saw (within a second: the delay of a watch event, rounded).
	for name, want := range map[string]time.Duration{"behind": -10 * time.Minute, "ahead": 10 * time.Minute} {
		cl := &magosv1.Cluster{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, cl); err != nil {
			t.Fatal(err)
		}
		if cl.Status.ClockOffset == nil || (cl.Status.ClockOffset.Duration-want).Abs() > time.Second {
			t.Errorf("cluster %s: status.clockOffset %v, want %s within a second", name, cl.Status.ClockOffset, want)
		}
	}
}

// TestHubRestartKeepsLiveClustersLive: a hub that starts (a restart, or a standby taking over
// as leader) has seen no renewal of any agent's Lease yet. A cluster the hub before it judged
// live, whose agent keeps renewing, stays Available through the restart: the new hub gives it
// one lease duration to see a renewal instead of turning it silent at once (which revoked the
// fleet's grants on every leader change and granted them again a moment later; fails without
// the grace in reconcileStatus). A cluster whose agent stopped renewing still turns silent,
// within a lease duration of the new hub's start.
func TestHubRestartKeepsLiveClustersLive(t *testing.T) {
	ctx := context.Background()
	cfg := newConfigDir(t, clusterYAML(agentEntry("steady", ""), agentEntry("gone", "")))
	_, stopFirst := runHub(t, cfg.file())
	for _, name := range []string{"steady", "gone"} {
		testenv.Eventually(t, 60*time.Second, func() error {
			return env.Hub.Client.Get(ctx, client.ObjectKey{Name: mirror.Namespace(name)}, &corev1.Namespace{})
		})
	}
	renew := func(name string) error {
		return renewLease(ctx, env.Hub.Client, mirror.Namespace(name), name+"/agent", 4, nil)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, name := range []string{"steady", "gone"} {
			if err := renew(name); err != nil {
				return err
			}
			if err := wantCondition(name, magosv1.ConditionAvailable, metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating)(); err != nil {
				return err
			}
		}
		return nil
	})
	stopFirst()

	// From here an observer of its own watches steady's Cluster for any Available other than True.
	wc, err := client.NewWithWatch(env.Hub.Config, client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := wc.Watch(wctx, &magosv1.ClusterList{}, client.MatchingFields{"metadata.name": "steady"})
	if err != nil {
		t.Fatal(err)
	}
	var flips atomic.Int32
	var lastFlip atomic.Value
	go func() {
		for ev := range w.ResultChan() {
			if cl, ok := ev.Object.(*magosv1.Cluster); ok && !meta.IsStatusConditionTrue(cl.Status.Conditions, magosv1.ConditionAvailable) {
				flips.Add(1)
				lastFlip.Store(fmt.Sprint(meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionAvailable)))
			}
		}
	}()

	if err := renew("steady"); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	startHub(t, cfg.file())
	// steady renews every second (its Lease lasts 4 s) for three lease durations; gone never again.
	for time.Since(started) < 12*time.Second {
		if err := renew("steady"); err != nil {
			t.Fatal(err)
		}
		<-time.After(time.Second) // the agent's pace, not a synchronisation
	}
	if n := flips.Load(); n > 0 {
		t.Errorf("the renewing cluster turned unavailable %d times across the hub's restart, last: %v", n, lastFlip.Load())
	}
	if err := wantCondition("gone", magosv1.ConditionAvailable, metav1.ConditionFalse, magosv1.ReasonAgentSilent)(); err != nil {
		t.Errorf("12 s after the restart, the cluster whose agent stopped renewing (its Lease lasts 4 s): %v", err)
	}
}
