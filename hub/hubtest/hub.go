// Package hubtest is a harness for tests of the hub's own parts on real API servers
// (pkg/localcluster): a hub and spokes, registered Cluster objects, and hub managers that engage
// the spokes as direct clusters through multicluster-runtime's clusters provider. No agent runs
// here: the Rollout benchmark (hub/rollout) writes simulated mirrors, and the grant fence test
// (hub/fleetview) drives one Workspace's status itself. The cross-cluster tests of the Rollout
// and Project controllers run the real hub and agents instead (tools/e2e/hubcontrollers).
package hubtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	clustersprovider "sigs.k8s.io/multicluster-runtime/providers/clusters"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/logging"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// Regions are the spokes every test fleet starts, in promotion order.
var Regions = []string{"us-east-1", "eu-west-1", "ap-south-1"}

var logOnce sync.Once

// setLogger gives controller-runtime a logger once per process: errors only, unless
// MAGOS_TEST_LOG is set (then info and above).
func setLogger() {
	logOnce.Do(func() {
		level := "error"
		if os.Getenv("MAGOS_TEST_LOG") != "" {
			level = "info"
		}
		logger, err := logging.New(logging.Options{Development: true, Level: level})
		if err != nil {
			panic(err)
		}
		ctrllog.SetLogger(logger)
	})
}

// Hub is a test fleet: the hub and the spokes, and the hub's client.
type Hub struct {
	Fleet *localcluster.Fleet
	// Client is a cluster-admin client of the hub.
	Client client.Client
}

// Start starts a hub and the given spokes and registers each spoke on the hub as a direct
// cluster labelled region=<name>, Available.
func Start(t testing.TB, spokes ...string) *Hub {
	t.Helper()
	setLogger()
	f := testenv.Start(t, localcluster.Options{Spokes: spokes})
	h := &Hub{Fleet: f, Client: f.Hub.Client}
	for _, s := range spokes {
		h.Register(t, s, map[string]string{"region": s})
	}
	return h
}

// Register creates the hub Cluster object of a direct cluster with the given labels, bound to
// every hub namespace, and marks it Available.
func (h *Hub) Register(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	kubeconfig := "/dev/null"
	if s := h.Fleet.Spokes[name]; s != nil {
		kubeconfig = s.Kubeconfig
	}
	c := &magosv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: magosv1.ClusterSpec{
			Transport:  magosv1.TransportDirect,
			Kubeconfig: &magosv1.KubeconfigSource{Path: kubeconfig},
			Namespaces: []string{magosv1.AllNamespaces},
		},
	}
	if err := h.Client.Create(ctx, c); err != nil {
		t.Fatalf("registering cluster %s: %v", name, err)
	}
	h.SetAvailable(t, name, true, magosv1.ReasonReachable)
}

// RegisterAgent creates the hub Cluster object of an agent cluster, bound to every hub
// namespace, and marks it Available.
func (h *Hub) RegisterAgent(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	c := &magosv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       magosv1.ClusterSpec{Transport: magosv1.TransportAgent, Namespaces: []string{magosv1.AllNamespaces}},
	}
	if err := h.Client.Create(context.Background(), c); err != nil {
		t.Fatalf("registering agent cluster %s: %v", name, err)
	}
	h.SetAvailable(t, name, true, magosv1.ReasonAgentHeartbeating)
}

// SetAvailable sets the Available condition of a registered cluster.
func (h *Hub) SetAvailable(t testing.TB, name string, available bool, reason string) {
	t.Helper()
	status := metav1.ConditionTrue
	if !available {
		status = metav1.ConditionFalse
	}
	testenv.Eventually(t, 0, func() error {
		c := &magosv1.Cluster{}
		if err := h.Client.Get(context.Background(), client.ObjectKey{Name: name}, c); err != nil {
			return err
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: magosv1.ConditionAvailable, Status: status, Reason: reason,
			Message: "set by the test", ObservedGeneration: c.Generation,
		})
		if available && c.Status.SyncedSince == nil {
			// The agent's sync watermark, as the registry copies it from a synced agent's Lease.
			c.Status.SyncedSince = &metav1.Time{Time: time.Now().Truncate(time.Second)}
		}
		return h.Client.Status().Update(context.Background(), c)
	})
}

