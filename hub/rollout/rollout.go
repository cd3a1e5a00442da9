// Package rollout is the hub's Rollout controller. For each hub Rollout it reads the
// Project's Workspaces from every registered cluster (mirrors for agent clusters, the spokes'
// own Workspaces for direct clusters), asks the pure pkg/decision.Decide which of them may run
// now, writes the grants and revocations on them with merge patches, and records the Rollout's
// status, Events and metrics.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/decider"
	"github.com/magosfleet/magos/hub/fleetview"
	decide "github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
)

// ControllerName names the controller, its logger and its Events.
const ControllerName = "rollout"

// Event reasons besides fleetview.EventGranted, fleetview.EventRevoked,
// magosv1.ReasonFailureTolerated (Workspaces of a step failed within its maxFailures) and
// magosv1.ReasonDriftDetected (more Workspaces of the current step drifted: driftEvent). A change
// of the Rollout's status reason is also recorded, with the reason itself (e.g. StepFailed,
// Soaking).
const (
	EventStepChanged = "StepChanged"
	// EventStepCompleted: a step the Rollout was on is done (and soaked); the next is current.
	EventStepCompleted = "StepCompleted"
	// EventRevisionChanged: the Rollout started rolling out a new commit of a repository and ref.
	EventRevisionChanged = "RevisionChanged"
	// EventResumed: the Rollout was paused and is not any more; the Event names who resumed it
	// (the annotation magosproject.io/paused-by) when it is known.
	EventResumed = "Resumed"
)

// waitingRecheck is how soon a Rollout waiting for clusters is decided again.
const waitingRecheck = 2 * time.Second

// Options configures the Rollout controller.
type Options = decider.ControllerOptions

// Reconciler decides hub Rollouts.
type Reconciler struct {
	decider.Controller[*magosv1.Rollout]

	mu     sync.Mutex
	active map[types.NamespacedName]bool
	// self is the hub's own user name (decider.WhoAmI), asked once it is first needed.
	self string
	// retries are the runs whose retry by a person an Event has reported, by Workspace, so that
	// each is reported once while this replica leads.
	retries map[decide.Key]string
	// written is when each Rollout's status was last written (progressOnly paces those writes).
	written map[types.NamespacedName]time.Time
	// completions are the completions each Rollout's Events reported for the change it rolls
	// out (firstCompletion).
	completions map[types.NamespacedName]completion
}

// completion is what a Rollout's Events reported completed for one change: its steps
// (StepCompleted) and the whole Rollout (RolloutCompleted).
type completion struct {
	uid     types.UID
	change  string
	steps   map[string]bool
	rollout bool
}

// changeOf identifies the change a decision rolls out: the commits of its revisions, each with
// when the hub started rolling it out (a commit rolled out again after a rollback is a new
// change), the rollback in force, if any, and the Rollout's spec (its generation: an edit, a
// step added or a pause, is a change of its own; a cluster going silent is none).
func changeOf(ro *magosv1.Rollout, d decide.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d\n", ro.Generation)
	for _, rev := range d.Revisions {
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00%d\n", rev.RepoURL, rev.TargetRevision, rev.Commit, rev.Since.Unix())
	}
	if rb := ro.Spec.Rollback; rb != nil {
		fmt.Fprintf(&b, "rollback %d", rb.RequestedAt.Unix())
	}
	return b.String()
}

// firstCompletion reports whether the completion of step (of the whole Rollout when step is "")
// is new for the change d rolls out, and records it. A step is completed once per change: a
// cluster that goes silent makes its steps current again until it is back (its Workspaces'
// reports count only while it is available), and they are then done again for the same change,
// with nothing new to report. So are a status write that failed after its Events were recorded
// and decided again. The record lives while this replica leads: a new leader reports from the
// Rollout's status alone.
func (r *Reconciler) firstCompletion(ro *magosv1.Rollout, d decide.Decision, step string) bool {
	nn, change := client.ObjectKeyFromObject(ro), changeOf(ro, d)
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.completions[nn]
	if !ok || c.uid != ro.UID || c.change != change {
		c = completion{uid: ro.UID, change: change, steps: map[string]bool{}}
	}
	first := false
	if step == "" {
		first, c.rollout = !c.rollout, true
	} else {
		first, c.steps[step] = !c.steps[step], true
	}
	if r.completions == nil {
		r.completions = map[types.NamespacedName]completion{}
	}
	r.completions[nn] = c
	return first
}

