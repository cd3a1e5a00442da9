package scalebench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/magosfleet/magos/agent/hubsync"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// ClusterLabel is the label of a spoke Workspace that names the emulated cluster it belongs to.
// All emulated clusters share one spoke API server and one spoke namespace; each emulated
// agent's cache sees only the Workspaces with its own value, as a real agent sees only its
// cluster's.
const ClusterLabel = "magos-bench/cluster"

// agentOptions configures one emulated agent.
type agentOptions struct {
	// Cluster is the cluster's registered name on the hub.
	Cluster string
	// Spoke reaches the shared spoke API server; Namespace is the spoke namespace the
	// Workspaces live in.
	Spoke     *rest.Config
	Namespace string
	// Hub reaches the hub with the cluster's bootstrap credentials (registry.AgentKubeconfig).
	Hub *rest.Config
	// RunDelay is how long a granted run takes, from the grant to Applied.
	RunDelay time.Duration
	// Ledger records the runs.
	Ledger *Ledger
	// Heartbeat and LeaseDuration are the agent's (hubsync's defaults when zero).
	Heartbeat, LeaseDuration time.Duration
	Logger                   logr.Logger
	// Version is the agent version reported to the hub.
	Version string
}

// agent is one emulated magos-agent: a controller-runtime manager on the spoke running the real
// agent/hubsync (mirrors, decisions carried down, heartbeats, all with the cluster's own hub
// credentials) and the emulated runner in place of the Workspace controller.
type agent struct {
	mgr ctrl.Manager
	// halt stops the manager and returns its error (testenv.Go).
	halt func() error
}

// startAgent builds and starts an emulated agent; stop it with stop.
func startAgent(ctx context.Context, o agentOptions) (*agent, error) {
	sel := labels.SelectorFromSet(labels.Set{ClusterLabel: o.Cluster})
	spoke := rest.CopyConfig(o.Spoke)
	spoke.QPS, spoke.Burst = 50, 100
	mgr, err := ctrl.NewManager(spoke, ctrl.Options{
		Scheme: scheme.New(),
		Logger: o.Logger.WithValues("cluster", o.Cluster),
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{o.Namespace: {}},
			ByObject:          map[client.Object]cache.ByObject{&magosv1.Workspace{}: {Label: sel}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every emulated agent names its controllers after its cluster; the metrics of a
		// thousand controllers in one process are the emulation's cost, not the hub's.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("agent of %s: %w", o.Cluster, err)
	}
	if err := hubsync.SetupWithManager(mgr, hubsync.Options{
		ClusterName: o.Cluster, HubConfig: o.Hub, Identity: "emulated", AgentVersion: o.Version,
		HeartbeatInterval: o.Heartbeat, LeaseDuration: o.LeaseDuration,
		ControllerName: "hubsync-" + o.Cluster,
	}); err != nil {
		return nil, fmt.Errorf("agent of %s: %w", o.Cluster, err)
	}
	r := &emulatedRunner{cluster: o.Cluster, client: mgr.GetClient(), delay: o.RunDelay, ledger: o.Ledger, now: time.Now}
	if err := ctrl.NewControllerManagedBy(mgr).Named("runner-" + o.Cluster).For(&magosv1.Workspace{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).Complete(r); err != nil {
		return nil, fmt.Errorf("agent of %s: %w", o.Cluster, err)
	}
	return &agent{mgr: mgr, halt: testenv.Go(ctx, mgr.Start)}, nil
}

// stop stops the agent and waits for it.
func (a *agent) stop() error {
	return a.halt()
}

// Ledger is what the emulated runners did: for every run that reached Applied, its Workspace,
// the commit, and when its grant was seen and the apply ended. It is the benchmark's own
// record, kept apart from the hub: the order checks read it, never the hub's objects.
type Ledger struct {
	mu   sync.Mutex
	runs []Record
}

// Record is one run in the Ledger.
type Record struct {
	Cluster, Workspace, Commit string
	// Granted is when the runner saw the grant; Applied when it wrote Applied.
	Granted, Applied time.Time
}

func (l *Ledger) add(r Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, r)
}

// Runs returns the runs of commit, in no particular order.
func (l *Ledger) Runs(commit string) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for _, r := range l.runs {
		if r.Commit == commit {
			out = append(out, r)
		}
	}
	return out
}

// Len returns the number of runs recorded.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}