// Namespace creates a namespace on the hub and on every spoke.
func (h *Hub) Namespace(t testing.TB, name string) {
	t.Helper()
	all := []*localcluster.Cluster{h.Fleet.Hub}
	for _, s := range h.Fleet.Spokes {
		all = append(all, s)
	}
	for _, c := range all {
		err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s in %s: %v", name, c.Name, err)
		}
	}
}

// ManagerOptions configures StartManager.
type ManagerOptions struct {
	// Setup registers the controllers under test.
	Setup func(mcmanager.Manager) error
	// Clusters are extra clusters to engage besides the spokes, by name.
	Clusters map[string]cluster.Cluster
	// Requests, when set, counts every API request the manager and its clusters make.
	Requests *atomic.Int64
}

// Manager is a running hub manager.
type Manager struct {
	mcmanager.Manager
	stop func()
}

// StartManager starts a hub manager that engages every spoke of h as a direct cluster under
// its name. The manager stops when the test ends (or with Stop).
func (h *Hub) StartManager(t testing.TB, opts ManagerOptions) *Manager {
	t.Helper()
	setLogger()
	cfg := counted(h.Fleet.Hub.Config, opts.Requests)
	provider := clustersprovider.New()
	mopts := mcmanager.Options{
		Scheme:                 magosscheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	mgr, err := mcmanager.New(cfg, provider, mopts)
	if err != nil {
		t.Fatalf("creating hub manager: %v", err)
	}
	// The index magos-hub's Views read Projects through (app.New adds it too).
	if err := fleetview.IndexWorkspaces(context.Background(), mgr); err != nil {
		t.Fatalf("indexing Workspaces: %v", err)
	}
	if err := opts.Setup(mgr); err != nil {
		t.Fatalf("setting up controllers: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	for name, s := range h.Fleet.Spokes {
		cl, err := cluster.New(counted(s.Config, opts.Requests), func(o *cluster.Options) {
			o.Scheme = magosscheme.New()
		})
		if err != nil {
			cancel()
			t.Fatalf("connecting to spoke %s: %v", name, err)
		}
		if err := provider.Add(ctx, multicluster.ClusterName(name), cl); err != nil {
			cancel()
			t.Fatalf("adding spoke %s: %v", name, err)
		}
	}
	for name, cl := range opts.Clusters {
		if err := provider.Add(ctx, multicluster.ClusterName(name), cl); err != nil {
			cancel()
			t.Fatalf("adding cluster %s: %v", name, err)
		}
	}
	stop := testenv.Background(t, ctx, "hub manager", mgr.Start)
	m := &Manager{Manager: mgr, stop: func() { stop(); cancel() }}
	t.Cleanup(m.Stop) // the spokes' clusters too, which run on ctx
	return m
}

// Stop stops the manager (as if its process were killed: a held lease is not released) and
// waits for it to return; a manager that returned an error fails the test. It may be called
// more than once.
func (m *Manager) Stop() {
	m.stop()
}

// NamespacedCluster returns a cluster.Cluster on cfg whose cache sees only namespace: a
// stand-in for an agent cluster's view of its hub namespace.
func NamespacedCluster(t testing.TB, cfg *rest.Config, namespace string, requests *atomic.Int64) cluster.Cluster {
	t.Helper()
	cl, err := cluster.New(counted(cfg, requests), func(o *cluster.Options) {
		o.Scheme = magosscheme.New()
		o.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}}
	})
	if err != nil {
		t.Fatalf("cluster for namespace %s: %v", namespace, err)
	}
	return cl
}

// counted returns a copy of cfg whose requests increment n (cfg itself when n is nil).
func counted(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if n == nil {
		return cfg
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("watch") != "true" {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

// WaitEngaged waits until the manager has engaged every named cluster.
func (m *Manager) WaitEngaged(t testing.TB, names ...string) {
	t.Helper()
	testenv.Eventually(t, 0, func() error {
		var errs []error
		for _, n := range names {
			if _, err := m.GetCluster(context.Background(), multicluster.ClusterName(n)); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: %w", n, err))
			}
		}
		return errors.Join(errs...)
	})
}