// ProgressInterval is the least time between two writes of a Rollout's status that differ only
// in its progress (progressOnly): what a step's Workspaces are doing, counted. Anything else
// (a new step, phase or reason, a failure, plans awaiting approval, a soak, a frozen target,
// the clusters waited for) is written at once. A step of a thousand Workspaces thus costs a
// status write every ProgressInterval while it runs, not one per Workspace that moves; its
// counts shown by magosctl and the dashboard lag by that much at most.
const ProgressInterval = 2 * time.Second

// EventRollbackStarted is the reason of the Event on a Rollout whose failed step wrote
// spec.rollback (spec.onFailure Rollback).
const EventRollbackStarted = "RollbackStarted"

// identity returns the hub's own user name, the writer its retry requests name.
func (r *Reconciler) identity(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.self == "" {
		name, err := decider.WhoAmI(ctx, r.Hub)
		if err != nil {
			return "", err
		}
		r.self = name
	}
	return r.self, nil
}

// rollbackOnFailure writes spec.rollback on a Rollout whose step failed beyond its maxFailures
// when its spec.onFailure is Rollback and it is not rolling back already: for every source, the
// newest commit all its Workspaces had applied before the one rolled out
// (decision.RollbackTargets). It reports whether it wrote one.
func (r *Reconciler) rollbackOnFailure(ctx context.Context, ro *magosv1.Rollout, in decide.Input, d decide.Decision) (bool, error) {
	if d.Reason != magosv1.ReasonStepFailed || ro.Spec.OnFailure != magosv1.OnFailureRollback || ro.Spec.Rollback != nil {
		return false, nil
	}
	targets, err := decide.RollbackTargets(in, d.Revisions, "")
	if err != nil {
		r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, EventRollbackStarted, "Rollback", "Step %s failed and onFailure is Rollback, but %v", d.CurrentStepName, err)
		return false, nil
	}
	self, err := r.identity(ctx)
	if err != nil {
		return false, err
	}
	rb := &magosv1.RolloutRollback{Commits: targets, RequestedBy: self, RequestedAt: metav1.Now(),
		Reason: "onFailure: " + message.Truncate(d.Message, 900)}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": ro.ResourceVersion}, "spec": map[string]any{"rollback": rb}})
	if err != nil {
		return false, err
	}
	if err := r.Hub.Patch(ctx, ro, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil // decided again on what it is now
		}
		return false, fmt.Errorf("writing spec.rollback: %w", err)
	}
	r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, EventRollbackStarted, "Rollback",
		"Step %s failed and onFailure is Rollback: rolling back to %s, last step first", d.CurrentStepName, commitList(targets))
	return true, nil
}

// commitList names rollback commits for an Event: "abc123def456 of <repo>@<ref>", comma
// separated.
func commitList(cs []magosv1.RollbackCommit) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("%.12s of %s@%s", c.Commit, c.RepoURL, c.TargetRevision)
	}
	return strings.Join(out, ", ")
}

// NewReconciler returns a Rollout reconciler for the hub manager mgr, without registering a
// controller (SetupWithManager does both).
func NewReconciler(mgr mcmanager.Manager, opts Options) *Reconciler {
	return &Reconciler{
		Controller: decider.NewController[*magosv1.Rollout](mgr, ControllerName, metrics, opts),
		active:     map[types.NamespacedName]bool{},
		written:    map[types.NamespacedName]time.Time{},
	}
}

// SetupWithManager registers the Rollout controller with the hub manager: it reconciles hub
// Rollouts, and is triggered by Workspace changes in every engaged cluster (mapped to the
// Rollout named after their Project), by changes of registered clusters' labels or
// availability (of availability alone, only the Rollouts it can move: waitsOnCluster), and
// every ResyncPeriod. It runs only on the elected leader.
func SetupWithManager(mgr mcmanager.Manager, opts Options) error {
	return NewReconciler(mgr, opts).SetupWithManager(mgr)
}

// SetupWithManager registers r with mgr; see the package-level SetupWithManager.
func (r *Reconciler) SetupWithManager(mgr mcmanager.Manager) error {
	return r.Builder(mgr, decider.Watching{
		For: &magosv1.Rollout{},
		ForPredicate: predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}),
		List:      &magosv1.RolloutList{},
		OnCluster: waitsOnCluster,
	}).Complete(r)
}

