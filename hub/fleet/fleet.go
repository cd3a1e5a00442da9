// Package fleet is the hub's multicluster-runtime provider. It engages every registered cluster
// under its registered name, so that mgr.GetCluster(ctx, name) returns a cluster.Cluster whose
// client and cache read and patch that cluster's Workspaces:
//
//   - an agent cluster is a view of its hub namespace magos-cluster-<name> (the agent's mirrors),
//     served from ONE shared informer of the hub manager's cache, whatever the number of clusters,
//     with one handler on it that passes each event to the views of the object's namespace;
//   - a direct cluster is the spoke's API server, reached with a kubeconfig (a file or a Secret
//     on the hub), with a cache limited to Workspaces.
//
// The provider keeps its own registry: an entry is removed only by the engagement that owns it
// (identity check), a new connection is brought up and engaged before the old one is cancelled,
// and each cluster is engaged on its own goroutine with a timeout and retried with backoff, so one
// slow or broken cluster never blocks the others. It does not build on clusters.Clusters, whose
// by-name removal drops a replaced cluster.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// Spec is one registered cluster, as the registry hands it to the fleet.
type Spec struct {
	// Name is the registered name; the cluster is engaged under it.
	Name string
	// Transport is magosv1.TransportAgent or magosv1.TransportDirect.
	Transport string
	// Labels are the registered labels. Changing them never re-engages the cluster.
	Labels map[string]string
	// Kubeconfig is where a direct cluster's kubeconfig is read.
	Kubeconfig *magosv1.KubeconfigSource
}

// Info is what the fleet knows about a registered cluster.
type Info struct {
	// Spec is the cluster's registration.
	Spec Spec
	// Engaged is true while the cluster is engaged with the manager.
	Engaged bool
	// EngagedSince is when the current engagement began.
	EngagedSince time.Time
	// LastError is the last failure to engage (empty after a success).
	LastError string
	// Attempts counts the failed attempts since the last success.
	Attempts int
}

// Options configures a Fleet.
type Options struct {
	// Hub is the hub's own cluster (the manager's local cluster). Agent clusters are views of
	// its cache; Secrets holding kubeconfigs are read with its API reader.
	Hub cluster.Cluster
	// Scheme is the scheme of direct clusters; defaults to the hub's.
	Scheme *runtime.Scheme
	// EngageTimeout bounds starting, syncing and engaging one cluster. Default 60s.
	EngageTimeout time.Duration
	// Resync is how often each direct cluster's kubeconfig is read again (a changed kubeconfig
	// replaces the connection). Default 1m.
	Resync time.Duration
	// MinBackoff and MaxBackoff bound the retry delay of a cluster that failed. Defaults 1s, 2m.
	MinBackoff, MaxBackoff time.Duration
	// MaxConcurrentEngagements bounds how many clusters are being connected at once. Default 16.
	MaxConcurrentEngagements int
	// QPS and Burst of the client of each direct cluster. Defaults 50 and 100.
	QPS   float32
	Burst int
	// OnChange is called (on a fleet goroutine; it must not block) after a cluster is engaged,
	// disengaged, or fails to engage.
	OnChange func(name string)
	// Logger defaults to the Start context's logger.
	Logger *logr.Logger
}

func (o *Options) defaults() {
	if o.Scheme == nil && o.Hub != nil {
		o.Scheme = o.Hub.GetScheme()
	}
	if o.EngageTimeout <= 0 {
		o.EngageTimeout = 60 * time.Second
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 2 * time.Minute
	}
	if o.MaxConcurrentEngagements <= 0 {
		o.MaxConcurrentEngagements = 16
	}
	if o.QPS <= 0 {
		o.QPS = 50
	}
	if o.Burst <= 0 {
		o.Burst = 100
	}
}

// Fleet is the provider: a multicluster.Provider and multicluster.ProviderRunnable. Hand it
// the registered clusters with Set (before or after Start).
type Fleet struct {
	opts Options
	sem  chan struct{}

	mu       sync.RWMutex
	started  bool
	ctx      context.Context
	aware    multicluster.Aware
	log      logr.Logger
	members  map[string]*member
	engaged  map[string]*engagement
	infos    map[string]*Info
	indexers []indexer
	hubIndex map[indexKey]bool
	fanouts  *fanouts
}

type indexKey struct {
	gvk   schema.GroupVersionKind
	field string
}

type indexer struct {
	obj   client.Object
	field string
	fn    client.IndexerFunc
}

