package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
)

// Reasons of the ConfigLoaded condition and of config Events.
const (
	// ConditionConfigLoaded, on every Cluster, is False while the hub's config file fails to
	// load or validate (the last good configuration stays in force).
	ConditionConfigLoaded = "ConfigLoaded"
	ReasonConfigLoaded    = "Loaded"
	ReasonConfigInvalid   = "ConfigInvalid"
)

// Options configures a Registry.
type Options struct {
	// ConfigFile is the hub's configuration file, watched for changes. Empty: no reload.
	ConfigFile string
	// Flags are the command-line flags (they keep overriding the file on every reload).
	Flags *pflag.FlagSet
	// Initial is the configuration loaded at start-up (already validated).
	Initial Config
	// Fleet is the provider the registered clusters are handed to.
	Fleet *fleet.Fleet
	// Debounce coalesces bursts of file events. Default 500ms.
	Debounce time.Duration
	// Resync re-applies the configuration (repairs deleted namespaces, Roles, Clusters).
	// Default 10m.
	Resync time.Duration
	// ResyncQPS bounds the requests per second of a periodic resync, so that it leaves the rest
	// of the hub's request budget to decisions. Default a tenth of Initial.KubeAPIQPS, at
	// least 1.
	ResyncQPS float64
	// HealthInterval is how often a Cluster's status is re-evaluated without any event: direct
	// clusters are probed that often. An agent cluster whose Lease is live is re-evaluated
	// when the Lease would expire instead. Default 15s.
	HealthInterval time.Duration
	// MaxConcurrentReconciles of the Cluster status controller. Default 4.
	MaxConcurrentReconciles int
	// SkipNameValidation lets several hubs run in one process (tests).
	SkipNameValidation bool
	// BeforeRemoval, when set, is called before each removal of the clusters the configuration
	// no longer registers and blocks until they may be removed; an error skips the removal (the
	// next apply tries again). The hub passes its hubclaim.Claim's Wait: nothing is removed
	// before the leading hub knows that no other hub, whose clusters they could be, runs on its
	// API server.
	BeforeRemoval func(ctx context.Context) error
}

// Registry reflects the configuration's clusters on the hub and into the fleet.
type Registry struct {
	opts     Options
	client   client.Client // uncached: the registry's writes and the reads it must not cache
	cache    client.Reader // the manager's cache: Clusters, Leases, mirrors
	recorder events.EventRecorder
	changes  chan event.GenericEvent

	// applyMu serialises writing registrations (apply, and the status controller putting back a
	// deleted Cluster) so that a removed cluster is never registered again by a late writer.
	applyMu sync.Mutex

	// leases is when the hub saw each agent's Lease renewed, on its own clock.
	leases *leaseClock

	mu        sync.RWMutex
	current   Config
	byName    map[string]ClusterConfig
	configErr error
}

// New returns a Registry for mgr (the hub's local manager). Call SetupWithManager to run it.
func New(mgr ctrl.Manager, opts Options) (*Registry, error) {
	if opts.Fleet == nil {
		return nil, errors.New("registry: Options.Fleet is required")
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 500 * time.Millisecond
	}
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.ResyncQPS <= 0 {
		opts.ResyncQPS = max(float64(opts.Initial.KubeAPIQPS)/10, 1)
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = 15 * time.Second
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 4
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("registry: hub client: %w", err)
	}
	r := &Registry{
		opts:     opts,
		client:   c,
		cache:    mgr.GetClient(),
		recorder: mgr.GetEventRecorder("magos-hub"),
		changes:  make(chan event.GenericEvent, 1024),
		leases:   newLeaseClock(),
	}
	r.setConfig(opts.Initial)
	opts.Fleet.Set(opts.Initial.FleetSpecs())
	return r, nil
}

// SetupWithManager adds the registry (config watcher, leader only) and the Cluster status
// controller to mgr.
func (r *Registry) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(r); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return r.setupStatus(mgr)
}

// Config returns the configuration in force (the last good one).
func (r *Registry) Config() Config {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.current
}

// ConfigError returns why the config file last failed to load, or nil when the last load
// succeeded.
func (r *Registry) ConfigError() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.configErr
}