// waitsOnCluster keeps, of the Rollouts, those a change of a cluster's health may move on
// (fleetview.EnqueueForCluster): those whose Project has a Workspace in the cluster, those
// waiting for clusters (this one may be among them) and those not decided yet. Any other
// Rollout's next decision reads the cluster's health as it is then.
func waitsOnCluster(o client.Object, hasWorkspaces bool) bool {
	ro, ok := o.(*magosv1.Rollout)
	return !ok || hasWorkspaces || ro.Status.Reason == "" || ro.Status.Reason == magosv1.ReasonWaitingForClusters
}

// Reconcile decides one hub Rollout: read it, read the fleet, Decide, write the grants and
// revocations, then the status. A Rollout being deleted is left as it is: it has no finalizer,
// and its decisions stay as they are, as upstream.
func (r *Reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	return r.Controller.Reconcile(ctx, req, &magosv1.Rollout{}, decider.Steps[*magosv1.Rollout]{
		Decide: r.reconcile, Gone: r.forget,
	})
}

// reconcile reads the fleet, Decides, writes the grants and revocations, then the status.
func (r *Reconciler) reconcile(ctx context.Context, ro *magosv1.Rollout) (ctrl.Result, error) {
	snap, err := r.View.Snapshot(ctx, ro.Namespace, ro.Spec.ProjectRef)
	if err != nil {
		return ctrl.Result{}, err
	}
	in := decide.Input{
		Namespace:  ro.Namespace,
		Project:    ro.Spec.ProjectRef,
		Rollout:    ro,
		Workspaces: snap.Workspaces,
		Clusters:   snap.Clusters,
		Now:        time.Now(),
	}
	d := decide.Decide(in)
	if started, err := r.rollbackOnFailure(ctx, ro, in, d); err != nil || started {
		// The spec changed: the Rollout is decided again as it is now.
		return ctrl.Result{RequeueAfter: decider.ConflictRecheck}, err
	}
	var self string
	if len(d.Retries) > 0 {
		var err error
		if self, err = r.identity(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	out, writeErr := snap.Write(ctx, d, fleetview.WriteOptions{
		By: keys.GrantedByRollout, Recorder: r.Recorder, Regarding: ro, Leader: r.Opts.Leader, RequestedBy: self,
	})
	if len(out.Granted)+len(out.Revoked) > 0 {
		ctrl.LoggerFrom(ctx).Info("wrote decisions", "step", d.CurrentStepName, "granted", len(out.Granted), "revoked", len(out.Revoked))
	}
	r.recordTransitions(ro, d)
	if err := r.recordRequests(ctx, ro, snap.Workspaces); err != nil {
		return ctrl.Result{}, err
	}
	held, statusErr := r.writeStatus(ctx, ro, d, out)

	r.observe(ro, d)
	after := r.Opts.ResyncPeriod
	if apierrors.IsConflict(statusErr) {
		// The Rollout changed since it was read: decide again on what it is now.
		statusErr, after = nil, decider.ConflictRecheck
	}
	if err := errors.Join(writeErr, statusErr); err != nil {
		return ctrl.Result{}, err
	}
	if d.Reason == magosv1.ReasonWaitingForClusters {
		// Some of what it waits for (an agent's sync watermark) comes without an event.
		after = min(after, waitingRecheck)
	}
	if d.RecheckAfter > 0 { // a soak ends, a change window opens or closes, a deadline passes
		after = min(after, d.RecheckAfter)
	}
	if held > 0 { // progress held back: written then, unless a later pass writes it first
		after = min(after, held)
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// recordTransitions records Events for a change of step and of status reason (a halt, a wait
// on an unavailable cluster, completion...).
func (r *Reconciler) recordTransitions(ro *magosv1.Rollout, d decide.Decision) {
	old := ro.Status
	first := old.Phase == ""
	steps := len(ro.Spec.Strategy.Steps)
	if !first && old.CurrentStep < d.CurrentStep {
		// Every step from the one current before to the one current now is done (and soaked).
		for i := old.CurrentStep; i < d.CurrentStep && i < len(d.Steps); i++ {
			st := d.Steps[i]
			if !r.firstCompletion(ro, d, st.Name) {
				continue // reported for this change already
			}
			r.Recorder.Eventf(ro, nil, corev1.EventTypeNormal, EventStepCompleted, "Step "+st.Name,
				"Step %d/%d %s completed: %d/%d applied, %d failed", i+1, steps, st.Name, st.Applied, st.Matched, st.Failed)
		}
	}
	stepChanged := (first || old.CurrentStep != d.CurrentStep) && d.CurrentStep < steps &&
		d.Reason != magosv1.ReasonNoWorkspacesFound && d.Reason != magosv1.ReasonInvalidSelector
	if stepChanged {
		// The action names the step: the events API folds Events that differ only in their
		// note into one series, and each step change deserves its own.
		r.Recorder.Eventf(ro, nil, corev1.EventTypeNormal, EventStepChanged, "Step "+d.CurrentStepName,
			"Step %d/%d %s is current", d.CurrentStep+1, steps, d.CurrentStepName)
	}
	for _, rev := range d.Revisions {
		if i := slices.IndexFunc(old.Revisions, func(o magosv1.RolloutRevision) bool {
			return o.RepoURL == rev.RepoURL && o.TargetRevision == rev.TargetRevision && o.Commit == rev.Commit
		}); i < 0 {
			r.Recorder.Eventf(ro, nil, corev1.EventTypeNormal, EventRevisionChanged, "Revision",
				"Rolling out commit %s of %s (%s)", rev.Commit, rev.RepoURL, rev.TargetRevision)
		}
	}
	for i, st := range d.Steps {
		failed := d.Tolerated[st.Name]
		if len(failed) == 0 {
			continue
		}
		if j := slices.IndexFunc(old.Steps, func(o magosv1.StepStatus) bool { return o.Name == st.Name }); j >= 0 && old.Steps[j].Failed >= st.Failed {
			continue // recorded when the count last rose
		}
		names := make([]string, len(failed))
		for k, key := range failed {
			names[k] = key.String()
		}
		r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, magosv1.ReasonFailureTolerated, "Step "+st.Name,
			"Step %d/%d %s: %d failed Workspace(s) tolerated (maxFailures %d): %s",
			i+1, steps, st.Name, len(failed), st.MaxFailures, strings.Join(names, ", "))
	}
	if d.CurrentStep < len(d.Steps) {
		st := d.Steps[d.CurrentStep]
		var was *magosv1.StepApproval
		if j := slices.IndexFunc(old.Steps, func(o magosv1.StepStatus) bool { return o.Name == st.Name }); j >= 0 {
			was = old.Steps[j].Approval
		}
		switch {
		case st.Approval != nil && (was == nil || !was.ApprovedAt.Equal(&st.Approval.ApprovedAt) || was.ApprovedBy != st.Approval.ApprovedBy):
			r.Recorder.Eventf(ro, nil, corev1.EventTypeNormal, magosv1.ReasonApproved, "Step "+st.Name,
				"Step %s: %d plan(s) approved by %s at %s (%s); applying them", st.Name, len(st.Approval.Plans), st.Approval.ApprovedBy,
				st.Approval.ApprovedAt.UTC().Format(time.RFC3339), approvedPlans(st.Approval))
		case d.ApprovalVoided != "" && !strings.Contains(old.Message, d.ApprovalVoided):
			r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, magosv1.ReasonApprovalVoided, "Step "+st.Name,
				"Step %s: %s", st.Name, d.ApprovalVoided)
		}
	}
	for _, st := range d.Steps {
		r.planChanged(ro, &old, st)
	}
	drift := r.driftEvent(ro, &old, d)
	wasExceeded := meta.IsStatusConditionFalse(old.Conditions, magosv1.ConditionProgressing)
	if d.DeadlineExceeded && !wasExceeded {
		r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, magosv1.ReasonProgressDeadlineExceeded, "Step "+d.CurrentStepName,
			"Step %s has not progressed for %s: %s", d.CurrentStepName, ro.Spec.ProgressDeadline.Duration, d.Message)
	}
	if old.Reason == magosv1.ReasonPaused && d.Reason != magosv1.ReasonPaused && !ro.Spec.Paused {
		by := ""
		if who := ro.Annotations[keys.PausedBy]; who != "" {
			by = " by " + who
		}
		r.Recorder.Eventf(ro, nil, corev1.EventTypeNormal, EventResumed, "Resume", "Resumed%s", by)
	}
	// A step that starts is one Event (StepChanged): the routine LevelProgressing that comes
	// with it would only say it again, but after a pause, where it records the resume.
	routineStart := d.Reason == magosv1.ReasonLevelProgressing && stepChanged && old.Reason != magosv1.ReasonPaused
	if (first || old.Reason != d.Reason) && !(drift && d.Reason == magosv1.ReasonDriftDetected) && !routineStart &&
		(d.Reason != magosv1.ReasonRolloutCompleted || r.firstCompletion(ro, d, "")) {
		kind := corev1.EventTypeNormal
		if magosv1.InfoOf(d.Phase, d.Reason).Failed || d.Reason == magosv1.ReasonWaitingForClusters || d.Reason == magosv1.ReasonDriftDetected {
			kind = corev1.EventTypeWarning
		}
		// The action names the step the reason is about (a notification says which), if any.
		action := "Decide"
		if d.CurrentStep < steps && d.Reason != magosv1.ReasonRolloutCompleted {
			action = "Step " + d.CurrentStepName
		}
		r.Recorder.Eventf(ro, nil, kind, d.Reason, action, "%s", d.Message)
	}
}

// recordRequests records an Event fleetview.EventRetryRequested for each Workspace of the Rollout that a
// person (not the hub itself) asked for a retry of its current run, naming them, once per run.
func (r *Reconciler) recordRequests(ctx context.Context, ro *magosv1.Rollout, ws []decide.Workspace) error {
	var self string
	for _, w := range ws {
		if w.RetryRequested == "" || w.RetryRequested != w.RunID || w.RequestedBy == "" {
			continue
		}
		if self == "" {
			var err error
			if self, err = r.identity(ctx); err != nil {
				return err
			}
		}
		if w.RequestedBy == self {
			continue
		}
		r.mu.Lock()
		seen := r.retries[w.Key] == w.RunID
		if !seen {
			if r.retries == nil {
				r.retries = map[decide.Key]string{}
			}
			r.retries[w.Key] = w.RunID
		}
		r.mu.Unlock()
		if !seen {
			r.Recorder.Eventf(ro, nil, corev1.EventTypeNormal, fleetview.EventRetryRequested, "Retry",
				"Retry of run %s of %s requested by %s", w.RunID, w.Key, w.RequestedBy)
		}
	}
	return nil
}

// maxDriftNamed is how many newly drifted Workspaces a DriftDetected Event names.
const maxDriftNamed = 10

// driftEvent records a Warning Event DriftDetected when the current step lists Workspaces as
// drifted (status.steps[].drifted: its drift is warn or block) that the Rollout's old status did
// not list for it, naming them: once per Workspace that drifts, not at every decision. It
// reports whether it recorded one.
func (r *Reconciler) driftEvent(ro *magosv1.Rollout, old *magosv1.RolloutStatus, d decide.Decision) bool {
	if d.CurrentStep >= len(d.Steps) {
		return false
	}
	st := d.Steps[d.CurrentStep]
	var was []string
	if j := slices.IndexFunc(old.Steps, func(o magosv1.StepStatus) bool { return o.Name == st.Name }); j >= 0 {
		was = old.Steps[j].Drifted
	}
	var grew []string
	for _, w := range st.Drifted {
		if !slices.Contains(was, w) {
			grew = append(grew, w)
		}
	}
	if len(grew) == 0 {
		return false
	}
	names := strings.Join(grew[:min(len(grew), maxDriftNamed)], ", ")
	if more := len(grew) - maxDriftNamed; more > 0 {
		names += fmt.Sprintf(", and %d more", more)
	}
	policy := ro.Spec.Strategy.Steps[d.CurrentStep].DriftPolicy()
	then := "the step goes on (drift: warn)"
	if policy == magosv1.DriftBlock {
		then = fmt.Sprintf("nothing new applies in the step until a drift check finds none or the drift is accepted (magosctl rollout accept-drift %s --step %s)", ro.Name, st.Name)
	}
	r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, magosv1.ReasonDriftDetected, "Step "+st.Name,
		"Step %s: %d Workspace(s) drifted from the commit they applied (%d in all): %s; %s",
		st.Name, len(grew), len(st.Drifted), names, then)
	return true
}

