package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

var env *localcluster.Fleet

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.MainOptions{
		Fleet: localcluster.Options{Spokes: []string{"us-east-1", "eu-west-1", "ap-south-1"}},
		Setup: func(e *testenv.MainEnv) error {
			env = e.Fleet
			return nil
		},
	})
}

// engagements records every Engage call the manager passes on.
type engagements struct {
	mu  sync.Mutex
	all map[string][]engaged
}

type engaged struct {
	ctx context.Context
	cl  cluster.Cluster
}

func (e *engagements) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.all == nil {
		e.all = map[string][]engaged{}
	}
	e.all[string(name)] = append(e.all[string(name)], engaged{ctx: ctx, cl: cl})
	return nil
}

func (e *engagements) Start(ctx context.Context) error { <-ctx.Done(); return nil }

// of returns the engagements of a cluster so far.
func (e *engagements) of(name string) []engaged {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.all[name])
}

type hub struct {
	mgr   mcmanager.Manager
	fleet *fleet.Fleet
	rec   *engagements
}

// startHub runs a hub manager with a fleet provider on the test hub until the test ends.
// setup, when given, adds controllers before the manager starts.
func startHub(t testing.TB, opts fleet.Options, setup func(mcmanager.Manager)) *hub {
	t.Helper()
	return startHubWith(t, env.Hub.Config, opts, setup)
}

// startHubWith is startHub with the hub's client built from cfg, and its cache set as the
// hub binary sets it.
func startHubWith(t testing.TB, cfg *rest.Config, opts fleet.Options, setup func(mcmanager.Manager)) *hub {
	t.Helper()
	skip := true
	local, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     magosscheme.New(),
		Cache:      cache.Options{ByObject: fleet.HubCacheByObject(), DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	opts.Hub = local
	if opts.EngageTimeout == 0 {
		opts.EngageTimeout = 30 * time.Second
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 200*time.Millisecond, 2*time.Second
	}
	fl, err := fleet.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := mcmanager.WithMultiCluster(local, fl)
	if err != nil {
		t.Fatal(err)
	}
	rec := &engagements{}
	if err := mgr.Add(rec); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(mgr)
	}
	testenv.Background(t, context.Background(), "hub manager", mgr.Start)
	return &hub{mgr: mgr, fleet: fl, rec: rec}
}

func direct(name, path string) fleet.Spec {
	return fleet.Spec{Name: name, Transport: magosv1.TransportDirect, Kubeconfig: &magosv1.KubeconfigSource{Path: path}}
}

func agent(name string) fleet.Spec {
	return fleet.Spec{Name: name, Transport: magosv1.TransportAgent}
}

func newWorkspace(ns, name string, labels map[string]string) *magosv1.Workspace {
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: "payments"},
			Source:     magosv1.Source{RepoURL: "file:///tmp/repo", TargetRevision: "main"},
			Terraform:  magosv1.TerraformSpec{Version: "1.10.6"},
		},
	}
}

func newMirror(cluster, originNS, originName string) *magosv1.Workspace {
	ws := newWorkspace(originNS, originName, map[string]string{"env": "prod"})
	m := newWorkspace(mirror.Namespace(cluster), mirror.Name(originNS, originName), mirror.Labels(cluster, ws))
	return m
}

func ensureNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

func getCluster(h *hub, name string) (cluster.Cluster, error) {
	return h.mgr.GetCluster(context.Background(), multicluster.ClusterName(name))
}