func (r *Registry) entry(name string) (ClusterConfig, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.byName[name]
	return c, ok
}

func (r *Registry) setConfig(c Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current = c
	r.byName = map[string]ClusterConfig{}
	for _, cl := range c.Clusters {
		r.byName[cl.Name] = cl
	}
}

// NeedLeaderElection: only the active hub writes.
func (r *Registry) NeedLeaderElection() bool { return true }

// Start applies the configuration, then watches the config file's directory (ConfigMap mounts
// swap a ..data symlink) and the directories of kubeconfig files, reloading after a quiet
// period when one of those files changes (concerns); a configuration that fails to load or
// validate is reported and the last good one stays in force.
func (r *Registry) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("registry")
	ctx = ctrl.LoggerInto(ctx, log)

	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("registry: watching files: %w", err)
	}
	defer func() { _ = watcher.Close() }()
	watched := map[string]bool{}
	r.watchDirs(log, watcher, watched)

	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	// The periodic resync runs beside the loop below, paced (resync), so that reloads do not
	// wait for it; a tick that comes during a pass is dropped.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		resync := time.NewTicker(r.opts.Resync)
		defer resync.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-resync.C:
				r.resync(ctx)
				select {
				case <-resync.C:
				default:
				}
			}
		}
	}()
	failures := 0
	// applyNow applies the configuration in force: the clusters of only, when it is not nil,
	// else all of them; and the removal of deregistered ones in both cases.
	applyNow := func(only map[string]bool) {
		if err := r.apply(ctx, r.Config(), only); err != nil {
			failures++
			wait := min(time.Duration(1<<min(failures-1, 7))*time.Second, r.opts.Resync)
			log.Error(err, "applying the cluster registry failed; retrying", "retryIn", wait.String())
			retry.Reset(wait)
			return
		}
		failures = 0
	}
	// The configuration in force was read when the hub started, which for a standby replica
	// can be long before it leads: read the file again now that its directory is watched, so
	// that an edit made in between is not lost until the next one.
	r.reload(ctx)
	applyNow(nil)
	// A file event can still be missed (a network file system, a watch that failed above): the
	// file is read again every Resync too, which costs one read when nothing changed.
	recheck := time.NewTicker(r.opts.Resync)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			if !r.concerns(ev.Name) {
				continue
			}
			log.V(1).Info("file event", "name", ev.Name, "op", ev.Op.String())
			debounce.Reset(r.opts.Debounce)
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			log.Error(err, "watching the config file")
		case <-recheck.C:
			debounce.Reset(0)
		case <-debounce.C:
			if changed, ok := r.reload(ctx); ok {
				applyNow(changed)
			}
			r.opts.Fleet.Refresh()
			r.watchDirs(log, watcher, watched)
		case <-retry.C:
			applyNow(nil)
		}
	}
}

// concerns reports whether an event on the file name, in a watched directory, can change the
// configuration: the config file, a kubeconfig file it names, or the ..data symlink through
// which the kubelet swaps the files of a mounted ConfigMap or Secret. Other files there, a log
// beside the config file for one, are none of the hub's business: each of their writes made
// the hub load its configuration again.
func (r *Registry) concerns(name string) bool {
	if filepath.Base(name) == "..data" {
		return true
	}
	name = filepath.Clean(name)
	for _, path := range r.files() {
		if name == filepath.Clean(path) {
			return true
		}
		// Or the file its symlink points to.
		if target, err := filepath.EvalSymlinks(path); err == nil && name == target {
			return true
		}
	}
	return false
}

// files are the files the hub's configuration is read from: the config file and the
// kubeconfig files it names.
func (r *Registry) files() []string {
	var out []string
	if r.opts.ConfigFile != "" {
		out = append(out, r.opts.ConfigFile)
	}
	for _, c := range r.Config().Clusters {
		if c.Kubeconfig != nil && c.Kubeconfig.Path != "" {
			out = append(out, c.Kubeconfig.Path)
		}
	}
	return out
}