// engagement is one engaged cluster.Cluster. Only the engagement found in the registry may
// remove itself from it.
type engagement struct {
	name        string
	cl          cluster.Cluster
	fingerprint string
	cancel      context.CancelFunc
	// stopped is closed when the cluster stopped (its Start returned) on its own.
	stopped <-chan struct{}
	since   time.Time
}

var (
	_ multicluster.Provider         = &Fleet{}
	_ multicluster.ProviderRunnable = &Fleet{}
)

// New returns a Fleet. opts.Hub is required.
func New(opts Options) (*Fleet, error) {
	if opts.Hub == nil {
		return nil, errors.New("fleet: Options.Hub (the hub's cluster) is required")
	}
	opts.defaults()
	return &Fleet{
		opts:     opts,
		sem:      make(chan struct{}, opts.MaxConcurrentEngagements),
		members:  map[string]*member{},
		engaged:  map[string]*engagement{},
		infos:    map[string]*Info{},
		hubIndex: map[indexKey]bool{},
		fanouts:  newFanouts(opts.Hub.GetCache(), opts.Hub.GetScheme()),
		log:      logr.Discard(),
	}, nil
}

// Start runs the provider until ctx ends: it engages every registered cluster through aware
// and keeps them engaged. The manager calls it (on the leader); do not call it yourself.
func (f *Fleet) Start(ctx context.Context, aware multicluster.Aware) error {
	log := logr.FromContextOrDiscard(ctx).WithName("fleet")
	if f.opts.Logger != nil {
		log = f.opts.Logger.WithName("fleet")
	}
	f.mu.Lock()
	if f.started {
		f.mu.Unlock()
		return errors.New("fleet: already started")
	}
	f.started, f.ctx, f.aware, f.log = true, ctx, aware, log
	for _, m := range f.members {
		f.launchLocked(m)
	}
	f.mu.Unlock()
	log.Info("fleet provider started")

	<-ctx.Done()

	f.mu.Lock()
	members := slices.Collect(maps.Values(f.members))
	f.mu.Unlock()
	for _, m := range members {
		if m.done != nil {
			<-m.done
		}
	}
	return nil
}

// Set replaces the registered clusters: new names are engaged, removed names disengaged, and a
// changed transport or kubeconfig source re-connects (the new connection is engaged before the
// old one is cancelled). Label changes are recorded without touching the engagement.
func (f *Fleet) Set(specs []Spec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[string]Spec{}
	for _, s := range specs {
		want[s.Name] = s
	}
	for name, m := range f.members {
		if _, ok := want[name]; !ok {
			delete(f.members, name)
			delete(f.infos, name)
			m.stop()
		}
	}
	for name, s := range want {
		info := f.infos[name]
		if info == nil {
			info = &Info{}
			f.infos[name] = info
		}
		info.Spec = s
		if m, ok := f.members[name]; ok {
			m.setSpec(s)
			continue
		}
		m := newMember(s)
		f.members[name] = m
		if f.started {
			f.launchLocked(m)
		}
	}
}

// Refresh asks every registered cluster to re-read its kubeconfig now (for example after a
// kubeconfig file changed), instead of at the next resync.
func (f *Fleet) Refresh() {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, m := range f.members {
		m.poke()
	}
}

// Get returns the engaged cluster of that name, or an error wrapping
// multicluster.ErrClusterNotFound.
func (f *Fleet) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if e, ok := f.engaged[string(name)]; ok {
		return e.cl, nil
	}
	return nil, fmt.Errorf("cluster %q is not engaged: %w", name, multicluster.ErrClusterNotFound)
}

// ClusterNames returns the names of the engaged clusters, sorted.
func (f *Fleet) ClusterNames() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Sorted(maps.Keys(f.engaged))
}

// Registered returns the names of the registered clusters (engaged or not), sorted.
func (f *Fleet) Registered() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Sorted(maps.Keys(f.infos))
}

// Info returns what the fleet knows about a registered cluster.
func (f *Fleet) Info(name string) (Info, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	info, ok := f.infos[name]
	if !ok {
		return Info{}, false
	}
	out := *info
	out.Spec.Labels = maps.Clone(info.Spec.Labels)
	return out, true
}

// Labels returns the registered labels of a cluster (nil if it is not registered).
func (f *Fleet) Labels(name string) map[string]string {
	info, _ := f.Info(name)
	return info.Spec.Labels
}