// planChanged records a PlanChanged Event for each Workspace of the step whose new plan differs
// from the one previewed, once: when the Rollout's old status did not show that plan yet.
func (r *Reconciler) planChanged(ro *magosv1.Rollout, old *magosv1.RolloutStatus, st magosv1.StepStatus) {
	var shown map[string]string // the digest the old status showed, by Workspace
	for _, p := range st.Preview {
		v := p.Previewed
		if v == nil || p.Digest == "" {
			continue
		}
		if shown == nil {
			shown = map[string]string{}
			if j := slices.IndexFunc(old.Steps, func(o magosv1.StepStatus) bool { return o.Name == st.Name }); j >= 0 {
				for _, o := range old.Steps[j].Preview {
					shown[o.Workspace] = o.Digest
				}
			}
		}
		if shown[p.Workspace] == p.Digest {
			continue
		}
		r.Recorder.Eventf(ro, nil, corev1.EventTypeWarning, magosv1.ReasonPlanChanged, "Step "+st.Name,
			"Step %s: the plan of %s changed since the preview: previewed plan %s (+%d ~%d -%d), now plan %s (+%d ~%d -%d)",
			st.Name, p.Workspace, v.Digest, v.Add, v.Change, v.Destroy, p.Digest, p.Add, p.Change, p.Destroy)
	}
}