// watchDirs watches the directories of the files the configuration is read from.
func (r *Registry) watchDirs(log logr.Logger, w *fsnotify.Watcher, watched map[string]bool) {
	for _, f := range r.files() {
		d := filepath.Dir(f)
		if watched[d] {
			continue
		}
		if err := w.Add(d); err != nil {
			log.Error(err, "cannot watch directory; changes there are picked up at the next resync", "dir", d)
			continue
		}
		watched[d] = true
	}
}

// reload reads the config file again. It reports whether a new, valid configuration took
// effect and, if so, the clusters it adds or changes: only those need applying (with the removal
// of the deregistered ones), so a reload costs what it changed, not what the fleet holds.
func (r *Registry) reload(ctx context.Context) (map[string]bool, bool) {
	log := ctrl.LoggerFrom(ctx)
	if r.opts.ConfigFile == "" {
		return nil, false
	}
	cfg, err := LoadConfig(r.opts.ConfigFile, r.opts.Flags)
	if err != nil {
		configReloads.WithLabelValues("failed").Inc()
		log.Error(err, "the hub's config file is invalid; keeping the last good configuration")
		r.mu.Lock()
		r.configErr = err
		r.mu.Unlock()
		r.reportConfigError(ctx, err)
		return nil, false
	}
	r.mu.Lock()
	hadErr := r.configErr != nil
	r.configErr = nil
	unchanged := reflect.DeepEqual(r.current.Clusters, cfg.Clusters)
	changed := map[string]bool{}
	for _, c := range cfg.Clusters {
		if old, ok := r.byName[c.Name]; !ok || !reflect.DeepEqual(old, c) {
			changed[c.Name] = true
		}
	}
	r.mu.Unlock()
	if hadErr {
		r.touchAll()
	}
	if unchanged {
		configReloads.WithLabelValues("unchanged").Inc()
		return nil, false
	}
	configReloads.WithLabelValues("applied").Inc()
	r.setConfig(cfg)
	r.opts.Fleet.Set(cfg.FleetSpecs())
	log.Info("cluster registry reloaded", "clusters", len(cfg.Clusters), "addedOrChanged", len(changed))
	return changed, true
}

// reportConfigError records a Warning Event on every Cluster and lets their status show it.
func (r *Registry) reportConfigError(ctx context.Context, err error) {
	list := &magosv1.ClusterList{}
	if lerr := r.cache.List(ctx, list); lerr != nil {
		ctrl.LoggerFrom(ctx).Error(lerr, "listing Clusters to report the config error")
		return
	}
	for i := range list.Items {
		r.recorder.Eventf(&list.Items[i], nil, corev1.EventTypeWarning, ReasonConfigInvalid, "LoadConfig",
			"the hub's config file is invalid; the last good configuration stays in force: %s", message.Truncate(err.Error(), 800))
	}
	r.touchAll()
}

// touchAll asks the status controller to re-evaluate every Cluster.
func (r *Registry) touchAll() {
	for _, c := range r.Config().Clusters {
		r.Touch(c.Name)
	}
}

// Touch asks the status controller to re-evaluate a Cluster now (the fleet calls it when the
// cluster is engaged or disengaged). It never blocks.
func (r *Registry) Touch(name string) {
	ev := event.GenericEvent{Object: &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	select {
	case r.changes <- ev:
	default: // the queue is full: the periodic re-evaluation catches up
	}
}

// apply makes the hub match cfg: a Cluster object per entry (of only, when it is not nil), the
// namespace and credentials of every such agent cluster, and nothing for removed entries (their
// Cluster and namespace are deleted; the fleet has already disengaged them).
func (r *Registry) apply(ctx context.Context, cfg Config, only map[string]bool) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 8)
	)
	for _, c := range cfg.Clusters {
		if only != nil && !only[c.Name] {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := r.ensure(ctx, c); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
				mu.Unlock()
			}
			r.Touch(c.Name)
		})
	}
	wg.Wait()
	errs = append(errs, r.removeStale(ctx, cfg))
	return errors.Join(errs...)
}

// resyncRequests is what the resync of one agent cluster reads from the API server when all is
// in place: its ServiceAccount, Role and RoleBinding (the Cluster and the namespace are read
// from the cache).
const resyncRequests = 3

