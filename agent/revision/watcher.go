package revision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/magosfleet/magos/agent/credentials"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// Defaults.
const (
	// DefaultPollInterval is how often a ref is polled when no Workspace says otherwise.
	DefaultPollInterval = 30 * time.Second
	// MinPollInterval is the shortest poll interval accepted; shorter values are raised to it.
	MinPollInterval = 5 * time.Second
)

// Options configures the Watcher.
type Options struct {
	// DefaultInterval is the poll interval without a git-poll-interval annotation (30s if 0).
	DefaultInterval time.Duration
	// MinInterval is the shortest interval accepted (5s if 0).
	MinInterval time.Duration
	// Workers is how many polls run at once (4 if 0).
	Workers int
	// Timeout bounds one poll (30s if 0).
	Timeout time.Duration
	// Resolve resolves a ref (gitrepo.Resolve if nil).
	Resolve func(context.Context, gitrepo.ResolveOptions) (string, error)
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

var (
	pollTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_refwatcher_polls_total",
		Help: "Polls of tracked git refs, by result (error, seeded, unchanged, changed).",
	}, []string{"result"})
	registrySize = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_refwatcher_tracked_workspaces",
		Help: "Workspaces whose ref is tracked.",
	})
	targetsSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_refwatcher_targets",
		Help: "Distinct (repository, ref, credentials) polled.",
	})
	pollDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "magos_refwatcher_poll_duration_seconds",
		Help:    "Duration of one ref poll.",
		Buckets: prometheus.DefBuckets,
	})
	registerOnce sync.Once
)

// Watcher keeps the Schedule in step with the Workspaces (a reconciler) and polls due
// Targets (a leader-only Runnable).
type Watcher struct {
	client client.Client
	opts   Options

	mu   sync.Mutex
	reg  *Schedule
	wake chan struct{}
}

// SetupWithManager adds the Watcher to mgr: its reconciler and its poll loop.
func SetupWithManager(mgr ctrl.Manager, opts Options) (*Watcher, error) {
	w := New(mgr.GetClient(), opts)
	registerOnce.Do(func() { metrics.Registry.MustRegister(pollTotal, registrySize, targetsSize, pollDuration) })
	secretToWorkspaces := handler.EnqueueRequestsFromMapFunc(w.workspacesOfSecret)
	err := ctrl.NewControllerManagedBy(mgr).
		Named("revision").
		For(&magosv1.Workspace{}, builder.WithPredicates(
			mirror.NotMirror(),
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
				predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
					return !e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
				}}),
		)).
		Watches(&corev1.Secret{}, secretToWorkspaces, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[credentials.SecretTypeLabel] == credentials.SecretTypeRepository
		}))).
		Complete(w)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	return w, nil
}