// approvedPlans renders an approval's plans as workspace=digest@commit, comma-separated.
func approvedPlans(a *magosv1.StepApproval) string {
	out := make([]string, len(a.Plans))
	for i, p := range a.Plans {
		out[i] = fmt.Sprintf("%s=%s@%.12s", p.Workspace, p.Digest, p.Revision)
	}
	return strings.Join(out, ", ")
}

// writeStatus patches the Rollout's status when the decision changes it.
func (r *Reconciler) writeStatus(ctx context.Context, ro *magosv1.Rollout, d decide.Decision, out fleetview.Outcome) (time.Duration, error) {
	want := ro.Status.DeepCopy()
	want.ObservedGeneration = ro.Generation
	want.Phase, want.Reason, want.Message = d.Phase, d.Reason, d.Message
	want.WaitingForClusters = d.WaitingFor
	want.CurrentStep, want.CurrentStepName = d.CurrentStep, d.CurrentStepName
	want.AppliedWorkspaces, want.TotalWorkspaces = d.Applied, d.Total
	want.Steps = d.Steps
	want.Revisions = d.Revisions
	meta.SetStatusCondition(&want.Conditions, magosv1.ReadyCondition(d.Phase, d.Reason, d.Message, ro.Generation))
	fleetview.SetRefusedCondition(&want.Conditions, out, ro.Generation)
	want.DecidedBy = r.Opts.Leader
	want.NextWindowAt = nil
	if !d.NextWindowAt.IsZero() {
		want.NextWindowAt = &metav1.Time{Time: d.NextWindowAt}
	}
	want.LastProgressTime = nil
	if ro.Spec.ProgressDeadline == nil {
		meta.RemoveStatusCondition(&want.Conditions, magosv1.ConditionProgressing)
	} else {
		want.LastProgressTime = &metav1.Time{Time: d.LastProgress}
		meta.SetStatusCondition(&want.Conditions, progressingCondition(ro, d))
	}
	if equality.Semantic.DeepEqual(*want, ro.Status) {
		return 0, nil
	}
	key := client.ObjectKeyFromObject(ro)
	now := time.Now()
	if progressOnly(want, &ro.Status) {
		r.mu.Lock()
		last := r.written[key]
		r.mu.Unlock()
		if wait := last.Add(ProgressInterval).Sub(now); wait > 0 {
			return wait, nil
		}
	}
	want.LastReconcileTime = ptr.To(metav1.NewTime(now))
	patched := ro.DeepCopy()
	patched.Status = *want
	data, err := client.MergeFrom(ro).Data(patched)
	if err != nil {
		return 0, fmt.Errorf("computing the status patch of Rollout %s/%s: %w", ro.Namespace, ro.Name, err)
	}
	// status.currentStep is required: a merge patch computed from an unchanged 0 would leave
	// it out, and a first status would then be refused. Always send it.
	var body map[string]any
	if err := json.Unmarshal(data, &body); err != nil {
		return 0, fmt.Errorf("decoding the status patch of Rollout %s/%s: %w", ro.Namespace, ro.Name, err)
	}
	status, _ := body["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		body["status"] = status
	}
	status["currentStep"] = want.CurrentStep
	// The status describes the Rollout as read: if it changed since (a spec edit, or another hub
	// replica's status), the API server refuses the patch and the next pass decides again.
	body["metadata"] = map[string]any{"resourceVersion": ro.ResourceVersion}
	if data, err = json.Marshal(body); err != nil {
		return 0, fmt.Errorf("encoding the status patch of Rollout %s/%s: %w", ro.Namespace, ro.Name, err)
	}
	if err := r.Hub.Status().Patch(ctx, patched, client.RawPatch(types.MergePatchType, data)); err != nil {
		return 0, fmt.Errorf("patching the status of Rollout %s/%s: %w", ro.Namespace, ro.Name, err)
	}
	r.Wrote(key, ro.ResourceVersion, patched.ResourceVersion)
	r.mu.Lock()
	r.written[key] = now
	r.mu.Unlock()
	return 0, nil
}

