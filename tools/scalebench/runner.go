package scalebench

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runner"
)

// emulatedRunner is the emulated Workspace controller of one emulated cluster: a simulated stand-in for
// agent/workspace and its tofu runs, never proof of them. It keeps the part of the Workspace
// controller's contract that the hub reads (docs/architecture.md, "Decisions and fencing"):
//
//   - it mints a run (status.currentRunID, phase Pending, status.observedGeneration) for a new
//     Workspace, a new spec generation, and a detected-revision other than the one applied;
//   - it starts a run only on a grant naming that run (execution-allowed and granted-run), and
//     runs the commit in granted-revision (else the detected one);
//   - it writes Planning, then Applying after half the run delay, then Applied with
//     status.observedRevision after the whole delay, each as one status update, and records
//     the run in the Ledger.
//
// Left out: git (the benchmark marks detected revisions itself), plans and their digests,
// approvals, policies, failures and retries, Jobs, destroys.
type emulatedRunner struct {
	cluster string
	client  client.Client
	delay   time.Duration
	ledger  *Ledger
	now     func() time.Time

	mu      sync.Mutex
	granted map[string]time.Time // by run ID: when the grant was seen
}

// Reconcile moves the Workspace req one step through the emulated run lifecycle.
func (r *emulatedRunner) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ws := &magosv1.Workspace{}
	if err := r.client.Get(ctx, req.NamespacedName, ws); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	st := ws.Status.DeepCopy()
	ann := ws.Annotations
	detected := ann[keys.DetectedRevision]
	now := r.now()
	var after time.Duration
	var applied *Record
	switch {
	case st.CurrentRunID == "":
		mint(st, ws.Generation, now, magosv1.ReasonConfigurationChanged)
	case st.Phase == magosv1.PhaseApplied && st.ObservedGeneration != ws.Generation:
		mint(st, ws.Generation, now, magosv1.ReasonConfigurationChanged)
	case st.Phase == magosv1.PhaseApplied && detected != "" && detected != st.ObservedRevision:
		mint(st, ws.Generation, now, magosv1.ReasonNewRevisionDetected)
	case st.Phase == magosv1.PhasePending:
		g := grant.Parse(ann)
		if !g.AllowsRun(st.CurrentRunID) {
			return ctrl.Result{}, nil // no grant for this run (yet)
		}
		commit := g.Revision
		if commit == "" {
			commit = detected
		}
		if commit == "" {
			return ctrl.Result{}, fmt.Errorf("workspace %s: granted run %s names no commit and none was detected", req, st.CurrentRunID)
		}
		r.setGranted(st.CurrentRunID, now)
		st.Phase, st.Reason, st.Message, st.CurrentRevision = magosv1.PhasePlanning, magosv1.ReasonPlanning, "emulated plan", commit
		after = r.delay / 2
	case st.Phase == magosv1.PhasePlanning:
		if wait := r.delay/2 - now.Sub(r.grantedAt(st.CurrentRunID, now)); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		st.Phase, st.Reason, st.Message = magosv1.PhaseApplying, magosv1.ReasonApplying, "emulated apply"
		after = r.delay - now.Sub(r.grantedAt(st.CurrentRunID, now))
	case st.Phase == magosv1.PhaseApplying:
		granted := r.grantedAt(st.CurrentRunID, now)
		if wait := r.delay - now.Sub(granted); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		st.Phase, st.Reason, st.Message = magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, "emulated apply succeeded"
		st.ObservedRevision = st.CurrentRevision
		applied = &Record{Cluster: r.cluster, Workspace: ws.Name, Commit: st.ObservedRevision, Granted: granted, Applied: now}
	default:
		return ctrl.Result{}, nil
	}
	ws.Status = *st
	if err := r.client.Status().Update(ctx, ws); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil // read again from the cache
		}
		return ctrl.Result{}, err
	}
	if applied != nil {
		// Recorded once the write went through: a refused write is retried, not counted.
		r.ledger.add(*applied)
	}
	if after > 0 {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	return ctrl.Result{}, nil
}

// mint starts a new run of the Workspace: a new run ID, phase Pending, for the current
// generation, as agent/workspace does.
func mint(st *magosv1.WorkspaceStatus, generation int64, now time.Time, reason string) {
	st.CurrentRunID = runner.NewRunID(now)
	st.Phase, st.Reason, st.Message = magosv1.PhasePending, reason, "waiting for the hub's grant"
	st.ObservedGeneration = generation
}

func (r *emulatedRunner) setGranted(run string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.granted == nil {
		r.granted = map[string]time.Time{}
	}
	r.granted[run] = at
}

// grantedAt returns when the grant of run was seen (def if this runner never saw it).
func (r *emulatedRunner) grantedAt(run string, def time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.granted[run]; ok {
		return t
	}
	return def
}