// TestFleetEngagesAgentAndDirectClusters runs a multi-cluster controller over two direct spokes,
// the hub itself as a direct cluster, and an agent cluster, and checks it sees each cluster's
// Workspaces under that cluster's name, and nothing else: the direct view of the hub does not
// show mirrors, the agent view shows only mirrors of its namespace.
func TestFleetEngagesAgentAndDirectClusters(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string][]string{}
	h := startHub(t, fleet.Options{}, func(mgr mcmanager.Manager) {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &magosv1.Workspace{}, "project", func(o client.Object) []string {
			return []string{o.(*magosv1.Workspace).Spec.ProjectRef.Name}
		}); err != nil {
			t.Fatal(err)
		}
		err := mcbuilder.ControllerManagedBy(mgr).Named("seen").
			For(&magosv1.Workspace{}).
			WithOptions(controller.TypedOptions[mcreconcile.Request]{SkipNameValidation: ptr(true)}).
			Complete(mcreconcile.Func(func(_ context.Context, req mcreconcile.Request) (ctrl.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				k := req.Namespace + "/" + req.Name
				if !slices.Contains(seen[string(req.ClusterName)], k) {
					seen[string(req.ClusterName)] = append(seen[string(req.ClusterName)], k)
				}
				return ctrl.Result{}, nil
			}))
		if err != nil {
			t.Fatal(err)
		}
	})
	ensureNamespace(t, env.Hub.Client, "t1-hub")
	ensureNamespace(t, env.Hub.Client, mirror.Namespace("t1-agent"))
	ensureNamespace(t, env.Hub.Client, mirror.Namespace("t1-other"))
	for _, s := range []string{"us-east-1", "eu-west-1"} {
		ensureNamespace(t, env.Spokes[s].Client, "t1")
		create(t, env.Spokes[s].Client, newWorkspace("t1", "ws-"+s, nil))
	}
	create(t, env.Hub.Client,
		newWorkspace("t1-hub", "local-ws", nil),
		// The mirror label makes a mirror only with the value "true" (mirror.IsMirror): the
		// direct view shows a Workspace labelled anything else, as its agent runs it.
		newWorkspace("t1-hub", "labelled-false", map[string]string{"magosproject.io/mirror": "false"}),
		newWorkspace("t1-hub", "labelled-empty", map[string]string{"magosproject.io/mirror": ""}),
		newWorkspace("t1-hub", "labelled-true", map[string]string{"magosproject.io/mirror": "true"}),
		newMirror("t1-agent", "team", "app"),
		newMirror("t1-other", "team", "app"),
	)
	h.fleet.Set([]fleet.Spec{
		direct("t1-us", env.Spokes["us-east-1"].Kubeconfig),
		direct("t1-eu", env.Spokes["eu-west-1"].Kubeconfig),
		direct("t1-hub", env.Hub.Kubeconfig),
		agent("t1-agent"),
	})
	want := map[string][]string{
		"t1-us":    {"t1/ws-us-east-1"},
		"t1-eu":    {"t1/ws-eu-west-1"},
		"t1-hub":   {"t1-hub/local-ws", "t1-hub/labelled-false", "t1-hub/labelled-empty"},
		"t1-agent": {mirror.Namespace("t1-agent") + "/" + mirror.Name("team", "app")},
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for name, wanted := range want {
			got := slices.Clone(seen[name])
			sort.Strings(got)
			for _, k := range wanted {
				if !slices.Contains(got, k) {
					return fmt.Errorf("cluster %s: saw %v, want %v among them", name, got, wanted)
				}
			}
		}
		return nil
	})
	// Direct clusters see every namespace of their API server (other tests share them), but the
	// hub's direct view never shows a mirror, and the agent view shows only its namespace.
	mu.Lock()
	for _, k := range seen["t1-hub"] {
		if strings.HasPrefix(k, keys.ClusterNamespacePrefix) || k == "t1-hub/labelled-true" {
			t.Errorf("the hub's direct view saw the mirror %s", k)
		}
	}
	for _, k := range seen["t1-agent"] {
		if !strings.HasPrefix(k, mirror.Namespace("t1-agent")+"/") {
			t.Errorf("the agent view saw %s, outside its namespace", k)
		}
	}
	mu.Unlock()
	if got := h.fleet.ClusterNames(); !slices.Equal(got, []string{"t1-agent", "t1-eu", "t1-hub", "t1-us"}) {
		t.Fatalf("ClusterNames = %v", got)
	}
	cl, err := getCluster(h, "t1-agent")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cl.(*fleet.AgentCluster); !ok {
		t.Fatalf("agent cluster is a %T, want *fleet.AgentCluster", cl)
	}
	direct, err := getCluster(h, "t1-us")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.fleet.Probe(ctx, "t1-us"); err != nil {
		t.Fatalf("probe of a direct cluster: %v", err)
	}
	list := &magosv1.WorkspaceList{}
	if err := direct.GetClient().List(ctx, list, client.InNamespace("t1")); err != nil || len(list.Items) != 1 {
		t.Fatalf("direct cluster client lists %d Workspaces (err %v), want 1", len(list.Items), err)
	}

	// A field index registered through the manager serves every cluster, agent and direct.
	for _, name := range []string{"t1-us", "t1-agent"} {
		c, err := getCluster(h, name)
		if err != nil {
			t.Fatal(err)
		}
		for project, want := range map[string]int{"payments": 1, "other": 0} {
			list := &magosv1.WorkspaceList{}
			ns := "t1"
			if name == "t1-agent" {
				ns = mirror.Namespace("t1-agent")
			}
			if err := c.GetClient().List(ctx, list, client.InNamespace(ns), client.MatchingFields{"project": project}); err != nil {
				t.Fatalf("%s: listing by the index: %v", name, err)
			}
			if len(list.Items) != want {
				t.Errorf("%s: %d Workspaces of project %s, want %d", name, len(list.Items), project, want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func notFound(err error) error {
	if err == nil {
		return errors.New("still engaged")
	}
	if !errors.Is(err, multicluster.ErrClusterNotFound) {
		return fmt.Errorf("error %v does not wrap ErrClusterNotFound", err)
	}
	return nil
}

func done(ctx context.Context) bool { return ctx.Err() != nil }

// TestFleetEngagesDisengagesAndReengagesOnSet removes a cluster from the registered set and adds
// it back: it is disengaged (its context ends, Get fails) and engaged again with a new context,
// while a cluster whose only change is its labels keeps its engagement.
func TestFleetEngagesDisengagesAndReengagesOnSet(t *testing.T) {
	h := startHub(t, fleet.Options{}, nil)
	us := direct("t2-us", env.Spokes["us-east-1"].Kubeconfig)
	ag := agent("t2-agent")
	h.fleet.Set([]fleet.Spec{us, ag})
	testenv.Eventually(t, 60*time.Second, func() error {
		if _, err := getCluster(h, "t2-us"); err != nil {
			return err
		}
		_, err := getCluster(h, "t2-agent")
		return err
	})
	first := h.rec.of("t2-us")
	if len(first) != 1 {
		t.Fatalf("t2-us engaged %d times, want 1", len(first))
	}

	h.fleet.Set([]fleet.Spec{ag})
	testenv.Eventually(t, 30*time.Second, func() error {
		if !done(first[0].ctx) {
			return errors.New("the removed cluster's engagement context is still live")
		}
		_, err := getCluster(h, "t2-us")
		return notFound(err)
	})
	if got := h.fleet.ClusterNames(); !slices.Equal(got, []string{"t2-agent"}) {
		t.Fatalf("ClusterNames = %v, want [t2-agent]", got)
	}

	ag.Labels = map[string]string{"region": "ap-south-1"}
	h.fleet.Set([]fleet.Spec{us, ag})
	testenv.Eventually(t, 60*time.Second, func() error {
		cl, err := getCluster(h, "t2-us")
		if err != nil {
			return err
		}
		all := h.rec.of("t2-us")
		if len(all) != 2 || all[1].cl != cl || done(all[1].ctx) {
			return fmt.Errorf("t2-us: %d engagements, want a second, live one for the cluster Get returns", len(all))
		}
		return nil
	})
	if got := h.fleet.Labels("t2-agent"); got["region"] != "ap-south-1" {
		t.Fatalf("labels of t2-agent = %v", got)
	}
	agents := h.rec.of("t2-agent")
	if len(agents) != 1 || done(agents[0].ctx) {
		t.Fatalf("t2-agent: %d engagements (want 1, still live): a label change must not re-engage", len(agents))
	}
}

// writeKubeconfig writes a copy of a kubeconfig pointing at server (if not empty).
func writeKubeconfig(t *testing.T, from, server string) string {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if server != "" {
		lines := strings.Split(string(raw), "\n")
		for i, l := range lines {
			if strings.Contains(l, "server: ") {
				lines[i] = l[:strings.Index(l, "server: ")] + "server: " + server
			}
		}
		raw = []byte(strings.Join(lines, "\n"))
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFleetBrokenClusterDoesNotBlockOthers registers two unreachable clusters (which hold an
// engagement slot until the engage timeout) and a missing kubeconfig next to good clusters: the
// good ones are engaged long before the broken ones time out, and the broken ones keep being
// retried with their error recorded.
func TestFleetBrokenClusterDoesNotBlockOthers(t *testing.T) {
	const engageTimeout = 90 * time.Second
	h := startHub(t, fleet.Options{EngageTimeout: engageTimeout}, nil)
	unreachable := writeKubeconfig(t, env.Spokes["us-east-1"].Kubeconfig, "https://127.0.0.1:1")
	ensureNamespace(t, env.Hub.Client, mirror.Namespace("t3-agent"))
	start := time.Now()
	h.fleet.Set([]fleet.Spec{
		direct("t3-down-1", unreachable),
		direct("t3-down-2", unreachable),
		direct("t3-missing", filepath.Join(t.TempDir(), "nope")),
		direct("t3-eu", env.Spokes["eu-west-1"].Kubeconfig),
		agent("t3-agent"),
	})
	testenv.Eventually(t, engageTimeout/2, func() error {
		for _, n := range []string{"t3-eu", "t3-agent"} {
			if _, err := getCluster(h, n); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("good clusters engaged after %s while the unreachable ones wait out %s", time.Since(start).Round(time.Millisecond), engageTimeout)
	testenv.Eventually(t, 30*time.Second, func() error {
		info, _ := h.fleet.Info("t3-missing")
		if info.Attempts < 2 || !strings.Contains(info.LastError, "reading kubeconfig file") {
			return fmt.Errorf("t3-missing: %d attempts, last error %q: want retries with the file error", info.Attempts, info.LastError)
		}
		return nil
	})
	for _, n := range []string{"t3-down-1", "t3-down-2", "t3-missing"} {
		if err := notFound(func() error { _, err := getCluster(h, n); return err }()); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if info, _ := h.fleet.Info(n); info.Engaged {
			t.Errorf("%s reported engaged", n)
		}
	}
}

// TestFleetReplaceKeepsTheNewCluster rotates a direct cluster's kubeconfig: the fleet engages a
// new connection, then stops the old one, and the name keeps resolving to the new cluster after
// the old one has stopped (multicluster-runtime's clusters.Clusters would drop it here).
func TestFleetReplaceKeepsTheNewCluster(t *testing.T) {
	ctx := context.Background()
	path := writeKubeconfig(t, env.Spokes["us-east-1"].Kubeconfig, "")
	h := startHub(t, fleet.Options{}, nil)
	h.fleet.Set([]fleet.Spec{direct("t4", path)})
	var old cluster.Cluster
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		old, err = getCluster(h, "t4")
		return err
	})
	oldInformer, err := old.GetCache().GetInformer(ctx, &magosv1.Workspace{})
	if err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(raw, []byte("\n# rotated credentials\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	h.fleet.Refresh()

	var replacement cluster.Cluster
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		replacement, err = getCluster(h, "t4")
		if err == nil && replacement == old {
			return errors.New("still the old cluster")
		}
		return err
	})
	all := h.rec.of("t4")
	if len(all) != 2 || all[1].cl != replacement {
		t.Fatalf("%d engagements, want 2 with the second being the replacement", len(all))
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if !done(all[0].ctx) {
			return errors.New("the old engagement is still live")
		}
		if !oldInformer.IsStopped() {
			return errors.New("the old cluster has not stopped")
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, func() error {
		cl, err := getCluster(h, "t4")
		if err != nil {
			return fmt.Errorf("after the old cluster stopped: %w", err)
		}
		if cl != replacement {
			return errors.New("Get returns another cluster than the replacement")
		}
		if done(all[1].ctx) {
			return errors.New("the replacement's engagement was cancelled")
		}
		return nil
	})
}

// TestAgentViewIsConfinedToItsNamespace checks an agent cluster's view against the real hub:
// it reads only its namespace's mirrors (client, cache, API reader, informer events), writes go
// through to the hub, and writes anywhere else are refused.
func TestAgentViewIsConfinedToItsNamespace(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, fleet.Options{}, nil)
	nsA, nsB := mirror.Namespace("t5-a"), mirror.Namespace("t5-b")
	ensureNamespace(t, env.Hub.Client, nsA)
	ensureNamespace(t, env.Hub.Client, nsB)
	a1, b1 := newMirror("t5-a", "team", "one"), newMirror("t5-b", "team", "one")
	create(t, env.Hub.Client, a1, b1, newWorkspace(nsA, "not-a-mirror", nil))
	h.fleet.Set([]fleet.Spec{agent("t5-a"), agent("t5-b")})

	var a cluster.Cluster
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		a, err = getCluster(h, "t5-a")
		return err
	})
	c := a.GetClient()
	names := func(r client.Reader, opts ...client.ListOption) ([]string, error) {
		list := &magosv1.WorkspaceList{}
		if err := r.List(ctx, list, opts...); err != nil {
			return nil, err
		}
		var out []string
		for _, w := range list.Items {
			out = append(out, w.Namespace+"/"+w.Name)
		}
		sort.Strings(out)
		return out, nil
	}
	own := []string{nsA + "/" + a1.Name}
	testenv.Eventually(t, 30*time.Second, func() error {
		got, err := names(c)
		if err != nil || !slices.Equal(got, own) {
			return fmt.Errorf("view lists %v (err %v), want %v", got, err, own)
		}
		return nil
	})
	if got, err := names(a.GetCache()); err != nil || !slices.Equal(got, own) {
		t.Errorf("the view's cache lists %v (err %v), want %v", got, err, own)
	}
	// The API reader is not label-filtered (it reads the API server), but stays in the namespace.
	if got, err := names(a.GetAPIReader()); err != nil || !slices.Equal(got, []string{nsA + "/not-a-mirror", nsA + "/" + a1.Name}) {
		t.Errorf("the view's API reader lists %v (err %v), want the namespace's Workspaces", got, err)
	}
	if got, err := names(c, client.InNamespace(nsB)); err != nil || len(got) != 0 {
		t.Errorf("listing namespace %s through the view: %v (err %v), want nothing", nsB, got, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(b1), &magosv1.Workspace{}); !apierrors.IsNotFound(err) {
		t.Errorf("getting another cluster's mirror: %v, want NotFound", err)
	}

	// Writes outside the namespace are refused before reaching the hub.
	other := newMirror("t5-b", "team", "two")
	forbidden := map[string]error{
		"create":                c.Create(ctx, other),
		"patch":                 c.Patch(ctx, b1.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`))),
		"update":                c.Update(ctx, b1.DeepCopy()),
		"delete":                c.Delete(ctx, b1.DeepCopy()),
		"status patch":          c.Status().Patch(ctx, b1.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Applied"}}`))),
		"delete all":            c.DeleteAllOf(ctx, &magosv1.Workspace{}, client.InNamespace(nsB)),
		"cluster-scoped get":    c.Get(ctx, client.ObjectKey{Name: "t5-a"}, &magosv1.Cluster{}),
		"cluster-scoped create": c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t5-evil"}}),
	}
	for op, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s outside the view: %v, want Forbidden", op, err)
		}
	}
	if err := env.Hub.Client.Get(ctx, client.ObjectKeyFromObject(b1), b1); err != nil || b1.Annotations["x"] != "" {
		t.Fatalf("the other cluster's mirror was touched: %v %v", err, b1.Annotations)
	}

	// Writes inside go through to the hub's API server.
	patch := []byte(`{"metadata":{"annotations":{"` + keys.ExecutionAllowed + `":"true"}}}`)
	if err := c.Patch(ctx, a1.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("patching an own mirror: %v", err)
	}
	if err := env.Hub.Client.Get(ctx, client.ObjectKeyFromObject(a1), a1); err != nil || a1.Annotations[keys.ExecutionAllowed] != "true" {
		t.Fatalf("the patch did not reach the hub: %v %v", err, a1.Annotations)
	}

	// The informer passes on only the namespace's events.
	inf, err := a.GetCache().GetInformer(ctx, &magosv1.Workspace{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var added []string
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		mu.Lock()
		defer mu.Unlock()
		w := o.(*magosv1.Workspace)
		added = append(added, w.Namespace+"/"+w.Name)
	}}); err != nil {
		t.Fatal(err)
	}
	a2, b2 := newMirror("t5-a", "team", "two"), newMirror("t5-b", "team", "three")
	create(t, env.Hub.Client, b2, a2)
	testenv.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(added, nsA+"/"+a2.Name) {
			return fmt.Errorf("events seen: %v, want %s", added, a2.Name)
		}
		return nil
	})
	mu.Lock()
	for _, k := range added {
		if !strings.HasPrefix(k, nsA+"/") {
			t.Errorf("the view's informer passed on %s, outside its namespace", k)
		}
	}
	if !slices.Contains(added, nsA+"/"+a1.Name) {
		t.Errorf("a handler added late was not sent the mirror %s already there: saw %v", a1.Name, added)
	}
	mu.Unlock()

	// A removed handler is sent nothing more.
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		mu.Lock()
		defer mu.Unlock()
		added = append(added, "removed:"+o.(*magosv1.Workspace).Name)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
	a3 := newMirror("t5-a", "team", "three")
	create(t, env.Hub.Client, a3)
	testenv.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(added, nsA+"/"+a3.Name) {
			return fmt.Errorf("events seen: %v, want %s", added, a3.Name)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(added, "removed:"+a3.Name) {
		t.Errorf("a removed handler was sent %s", a3.Name)
	}
}

// informerListeners counts the goroutines client-go runs for the listeners of shared informers
// (two per handler added to an informer), read from the goroutine profile: an observer that
// does not depend on the fleet's code.
func informerListeners(t testing.TB) int {
	t.Helper()
	var buf strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for g := range strings.SplitSeq(buf.String(), "\n\n") {
		if strings.Contains(g, "cache.(*processorListener).run") {
			n++
		}
	}
	return n
}

// TestAgentViewsShareOneInformerHandler engages 60 agent clusters under two multi-cluster
// controllers watching Workspaces and checks that the hub's informers gain no listener per
// cluster: the views share one handler per informer, which passes each event to the views of
// its namespace (fails with a handler per view: 120 listeners).
func TestAgentViewsShareOneInformerHandler(t *testing.T) {
	ctx := context.Background()
	const clusters = 60
	var mu sync.Mutex
	seen := map[string]bool{}
	h := startHub(t, fleet.Options{}, func(mgr mcmanager.Manager) {
		for _, name := range []string{"first", "second"} {
			err := mcbuilder.ControllerManagedBy(mgr).Named("t6-" + name).
				For(&magosv1.Workspace{}).
				WithOptions(controller.TypedOptions[mcreconcile.Request]{SkipNameValidation: ptr(true)}).
				Complete(mcreconcile.Func(func(_ context.Context, req mcreconcile.Request) (ctrl.Result, error) {
					mu.Lock()
					defer mu.Unlock()
					seen[name+" "+req.String()] = true
					return ctrl.Result{}, nil
				}))
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	var specs []fleet.Spec
	for i := range clusters {
		name := fmt.Sprintf("t6-%02d", i)
		specs = append(specs, agent(name))
		ensureNamespace(t, env.Hub.Client, mirror.Namespace(name))
		create(t, env.Hub.Client, newMirror(name, "team", "app"))
	}
	// One cluster first, so that every informer the controllers use is there.
	h.fleet.Set(specs[:1])
	reconciled := func(n int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range specs[:n] {
				for _, c := range []string{"first", "second"} {
					k := c + " cluster://" + s.Name + "/" + mirror.Namespace(s.Name) + "/" + mirror.Name("team", "app")
					if !seen[k] {
						return fmt.Errorf("%s not reconciled", k)
					}
				}
			}
			return nil
		}
	}
	testenv.Eventually(t, 60*time.Second, reconciled(1))
	before := informerListeners(t)
	h.fleet.Set(specs)
	testenv.Eventually(t, 2*time.Minute, reconciled(clusters))
	if grown := informerListeners(t) - before; grown >= clusters/10 {
		t.Errorf("engaging %d more agent clusters added %d informer listeners, want none per cluster", clusters-1, grown)
	}

	// Every cluster's controllers are still told of a change in its namespace.
	last := specs[clusters-1].Name
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"t6":"changed"}}}`))
	mu.Lock()
	clear(seen)
	mu.Unlock()
	if err := env.Hub.Client.Patch(ctx, newMirror(last, "team", "app"), patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range []string{"first", "second"} {
			if k := c + " cluster://" + last + "/" + mirror.Namespace(last) + "/" + mirror.Name("team", "app"); !seen[k] {
				return fmt.Errorf("%s not reconciled after the change (saw %d requests)", k, len(seen))
			}
		}
		return nil
	})

}