// progressOnly reports whether the status want differs from have only in the progress of the
// Rollout's steps: how many Workspaces are matched, running and applied (Rollout and steps),
// the message and condition messages that count them, and when the step last progressed. A
// failure, a new step, phase or reason, plans, approvals, rejections, soaks, targets, drift,
// revisions and the clusters waited for are not progress: they are written at once.
func progressOnly(want, have *magosv1.RolloutStatus) bool {
	if len(want.Steps) != len(have.Steps) || len(want.Conditions) != len(have.Conditions) {
		return false
	}
	a, b := want.DeepCopy(), have.DeepCopy()
	for _, st := range []*magosv1.RolloutStatus{a, b} {
		st.AppliedWorkspaces, st.TotalWorkspaces, st.Message, st.LastProgressTime, st.LastReconcileTime = 0, 0, "", nil, nil
		for i := range st.Steps {
			st.Steps[i].Matched, st.Steps[i].Running, st.Steps[i].Applied = 0, 0, 0
		}
		for i := range st.Conditions {
			st.Conditions[i].Message, st.Conditions[i].LastTransitionTime = "", metav1.Time{}
		}
	}
	return equality.Semantic.DeepEqual(a, b)
}

// progressingCondition is the Progressing condition of a Rollout with a progress deadline.
func progressingCondition(ro *magosv1.Rollout, d decide.Decision) metav1.Condition {
	c := metav1.Condition{Type: magosv1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: magosv1.ReasonProgressing, ObservedGeneration: ro.Generation, Message: d.Message}
	if d.DeadlineExceeded {
		c.Status, c.Reason = metav1.ConditionFalse, magosv1.ReasonProgressDeadlineExceeded
		c.Message = fmt.Sprintf("Step %s has not progressed since %s (progressDeadline %s): %s",
			d.CurrentStepName, d.LastProgress.UTC().Format(time.RFC3339), ro.Spec.ProgressDeadline.Duration, d.Message)
	}
	return c
}

// observe updates the level and active-count metrics.
func (r *Reconciler) observe(ro *magosv1.Rollout, d decide.Decision) {
	if ro.Status.Phase != "" && ro.Status.CurrentStep != d.CurrentStep {
		levelTransitions.WithLabelValues(ro.Namespace, ro.Name).Inc()
	}
	currentLevel.WithLabelValues(ro.Namespace, ro.Name).Set(float64(d.CurrentStep))
	exceeded := 0.0
	if d.DeadlineExceeded {
		exceeded = 1
	}
	deadlineExceeded.WithLabelValues(ro.Namespace, ro.Name).Set(exceeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active[client.ObjectKeyFromObject(ro)] = d.Phase.Info().Progressing
	activeCount.Set(float64(r.countActive()))
}

// forget drops a deleted Rollout from the count of active ones (fleetview dropped its series).
func (r *Reconciler) forget(nn types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.active, nn)
	delete(r.written, nn)
	delete(r.completions, nn)
	activeCount.Set(float64(r.countActive()))
}

func (r *Reconciler) countActive() int {
	n := 0
	for _, a := range r.active {
		if a {
			n++
		}
	}
	return n
}