// resync re-applies every registered cluster, one at a time (repair), re-creating what was
// deleted by hand, within ResyncQPS, then removes what the configuration no longer registers.
// A pass at the pace of a reload took the hub's whole request budget for about a minute at a
// thousand clusters, every Resync, and the Rollouts' grants queued behind it. Reloads go on
// meanwhile: repair holds applyMu for one cluster at a time and skips one no longer registered.
func (r *Registry) resync(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	limiter := rate.NewLimiter(rate.Limit(r.opts.ResyncQPS), resyncRequests)
	var errs []error
	for _, c := range r.Config().Clusters {
		n := 1
		if c.Agent != nil {
			n = resyncRequests
		}
		if err := limiter.WaitN(ctx, n); err != nil {
			return // stopping
		}
		if err := r.repair(ctx, c.Name); err != nil {
			errs = append(errs, err)
		}
	}
	r.applyMu.Lock()
	errs = append(errs, r.removeStale(ctx, r.Config()))
	r.applyMu.Unlock()
	if err := errors.Join(errs...); err != nil && ctx.Err() == nil {
		log.Error(err, "the periodic resync of the cluster registry failed; the next one tries again", "in", r.opts.Resync.String())
	}
}

func (r *Registry) ensure(ctx context.Context, c ClusterConfig) error {
	// A cluster the hub's cache holds no Cluster object of is probably new: its objects are
	// created outright rather than read first (a cold start of N clusters then costs about half
	// the requests).
	fresh := apierrors.IsNotFound(r.cache.Get(ctx, client.ObjectKey{Name: c.Name}, &magosv1.Cluster{}))
	obj := &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}
	if err := cachedCreateOrPatch(ctx, r.client, r.cache, fresh, obj, func() error {
		obj.Labels = copyLabels(c.Labels)
		obj.Spec = c.Spec()
		return nil
	}); err != nil {
		return fmt.Errorf("Cluster object: %w", err)
	}
	if c.Agent != nil {
		return ensureAgentAccess(ctx, r.client, r.cache, c.Name, fresh)
	}
	return nil
}

func copyLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	return maps.Clone(in)
}

// removeStale deletes the Cluster objects and the agent namespaces of clusters cfg no longer
// registers. Deleting a namespace removes its mirrors, its Lease and the agent's ServiceAccount,
// which revokes the agent's credentials. It waits for Options.BeforeRemoval first.
func (r *Registry) removeStale(ctx context.Context, cfg Config) error {
	log := ctrl.LoggerFrom(ctx)
	if r.opts.BeforeRemoval != nil {
		if err := r.opts.BeforeRemoval(ctx); err != nil {
			return fmt.Errorf("not removing deregistered clusters: %w", err)
		}
	}
	want := map[string]ClusterConfig{}
	for _, c := range cfg.Clusters {
		want[c.Name] = c
	}
	var errs []error
	clusters := &magosv1.ClusterList{}
	if err := r.client.List(ctx, clusters); err != nil {
		return fmt.Errorf("listing Clusters: %w", err)
	}
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if _, ok := want[c.Name]; ok || c.DeletionTimestamp != nil {
			continue
		}
		if err := r.client.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting Cluster %s: %w", c.Name, err))
			continue
		}
		clusterAvailable.DeleteLabelValues(c.Name)
		log.Info("cluster deregistered", "cluster", c.Name)
	}
	namespaces := &corev1.NamespaceList{}
	if err := r.client.List(ctx, namespaces, client.MatchingLabels{ManagedByLabel: ManagedByValue}); err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing agent namespaces: %w", err))...)
	}
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		name, ok := ns.Labels[keys.Cluster]
		if !ok || ns.DeletionTimestamp != nil {
			continue
		}
		if c, registered := want[name]; registered && c.Agent != nil {
			continue
		}
		if err := r.client.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", ns.Name, err))
			continue
		}
		log.Info("agent namespace deleted", "cluster", name, "namespace", ns.Name)
	}
	return errors.Join(errs...)
}