// Transport returns the transport of a registered cluster ("" if it is not registered).
func (f *Fleet) Transport(name string) string {
	info, _ := f.Info(name)
	return info.Spec.Transport
}

// IndexField indexes a field on every engaged cluster, current and future. Agent clusters share
// the hub's cache, which is indexed once.
func (f *Fleet) IndexField(ctx context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	f.mu.Lock()
	f.indexers = append(f.indexers, indexer{obj: obj, field: field, fn: fn})
	engaged := slices.Collect(maps.Values(f.engaged))
	f.mu.Unlock()
	if err := f.indexHub(ctx, obj, field, fn); err != nil {
		return err
	}
	for _, e := range engaged {
		if _, ok := e.cl.(*AgentCluster); ok {
			continue
		}
		if err := e.cl.GetFieldIndexer().IndexField(ctx, obj, field, fn); err != nil {
			return fmt.Errorf("indexing %s on cluster %s: %w", field, e.name, err)
		}
	}
	return nil
}

// indexHub indexes the hub's cache once per kind and field.
func (f *Fleet) indexHub(ctx context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	gvk, err := f.opts.Hub.GetClient().GroupVersionKindFor(obj)
	if err != nil {
		return fmt.Errorf("indexing %s: %w", field, err)
	}
	f.mu.Lock()
	k := indexKey{gvk: gvk, field: field}
	done := f.hubIndex[k]
	f.hubIndex[k] = true
	f.mu.Unlock()
	if done {
		return nil
	}
	if err := f.opts.Hub.GetCache().IndexField(ctx, obj, field, fn); err != nil {
		return fmt.Errorf("indexing %s on the hub cache: %w", field, err)
	}
	return nil
}

func (f *Fleet) launchLocked(m *member) {
	ctx, cancel := context.WithCancel(f.ctx)
	m.cancel = cancel
	m.done = make(chan struct{})
	go f.run(ctx, m)
}

// swap makes next the engaged cluster of its name, then cancels prev (the order the
// multicluster-runtime replace bug needs: the new one is in place before the old one stops).
func (f *Fleet) swap(prev, next *engagement) {
	f.mu.Lock()
	f.engaged[next.name] = next
	if info := f.infos[next.name]; info != nil {
		info.Engaged, info.EngagedSince, info.LastError, info.Attempts = true, next.since, "", 0
	}
	f.mu.Unlock()
	if prev != nil {
		prev.cancel()
	}
	engagedClusters.Set(float64(f.countEngaged()))
	f.changed(next.name)
}

// drop removes e from the registry if, and only if, it is still the engaged cluster of its name,
// and cancels it.
func (f *Fleet) drop(e *engagement) {
	f.mu.Lock()
	if cur, ok := f.engaged[e.name]; ok && cur == e {
		delete(f.engaged, e.name)
		if info := f.infos[e.name]; info != nil {
			info.Engaged = false
		}
	}
	f.mu.Unlock()
	e.cancel()
	engagedClusters.Set(float64(f.countEngaged()))
	f.changed(e.name)
}

func (f *Fleet) failed(name string, err error) {
	f.mu.Lock()
	if info := f.infos[name]; info != nil {
		info.LastError = err.Error()
		info.Attempts++
	}
	f.mu.Unlock()
	f.changed(name)
}

func (f *Fleet) countEngaged() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.engaged)
}

func (f *Fleet) changed(name string) {
	if f.opts.OnChange != nil {
		f.opts.OnChange(name)
	}
}

// backoff is the retry delay of a cluster that keeps failing: MinBackoff, doubling on every
// consecutive failure up to MaxBackoff.
func (f *Fleet) backoff() wait.Backoff {
	return wait.Backoff{Duration: f.opts.MinBackoff, Factor: 2, Cap: f.opts.MaxBackoff, Steps: math.MaxInt32}
}