// New returns a Watcher reading and patching Workspaces through c.
func New(c client.Client, opts Options) *Watcher {
	if opts.DefaultInterval <= 0 {
		opts.DefaultInterval = DefaultPollInterval
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = MinPollInterval
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Resolve == nil {
		opts.Resolve = gitrepo.Resolve
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Watcher{client: c, opts: opts, reg: NewSchedule(), wake: make(chan struct{}, 1)}
}

// NeedLeaderElection: only the leader polls.
func (w *Watcher) NeedLeaderElection() bool { return true }

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Interval returns the poll interval a git-poll-interval annotation asks for: the default when
// it is unset or not a positive duration, at least MinInterval.
func (w *Watcher) Interval(value string, present bool) time.Duration {
	if !present {
		return w.opts.DefaultInterval
	}
	d, err := time.ParseDuration(value)
	if err != nil || d <= 0 {
		return w.opts.DefaultInterval
	}
	return max(d, w.opts.MinInterval)
}

// Reconcile records what the Workspace tracks (no git I/O here).
func (w *Watcher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ws := &magosv1.Workspace{}
	if err := w.client.Get(ctx, req.NamespacedName, ws); err != nil {
		if apierrors.IsNotFound(err) {
			w.remove(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if mirror.IsMirror(ws) || !ws.DeletionTimestamp.IsZero() || gitrepo.IsSHA(ws.Spec.Source.TargetRevision) {
		w.remove(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	target := Target{RepoURL: ws.Spec.Source.RepoURL, Ref: ws.Spec.Source.TargetRevision}
	creds, err := credentials.Find(ctx, w.client, ws.Namespace, ws.Spec.Source.RepoURL)
	if err != nil {
		return ctrl.Result{}, err
	}
	if creds != nil {
		target.Namespace, target.Secret = ws.Namespace, creds.SecretName
	}
	value, ok := ws.Annotations[keys.GitPollInterval]
	interval := w.Interval(value, ok)
	w.mu.Lock()
	changed := w.reg.Upsert(req.NamespacedName, target, interval, w.opts.Now())
	registrySize.Set(float64(w.reg.Members()))
	targetsSize.Set(float64(w.reg.Len()))
	w.mu.Unlock()
	if changed {
		w.signal()
	}
	return ctrl.Result{}, nil
}

func (w *Watcher) remove(key types.NamespacedName) {
	w.mu.Lock()
	w.reg.Remove(key)
	registrySize.Set(float64(w.reg.Members()))
	targetsSize.Set(float64(w.reg.Len()))
	w.mu.Unlock()
}

func (w *Watcher) workspacesOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	list := &magosv1.WorkspaceList{}
	if err := w.client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, ws := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ws.Namespace, Name: ws.Name}})
	}
	return out
}

// Start runs the poll loop until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	sem := make(chan struct{}, w.opts.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		due := w.reg.Due(w.opts.Now())
		next, ok := w.reg.Next()
		w.mu.Unlock()
		for _, t := range due {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				w.poll(ctx, t)
				w.signal()
			}()
		}
		wait := time.Hour
		if ok {
			wait = max(next.Sub(w.opts.Now()), 0)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// poll resolves the Target and marks every Workspace tracking it that has not run the commit.
func (w *Watcher) poll(ctx context.Context, t Target) {
	logger := log.FromContext(ctx).WithValues("repoURL", t.RepoURL, "ref", t.Ref)
	var auth gitrepo.Auth
	if t.Secret != "" {
		creds, err := w.credentials(ctx, t)
		if err != nil {
			logger.Info("reading git credentials failed", "error", err.Error())
		} else if creds != nil {
			auth = creds.Auth
		}
	}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	sha, err := w.opts.Resolve(pctx, gitrepo.ResolveOptions{URL: t.RepoURL, Ref: t.Ref, Auth: auth})
	cancel()
	pollDuration.Observe(time.Since(start).Seconds())
	w.mu.Lock()
	members, result := w.reg.Done(t, sha, err != nil, w.opts.Now())
	w.mu.Unlock()
	pollTotal.WithLabelValues(result).Inc()
	if err != nil {
		if ctx.Err() == nil {
			logger.Info("polling the ref failed", "error", err.Error())
		}
		return
	}
	var failed bool
	for _, key := range members {
		if err := w.mark(ctx, key, sha); err != nil {
			failed = true
			logger.Info("marking the detected revision failed", "workspace", key.String(), "error", err.Error())
		}
	}
	if failed {
		w.mu.Lock()
		w.reg.Retry(t, w.opts.Now())
		w.mu.Unlock()
	}
}

func (w *Watcher) credentials(ctx context.Context, t Target) (*credentials.Credentials, error) {
	creds, err := credentials.Find(ctx, w.client, t.Namespace, t.RepoURL)
	if err != nil {
		return nil, err
	}
	if creds == nil || creds.SecretName != t.Secret {
		return nil, errors.New("the credentials Secret changed; the next reconcile picks it up")
	}
	return creds, nil
}

// NeedsMark reports whether a Workspace should be told its ref is at sha: not when it already
// knows (detected-revision), ran it (currentRevision) or applied it (observedRevision), nor
// when it never ran at all (its first run resolves the ref itself).
func NeedsMark(ws *magosv1.Workspace, sha string) bool {
	if !ws.DeletionTimestamp.IsZero() {
		return false
	}
	if d := ws.Annotations[keys.DetectedRevision]; d != "" {
		return d != sha
	}
	if ws.Status.ObservedRevision == "" && ws.Status.CurrentRevision == "" {
		return false
	}
	return sha != ws.Status.ObservedRevision && sha != ws.Status.CurrentRevision
}

// DetectedAt formats the time of a detection as the value of magosproject.io/detected-at:
// RFC 3339 with nanoseconds, UTC.
func DetectedAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// mark sets detected-revision to sha, with detected-at, in one merge patch.
func (w *Watcher) mark(ctx context.Context, key types.NamespacedName, sha string) error {
	ws := &magosv1.Workspace{}
	if err := w.client.Get(ctx, key, ws); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !NeedsMark(ws, sha) {
		return nil
	}
	at := DetectedAt(w.opts.Now())
	// Conditional on the version read: a mark decided on a stale copy (the run that consumed or
	// applied this commit has moved the Workspace on since) is refused, and the next poll looks
	// again.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": ws.ResourceVersion,
		"annotations": map[string]string{
			keys.DetectedRevision: sha,
			keys.DetectedAt:       at,
		}}})
	if err != nil {
		return fmt.Errorf("encoding the %s patch: %w", keys.DetectedRevision, err)
	}
	if err := w.client.Patch(ctx, ws, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("patching %s and %s: %w", keys.DetectedRevision, keys.DetectedAt, err)
	}
	log.FromContext(ctx).Info("new revision detected", "workspace", key.String(), "sha", sha, "detectedAt", at)
	return nil
}