// run keeps one registered cluster engaged until ctx ends (the cluster was removed or the
// fleet stops).
func (f *Fleet) run(ctx context.Context, m *member) {
	defer close(m.done)
	log := f.log.WithValues("cluster", m.name)
	var cur *engagement
	defer func() {
		if cur != nil {
			f.drop(cur)
			log.Info("cluster disengaged")
		}
	}()
	failures, retry := 0, f.backoff()
	for {
		spec := m.getSpec()
		next, err := f.connect(ctx, log, spec, cur)
		delay := f.opts.Resync
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			delay = retry.Step()
			f.failed(spec.Name, err)
			log.Error(err, "engaging cluster failed; retrying", "attempt", failures, "retryIn", delay.String())
		case next != cur:
			f.swap(cur, next)
			if cur != nil {
				log.Info("cluster re-connected", "transport", spec.Transport)
			} else {
				log.Info("cluster engaged", "transport", spec.Transport)
			}
			cur, failures, retry = next, 0, f.backoff()
		}
		var stopped <-chan struct{}
		if cur != nil {
			stopped = cur.stopped
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-m.wake:
		case <-timer.C:
		case <-stopped:
			log.Info("cluster stopped on its own; re-engaging")
			f.drop(cur)
			cur = nil
		}
		timer.Stop()
	}
}

// connect returns cur when it still matches spec, or a newly started and engaged cluster.
func (f *Fleet) connect(ctx context.Context, log logr.Logger, spec Spec, cur *engagement) (*engagement, error) {
	switch spec.Transport {
	case magosv1.TransportAgent:
		fp := "agent:" + spec.Name
		if cur != nil && cur.fingerprint == fp {
			return cur, nil
		}
		return f.engage(ctx, spec.Name, fp, func(cctx context.Context) (cluster.Cluster, <-chan struct{}, error) {
			return f.newView(cctx, spec.Name)
		})
	case magosv1.TransportDirect:
		cfg, fp, err := f.restConfig(ctx, spec.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if cur != nil && cur.fingerprint == fp {
			return cur, nil
		}
		if cur != nil {
			log.Info("kubeconfig changed; connecting again")
		}
		return f.engage(ctx, spec.Name, fp, func(cctx context.Context) (cluster.Cluster, <-chan struct{}, error) {
			return f.newDirect(cctx, spec.Name, cfg)
		})
	default:
		return nil, fmt.Errorf("cluster %s: unknown transport %q: want agent or direct", spec.Name, spec.Transport)
	}
}

// engage builds a cluster with build (which starts it under cctx and waits for its cache), and
// engages it, all within EngageTimeout. On failure, the cluster is stopped.
func (f *Fleet) engage(ctx context.Context, name, fp string,
	build func(cctx context.Context) (cluster.Cluster, <-chan struct{}, error)) (*engagement, error) {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-f.sem }()

	cctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(f.opts.EngageTimeout, cancel)
	fail := func(err error) (*engagement, error) {
		timer.Stop()
		cancel()
		return nil, f.timeoutErr(cctx, ctx, err)
	}
	cl, stopped, err := build(cctx)
	if err != nil {
		return fail(fmt.Errorf("starting cluster %s: %w", name, err))
	}
	f.mu.RLock()
	idx := slices.Clone(f.indexers)
	aware := f.aware
	f.mu.RUnlock()
	if _, view := cl.(*AgentCluster); !view {
		for _, ix := range idx {
			if err := cl.GetFieldIndexer().IndexField(cctx, ix.obj, ix.field, ix.fn); err != nil {
				return fail(fmt.Errorf("indexing %s on cluster %s: %w", ix.field, name, err))
			}
		}
	}
	if err := aware.Engage(cctx, multicluster.ClusterName(name), cl); err != nil {
		return fail(fmt.Errorf("engaging cluster %s: %w", name, err))
	}
	if !timer.Stop() {
		// The timeout fired as Engage returned: cctx is cancelled, so the engagement is void.
		cancel()
		return nil, fmt.Errorf("engaging cluster %s: timed out after %s", name, f.opts.EngageTimeout)
	}
	return &engagement{name: name, cl: cl, fingerprint: fp, cancel: cancel, stopped: stopped, since: time.Now()}, nil
}

func (f *Fleet) timeoutErr(cctx, parent context.Context, err error) error {
	if cctx.Err() != nil && parent.Err() == nil {
		return fmt.Errorf("%w (timed out after %s)", err, f.opts.EngageTimeout)
	}
	return err
}

// member is one registered cluster and the goroutine that keeps it engaged.
type member struct {
	name   string
	mu     sync.Mutex
	spec   Spec
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func newMember(s Spec) *member {
	return &member{name: s.Name, spec: s, wake: make(chan struct{}, 1)}
}

func (m *member) getSpec() Spec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.spec
}

func (m *member) setSpec(s Spec) {
	m.mu.Lock()
	m.spec = s
	m.mu.Unlock()
	m.poke()
}

func (m *member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *member) stop() {
	if m.cancel != nil {
		m.cancel()
	}
}
