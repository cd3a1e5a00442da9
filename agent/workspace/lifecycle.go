package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/plannedinputs"
	"github.com/magosfleet/magos/agent/variables"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/runner"
)

// ReasonInvalidGrantedRevision is the reason of the Warning event about a grant whose
// granted-revision is not a commit SHA (the grant is not executed).
const ReasonInvalidGrantedRevision = "InvalidGrantedRevision"

// ReasonUnfencedGrant is the reason of the Warning event about a grant without granted-run on
// a Workspace whose agent is connected to a hub: only the hub grants there, and the grant is
// not executed.
const ReasonUnfencedGrant = "UnfencedGrant"

// runFor is a short digest of what a run is minted for besides the spec generation: the
// Workspace's labels (the hub decides steps by them) and its projectRef.
func runFor(ws *magosv1.Workspace) string {
	h := sha256.New()
	names := make([]string, 0, len(ws.Labels))
	for k := range ws.Labels {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(h, "label %q=%q\n", k, ws.Labels[k])
	}
	fmt.Fprintf(h, "projectRef %q\n", ws.Spec.ProjectRef.Name)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// changedSinceMint says what changed, if anything, since the current run was minted: its
// spec generation, or its labels or projectRef. A grant decided for the run no longer holds.
func changedSinceMint(ws *magosv1.Workspace) (resetKind, bool) {
	switch {
	case ws.Generation != ws.Status.ObservedGeneration:
		return resetConfiguration(ws), true
	case ws.Status.CurrentRunFor != runFor(ws):
		return resetKind{magosv1.ReasonConfigurationChanged, magosv1.TriggerConfiguration, fmt.Sprintf(
			"Labels or projectRef changed since run %s was minted; waiting for a grant to run it", ws.Status.CurrentRunID)}, true
	}
	return resetKind{}, false
}

// inputsDigest is the digest of what a plan or apply of run runs (status.plannedInputs), under
// the agent's key (plannedinputs.Digest). The apply runs only on the digest its plan had.
func (r *Reconciler) inputsDigest(ctx context.Context, run *execution.Run) (string, error) {
	key, err := r.inputsKeys.Key(ctx)
	if err != nil {
		return "", transient(ReasonAPIError, err)
	}
	return plannedinputs.Digest(key, run), nil
}

// resetKind is why a new run becomes due.
type resetKind struct {
	reason, trigger, message string
}

func resetInitial(*magosv1.Workspace) resetKind {
	return resetKind{magosv1.ReasonAwaitingRollout, magosv1.TriggerInitial,
		"Waiting for the Rollout controller to schedule this Workspace for execution"}
}

func resetConfiguration(ws *magosv1.Workspace) resetKind {
	return resetKind{magosv1.ReasonConfigurationChanged, magosv1.TriggerConfiguration,
		fmt.Sprintf("Spec changed (generation %d); waiting for a grant to run it", ws.Generation)}
}

// resetReason says whether a waiting or settled Workspace needs a new run, first match wins:
// configuration changed (for a waiting run, Pending or Planned: spec, labels or projectRef
// changed since it was minted), schedule due (re-plan or retry), new revision, manual request.
func (r *Reconciler) resetReason(ws *magosv1.Workspace, sched Schedule) (resetKind, bool) {
	phase := ws.Status.Phase
	if phase == magosv1.PhasePending || phase == magosv1.PhasePlanned {
		if why, changed := changedSinceMint(ws); changed {
			return why, true
		}
	}
	if !phase.Settled() {
		return resetKind{}, false
	}
	if ws.Generation != ws.Status.ObservedGeneration {
		return resetConfiguration(ws), true
	}
	if sched.Due {
		every := fmt.Sprintf(" (every %s)", sched.Interval)
		switch {
		case phase == magosv1.PhaseApplied:
			return resetKind{magosv1.ReasonScheduledReconcile, magosv1.TriggerScheduled, "Scheduled re-plan" + every}, true
		case phase == magosv1.PhaseFailed && ws.Status.Reason == magosv1.ReasonApplyFailed:
			return resetKind{magosv1.ReasonRetryApply, magosv1.TriggerRetry, "Retrying after a failed apply" + every}, true
		case phase.RunFailed():
			return resetKind{magosv1.ReasonRetryPlan, magosv1.TriggerRetry, "Retrying after a failed plan" + every}, true
		}
	}
	if d := ws.Annotations[keys.DetectedRevision]; d != "" && d != ws.Status.ObservedRevision && d != ws.Status.CurrentRevision {
		return resetKind{magosv1.ReasonNewRevisionDetected, magosv1.TriggerRevision, "RefWatcher detected new revision " + d}, true
	}
	if req := ws.Annotations[keys.ReconcileRequest]; req != "" {
		return resetKind{magosv1.ReasonManualReconcileRequested, magosv1.TriggerManual, "Manual reconcile requested at " + req}, true
	}
	if run := ws.Annotations[keys.RetryRun]; run != "" && run == ws.Status.CurrentRunID {
		return resetKind{magosv1.ReasonManualReconcileRequested, magosv1.TriggerManual,
			fmt.Sprintf("Retry of run %s requested on the hub by %s", run, message.Or(ws.Annotations[keys.RequestedBy], "an unnamed user"))}, true
	}
	return resetKind{}, false
}

// mintRun mints a new run in the status, the one way every run (a plan and its apply, reset; a
// destroy, startDestroy) begins: a new run ID with trigger, for the current generation, labels
// and projectRef (observedGeneration, currentRunFor), and nothing of the previous run's plan
// left (plannedInputs, planDigest, planOnly, policyViolations, policies). Closing the previous
// run's record is the caller's (reset: endRecord). The caller writes the phase and commits.
func (r *Reconciler) mintRun(ws *magosv1.Workspace, trigger string) {
	ws.Status.CurrentRunID = runner.NewRunID(r.opts.Now())
	ws.Status.CurrentRunTrigger = trigger
	ws.Status.ObservedGeneration = ws.Generation
	ws.Status.CurrentRunFor = runFor(ws)
	ws.Status.PlannedInputs = ""
	ws.Status.PlanDigest, ws.Status.PlanOnly = "", false
	ws.Status.PolicyViolations = nil
	ws.Status.Policies = nil
	// A drift check running would describe the commit the Workspace is leaving: abandon it.
	ws.Status.Drift = withoutCheck(ws.Status.Drift)
}

// reset starts a new run: the current run's record is closed with why's reason and message
// (endRecord), a new run is minted (mintRun) with why's trigger, phase Pending written first,
// then the annotations the new run satisfies are consumed (reconcile-request; a manual grant or
// an approval the abandoned run's plan used).
func (r *Reconciler) reset(ctx context.Context, ws *magosv1.Workspace, sched Schedule, why resetKind) (step, error) {
	from := ws.Status.Phase
	endRecord(ws, why.reason, why.message, r.opts.Now())
	r.mintRun(ws, why.trigger)
	setPhase(ws, magosv1.PhasePending, why.reason, why.message)
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	log.FromContext(ctx).Info("run due", "runID", ws.Status.CurrentRunID, "reason", why.reason)
	remove := map[string]string{}
	if v := ws.Annotations[keys.ReconcileRequest]; v != "" {
		remove[keys.ReconcileRequest] = v
	}
	if ws.Annotations[keys.DetectedRevision] != "" && why.reason == magosv1.ReasonConfigurationChanged {
		// The spec (maybe the repository or ref) changed: the new run resolves its ref afresh
		// rather than trust a commit detected for the old one.
		consumeDetection(ws, remove)
	}
	if from == magosv1.PhasePlanned || from == magosv1.PhasePlanning {
		if r.manualGrant(ws) {
			// The abandoned run's plan used it.
			grant.ConsumeUnfenced(remove)
		}
		if v, ok := ws.Annotations[keys.Approved]; ok {
			// It approved the abandoned run's plan, not the next one.
			remove[keys.Approved] = v
		}
	}
	if err := r.removeAnnotations(ctx, ws, remove); err != nil {
		return step{}, err
	}
	return step{again: true}, nil
}

// consumeDetection adds the ref watcher's detection (detected-revision and its detected-at)
// to the annotations to remove: the two always go together.
func consumeDetection(ws *magosv1.Workspace, remove map[string]string) {
	for _, k := range []string{keys.DetectedRevision, keys.DetectedAt} {
		if v, ok := ws.Annotations[k]; ok {
			remove[k] = v
		}
	}
}

// grantedCommit is the commit the grant g names for run: the granted-revision of a grant fenced
// to run (grant.Grant.RevisionFor), lower-cased, when it is a commit SHA; "" otherwise. Grants
// without granted-run, and stale grants, name no commit.
func grantedCommit(g grant.Grant, run string) string {
	if revision, present := g.RevisionFor(run); present && gitrepo.IsSHA(revision) {
		return strings.ToLower(revision)
	}
	return ""
}

// startedRevision is the commit the current run runs once it started: status.currentRevision,
// which the agent records before it launches any run. A status without one (one this agent did
// not write) runs what a start would: the commit the grant g names for the run (grantedCommit),
// else "", which prepare resolves.
func startedRevision(ws *magosv1.Workspace, g grant.Grant) string {
	if ws.Status.CurrentRevision != "" {
		return ws.Status.CurrentRevision
	}
	return grantedCommit(g, ws.Status.CurrentRunID)
}

// runStart is what the grant of a Pending run decides for its start, decided once from one
// parsed grant.Grant (grantedStart) and handed down to the plan (startPlan, prepare): whether the
// run starts, which commit it plans and whether it is granted its plan only all come from the
// same reading of the annotations.
type runStart struct {
	// revision is the commit the grant names for the run (grantedCommit), or "" when it names
	// none: prepare then resolves the commit (resolveRevision).
	revision string
	// planOnly reports a grant of the plan only (granted-operation "plan"): status.planOnly.
	planOnly bool
}

// grantedStart decides, from the Workspace's grant parsed once, whether its current run may
// start (grantAllowsRun) and how (runStart). A grant fenced to the run whose granted-revision is
// present but not a commit SHA starts nothing, with an Event.
func (r *Reconciler) grantedStart(ctx context.Context, ws *magosv1.Workspace) (runStart, bool) {
	g := grant.Of(ws)
	if !r.grantAllowsRun(ctx, ws, g) {
		return runStart{}, false
	}
	if revision, present := g.RevisionFor(ws.Status.CurrentRunID); present && !gitrepo.IsSHA(revision) {
		r.reportInvalidGrantedRevision(ctx, ws, revision)
		return runStart{}, false
	}
	return runStart{revision: grantedCommit(g, ws.Status.CurrentRunID), planOnly: g.PlanOnly}, true
}

// manualGrant reports a grant without granted-run (a person or upstream tooling wrote it) on
// a standalone agent: honoured once, then removed when its run ends. An agent connected to a
// hub never honours one (nor removes it).
func (r *Reconciler) manualGrant(ws *magosv1.Workspace) bool {
	return !r.opts.HubConnected && grant.Of(ws).Unfenced()
}

// grantAllowsRun reports whether g, the Workspace's grant, allows its current run
// (status.currentRunID): execution-allowed "true" and granted-run naming the run, or, on a
// standalone agent only, no granted-run at all (a manual grant). A grant for another run is
// stale and, under a hub, a grant without granted-run is unfenced: both are ignored, with an
// Event.
func (r *Reconciler) grantAllowsRun(ctx context.Context, ws *magosv1.Workspace, g grant.Grant) bool {
	if !g.Allowed {
		return false
	}
	if g.StaleFor(ws.Status.CurrentRunID) {
		if !spentOnEarlierRun(ws, g.Run) {
			r.reportStaleGrant(ws, g.Run)
		}
		return false
	}
	if r.opts.HubConnected && g.Unfenced() {
		r.reportUnfencedGrant(ctx, ws)
		return false
	}
	// Left: a grant that AllowsRun(currentRunID), as the hub reads it, or an unfenced grant on a
	// standalone agent.
	return true
}

// readyToApply reports whether the plan of the current run may be applied now: the Workspace
// applies on its own (spec.autoApply) or was approved (magosproject.io/approved), and its grant
// allows the apply (applyGranted).
func (r *Reconciler) readyToApply(ctx context.Context, ws *magosv1.Workspace) bool {
	return (ws.Spec.AutoApplies() || approved(ws)) && r.applyGranted(ctx, ws)
}

// approved reports whether a person approved applying the current run's plan: the
// magosproject.io/approved annotation, or an approval from the hub naming the run
// (magosproject.io/approve-run).
func approved(ws *magosv1.Workspace) bool {
	run := ws.Annotations[keys.ApproveRun]
	return ws.Annotations[keys.Approved] == "true" || run != "" && run == ws.Status.CurrentRunID
}

// applyGranted reports whether the grants allow the current run's apply. A run granted in full
// applies: the grant is checked when a run starts, and a run in flight keeps it whatever grant
// it holds later (a stale one replayed, say). A run granted its plan only (status.planOnly)
// applies only under a grant fenced to it (granted-run) that allows more than a plan
// (granted-operation is not "plan": the hub waits for an approval); and whenever the grant
// fenced to the run names a plan (granted-plan), it must be this run's plan
// (status.planDigest): a grant naming another plan is ignored, with an Event.
//
// It reads the grant as the hub does (grant.Grant.AllowsApply): a granted-plan present with an
// empty value binds the grant to no plan the agent computes (grant.Grant.OtherPlan).
func (r *Reconciler) applyGranted(ctx context.Context, ws *magosv1.Workspace) bool {
	g := grant.Of(ws)
	if !g.AllowsRun(ws.Status.CurrentRunID) {
		return !ws.Status.PlanOnly
	}
	if g.PlanOnly {
		return false
	}
	if g.OtherPlan(ws.Status.PlanDigest) {
		plan, _ := g.BoundPlan()
		r.reportOtherPlan(ctx, ws, plan)
		return false
	}
	return true
}

// waitingFor says what a successful plan that is not applied waits for. Being a message only,
// it reads granted-run, granted-operation and granted-plan whether execution-allowed is "true"
// or not.
func (r *Reconciler) waitingFor(ws *magosv1.Workspace) string {
	g := grant.Of(ws)
	forRun := g.Run == ws.Status.CurrentRunID
	switch {
	case !ws.Spec.AutoApplies() && !approved(ws):
		return "approve it to apply (magosctl approve, or magosproject.io/approved=true)"
	case forRun && g.PlanOnly:
		return fmt.Sprintf("plan %s waits for approval on the hub (its Rollout step requires approval)", message.Or(ws.Status.PlanDigest, "unknown"))
	case forRun && g.OtherPlan(ws.Status.PlanDigest):
		return fmt.Sprintf("the hub approved plan %s, not this plan %s: waiting for approval of this one", g.Plan, message.Or(ws.Status.PlanDigest, "unknown"))
	default:
		return "waiting for the hub's grant to apply it"
	}
}

// startPlan starts the plan of a Pending Workspace that holds a grant for its current run. The
// grant is read once (grantedStart): the commit the plan runs and status.planOnly come from the
// reading that allowed the run.
func (r *Reconciler) startPlan(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	start, ok := r.grantedStart(ctx, ws)
	if !ok {
		return step{}, nil
	}
	from := ws.Status.Phase
	run, err := r.prepare(ctx, ws, runner.OperationPlan, start.revision)
	if err != nil {
		if fail, ok := asRunFailure(err); ok {
			ws.Status.ObservedGeneration = ws.Generation
			return r.failRun(ctx, ws, sched, from, fail)
		}
		return step{}, err
	}
	digest, err := r.inputsDigest(ctx, run)
	if err != nil {
		return step{}, err
	}
	ws.Status.CurrentRevision = run.Spec.Revision
	ws.Status.ObservedGeneration = ws.Generation
	ws.Status.PlannedInputs = digest
	ws.Status.PlanDigest = ""
	ws.Status.PlanOnly = start.planOnly
	ws.Status.PolicyViolations = nil
	ws.Status.Policies = r.evaluatedPolicies(run.Spec.Policies)
	ws.Status.ResourceChanges = nil
	setPhase(ws, magosv1.PhasePlanning, magosv1.ReasonPlanJobCreated,
		fmt.Sprintf("Planning commit %s (run %s)", short(run.Spec.Revision), ws.Status.CurrentRunID))
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	remove := map[string]string{}
	if v := ws.Annotations[keys.ReconcileRequest]; v != "" {
		remove[keys.ReconcileRequest] = v // this run satisfies it
	}
	if d := ws.Annotations[keys.DetectedRevision]; start.revision != "" && d != "" && !strings.EqualFold(d, start.revision) {
		// The hub's grant supersedes the agent's own detection: this run plans the granted
		// commit, and a detection left behind would start another run of it once it is
		// applied. The watcher detects the ref afresh on its next poll if it still differs.
		consumeDetection(ws, remove)
	}
	if err := r.removeAnnotations(ctx, ws, remove); err != nil {
		return step{}, err
	}
	if err := r.opts.Launcher.Prune(ctx, ws, ws.Status.CurrentRunID); err != nil {
		log.FromContext(ctx).Error(err, "pruning old runs")
	}
	run.Workspace = ws
	return r.launch(ctx, ws, sched, run)
}

// launch starts a run. A launch the user must fix (a missing ServiceAccount) fails the run;
// any other launch error is retried and reported as Degraded.
func (r *Reconciler) launch(ctx context.Context, ws *magosv1.Workspace, sched Schedule, run *execution.Run) (step, error) {
	err := r.opts.Launcher.Start(ctx, run)
	switch {
	case err == nil:
		return step{}, nil
	case variables.IsConfigError(err):
		from := ws.Status.Phase
		switch run.Spec.Operation {
		case runner.OperationDestroy:
			setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed, destroyFailedMessage(ws, err.Error()))
			return step{}, r.commit(ctx, ws, sched, from)
		case runner.OperationApply:
			return r.failRun(ctx, ws, sched, from, &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonApplyFailed, message: err.Error()})
		case runner.OperationVerify:
			r.verificationFailed(ws, "the check Job cannot start: "+err.Error())
			return step{}, r.commit(ctx, ws, sched, from)
		default:
			return r.failRun(ctx, ws, sched, from, &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonPlanFailed, message: err.Error()})
		}
	default:
		return step{}, transient(ReasonLaunchFailed, fmt.Errorf("starting the %s of run %s: %w", run.Spec.Operation, run.Spec.RunID, err))
	}
}

// startApply moves a successful plan to Applying and starts the apply, which runs exactly
// what was planned: the run is abandoned for a new one (ConfigurationChanged, which needs a
// new grant) when the spec, labels or projectRef changed since the run was minted, or when the
// apply's inputs (repository, commit, path, tfvarsPath, binary, version, variables) differ
// from the plan's (status.plannedInputs). The approval is consumed before the launch. plan,
// when not nil, is the plan run that just ended (recorded once the status says so).
func (r *Reconciler) startApply(ctx context.Context, ws *magosv1.Workspace, sched Schedule, plan *finishedRun) (step, error) {
	from := ws.Status.Phase
	if why, changed := changedSinceMint(ws); changed {
		return r.abandon(ctx, ws, sched, plan, why)
	}
	run, err := r.prepare(ctx, ws, runner.OperationApply, startedRevision(ws, grant.Of(ws)))
	if err != nil {
		if fail, ok := asRunFailure(err); ok {
			fail.phase, fail.reason = magosv1.PhaseFailed, magosv1.ReasonApplyFailed
			next, err := r.failRun(ctx, ws, sched, from, fail)
			if err == nil {
				plan.record(ws)
			}
			return next, err
		}
		return step{}, err
	}
	got, err := r.inputsDigest(ctx, run)
	if err != nil {
		return step{}, err
	}
	if got != ws.Status.PlannedInputs {
		return r.abandon(ctx, ws, sched, plan, resetKind{magosv1.ReasonConfigurationChanged, magosv1.TriggerConfiguration, fmt.Sprintf(
			"The inputs of run %s changed since its plan (inputs %s, planned %s: repository, path, tfvarsPath, binary, version or variables, or the key of planned inputs); not applying it, waiting for a grant to plan again",
			ws.Status.CurrentRunID, got, message.Or(ws.Status.PlannedInputs, "unknown"))})
	}
	verification, err := grantedVerification(ws)
	if err != nil {
		// The hub wrote a verification this agent cannot read (a newer hub?): applying without
		// it would skip the check the step asks for.
		r.recorder.Eventf(ws, nil, corev1.EventTypeWarning, ReasonVerificationInvalid, "Apply", "not applying run %s: %v", ws.Status.CurrentRunID, err)
		next, ferr := r.failRun(ctx, ws, sched, from, &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonApplyFailed,
			message: fmt.Sprintf("The grant's verification cannot be read, so nothing was applied: %v", err)})
		if ferr == nil {
			plan.record(ws)
		}
		return next, ferr
	}
	startVerification(ws, verification)
	msg := fmt.Sprintf("Applying commit %s (run %s)", short(ws.Status.CurrentRevision), ws.Status.CurrentRunID)
	if !ws.Spec.AutoApplies() && ws.Annotations[keys.Approved] != "true" {
		msg += ", approved on the hub by " + message.Or(ws.Annotations[keys.RequestedBy], "an unnamed user")
	}
	setPhase(ws, magosv1.PhaseApplying, magosv1.ReasonApplyJobCreated, msg)
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	plan.record(ws)
	if v, ok := ws.Annotations[keys.Approved]; ok {
		if err := r.removeAnnotations(ctx, ws, map[string]string{keys.Approved: v}); err != nil {
			return step{}, err
		}
	}
	run.Workspace = ws
	return r.launch(ctx, ws, sched, run)
}

// abandon gives up the current run before its apply (or before it plans again) and mints a
// new one; plan, when not nil, is the plan run that just ended.
func (r *Reconciler) abandon(ctx context.Context, ws *magosv1.Workspace, sched Schedule, plan *finishedRun, why resetKind) (step, error) {
	log.FromContext(ctx).Info("abandoning run", "runID", ws.Status.CurrentRunID, "why", why.message)
	next, err := r.reset(ctx, ws, sched, why)
	if err == nil {
		plan.record(ws)
	}
	return next, err
}

// failRun ends the current run without running it (a configuration error found before the
// launch) or after it failed.
func (r *Reconciler) failRun(ctx context.Context, ws *magosv1.Workspace, sched Schedule, from magosv1.Phase, fail *runFailure) (step, error) {
	ws.Status.PolicyViolations = fail.violations
	setPhase(ws, fail.phase, fail.reason, fail.message)
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	return step{}, r.endRun(ctx, ws)
}

// endRun removes what a finished run consumed: a manual grant.
func (r *Reconciler) endRun(ctx context.Context, ws *magosv1.Workspace) error {
	if r.manualGrant(ws) {
		remove := map[string]string{}
		grant.ConsumeUnfenced(remove)
		return r.removeAnnotations(ctx, ws, remove)
	}
	return nil
}

func opOf(phase magosv1.Phase) runner.Operation {
	if phase == magosv1.PhaseApplying {
		return runner.OperationApply
	}
	return runner.OperationPlan
}

// appliedMessage is the message of an Applied Workspace: the commit and run, and what the apply
// changed.
func appliedMessage(ws *magosv1.Workspace) string {
	msg := fmt.Sprintf("Applied commit %s (run %s)", short(ws.Status.CurrentRevision), ws.Status.CurrentRunID)
	if rc := ws.Status.ResourceChanges; rc != nil {
		msg += fmt.Sprintf(": %d added, %d changed, %d destroyed", rc.Add, rc.Change, rc.Destroy)
	}
	return msg
}

// finishedRun is a run that ended, recorded in the metrics once its end is written.
type finishedRun struct {
	op     runner.Operation
	status execution.Status
}

func (f *finishedRun) record(ws *magosv1.Workspace) {
	if f == nil {
		return
	}
	outcome := string(f.status.Result.Outcome)
	runsTotal.WithLabelValues(string(f.op), outcome).Inc()
	if d := f.status.Duration(); d > 0 {
		runDurationSeconds.WithLabelValues(string(f.op), outcome).Observe(d.Seconds())
	}
}

// observe follows the in-flight plan or apply of the current run. While deleting, a lost run
// is not started again and a successful plan is not applied.
func (r *Reconciler) observe(ctx context.Context, ws *magosv1.Workspace, sched Schedule, deleting bool) (step, error) {
	from := ws.Status.Phase
	if from == magosv1.PhaseVerifying {
		return r.observeVerify(ctx, ws, sched, deleting)
	}
	op := opOf(from)
	ref := execution.Ref{Namespace: ws.Namespace, Name: ws.Name, RunID: ws.Status.CurrentRunID, Operation: op}
	st, err := r.opts.Launcher.Status(ctx, ref)
	if err != nil {
		return step{}, transient(ReasonRunStatusUnavailable, err)
	}
	r.active.update(statusKey(ws), true)
	switch st.State {
	case execution.StateNotFound:
		if deleting {
			return step{lost: true}, nil
		}
		if !gitrepo.IsSHA(ws.Status.CurrentRevision) || ref.RunID == "" {
			// Never started by this agent (every run it starts has its commit recorded first):
			// an old or foreign status. Start over with a fresh run, which needs a grant.
			return r.reset(ctx, ws, sched, resetConfiguration(ws))
		}
		if op == runner.OperationApply {
			// The apply may have run, in part or whole, under a previous agent (or its Job was
			// deleted): it is never started twice. A retry plans again in a new run.
			log.FromContext(ctx).Info("apply not found, failing the run rather than applying twice", "runID", ref.RunID)
			return r.failRun(ctx, ws, sched, from, &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonApplyFailed, message: fmt.Sprintf(
				"The apply of run %s is gone (the agent restarted or its Job was deleted) and an apply never starts twice; a retry plans again in a new run",
				ref.RunID)})
		}
		if why, changed := changedSinceMint(ws); changed {
			// The plan was granted for what the run was minted for: never plan anything else.
			return r.reset(ctx, ws, sched, why)
		}
		log.FromContext(ctx).Info("plan not found, starting it", "runID", ref.RunID)
		run, err := r.prepare(ctx, ws, runner.OperationPlan, ws.Status.CurrentRevision)
		if err != nil {
			if fail, ok := asRunFailure(err); ok {
				return r.failRun(ctx, ws, sched, from, fail)
			}
			return step{}, err
		}
		if ws.Status.PlannedInputs != "" {
			got, err := r.inputsDigest(ctx, run)
			if err != nil {
				return step{}, err
			}
			if got != ws.Status.PlannedInputs {
				return r.reset(ctx, ws, sched, resetKind{magosv1.ReasonConfigurationChanged, magosv1.TriggerConfiguration, fmt.Sprintf(
					"The inputs of run %s changed since its plan was granted; waiting for a grant to plan again", ref.RunID)})
			}
		}
		return r.launch(ctx, ws, sched, run)
	case execution.StateRunning:
		if ws.Status.Reason == magosv1.ReasonPlanJobCreated || ws.Status.Reason == magosv1.ReasonApplyJobCreated {
			reason := magosv1.ReasonPlanning
			if op == runner.OperationApply {
				reason = magosv1.ReasonApplying
			}
			setPhase(ws, from, reason, ws.Status.Message)
			return step{}, r.commit(ctx, ws, sched, from)
		}
		return step{}, nil
	}
	done := &finishedRun{op: op, status: st}
	if err := r.saveOutput(ctx, ws, done); err != nil {
		return step{}, err
	}
	res := st.Result
	if op == runner.OperationPlan {
		switch res.Outcome {
		case runner.OutcomeSucceeded:
			ws.Status.ResourceChanges = planChanges(res)
			if why, changed := changedSinceMint(ws); changed && !deleting {
				// Planned for a spec, labels or projectRef that are no longer the Workspace's.
				return r.abandon(ctx, ws, sched, done, why)
			}
			if res.PlanSHA256 != "" {
				key, err := r.inputsKeys.Key(ctx)
				if err != nil {
					return step{}, transient(ReasonAPIError, err)
				}
				ws.Status.PlanDigest = plannedinputs.PlanDigest(key, ws.Namespace, ws.Name, res.PlanSHA256)
			}
			if !deleting && r.readyToApply(ctx, ws) {
				return r.startApply(ctx, ws, sched, done)
			}
			setPhase(ws, magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded, fmt.Sprintf(
				"Plan of commit %s: %d to add, %d to change, %d to destroy; %s",
				short(ws.Status.CurrentRevision), res.Add, res.Change, res.Destroy, r.waitingFor(ws)))
			if err := r.commit(ctx, ws, sched, from); err != nil {
				return step{}, err
			}
			done.record(ws)
			return step{again: deleting}, nil
		case runner.OutcomePolicyViolation:
			ws.Status.ResourceChanges = planChanges(res)
			fail := &runFailure{phase: magosv1.PhaseValidationFailed, reason: magosv1.ReasonPolicyViolation,
				message: fmt.Sprintf("Plan violated %d policy rule(s)", len(res.Violations)), violations: violations(res)}
			if res.Message != "" && len(res.Violations) == 0 {
				fail.message = res.Message
			}
			next, err := r.failRun(ctx, ws, sched, from, fail)
			if err == nil {
				done.record(ws)
			}
			next.again = deleting
			return next, err
		default:
			next, err := r.failRun(ctx, ws, sched, from, &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonPlanFailed,
				message: message.Or(res.Message, "the plan failed")})
			if err == nil {
				done.record(ws)
			}
			next.again = deleting
			return next, err
		}
	}
	if res.Outcome == runner.OutcomeStalePlan {
		// Nothing was applied: a new run plans again (under a new grant; with a Rollout's
		// planFirst the hub shows where the new plan differs from the one previewed).
		return r.abandon(ctx, ws, sched, done, resetKind{magosv1.ReasonPlanStale, magosv1.TriggerRetry, fmt.Sprintf(
			"The saved plan of run %s is stale: the state changed since it was planned; nothing was applied, planning again in a new run",
			ws.Status.CurrentRunID)})
	}
	if res.Outcome == runner.OutcomeSucceeded {
		recordApplied(ws, ws.Status.CurrentRevision)
		ws.Status.ObservedRevision = ws.Status.CurrentRevision
		applied, check := r.verifyApplied(ctx, ws, res)
		if applied {
			msg := appliedMessage(ws)
			if v := pendingVerification(ws); v != nil {
				msg += "; verification passed"
			}
			setPhase(ws, magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, msg)
		}
		if err := r.commit(ctx, ws, sched, from); err != nil {
			return step{}, err
		}
		done.record(ws)
		if check != nil {
			// The step's check Job runs; the Workspace is Applied once it passes (observeVerify).
			return r.launch(ctx, ws, sched, check)
		}
		remove := map[string]string{}
		if d := ws.Annotations[keys.DetectedRevision]; d != "" && d == ws.Status.ObservedRevision {
			consumeDetection(ws, remove)
		}
		if r.manualGrant(ws) {
			grant.ConsumeUnfenced(remove)
		}
		// again: a revision detected while the run ran (the ref moved past the commit it
		// ran, e.g. a granted one) makes the next run due now, not at the next event.
		return step{again: true}, r.removeAnnotations(ctx, ws, remove)
	}
	next, err := r.failRun(ctx, ws, sched, from, &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonApplyFailed,
		message: message.Or(res.Message, "the apply failed")})
	if err == nil {
		done.record(ws)
	}
	next.again = deleting
	return next, err
}

// ReasonAdopted is the reason of the Event on a Workspace that upstream Magos had applied,
// taken over without a run.
const ReasonAdopted = "Adopted"

// fromUpstream reports whether the Workspace's status was written by upstream single-cluster
// Magos, which never fills status.observedGeneration: Applied at a commit, with no
// observedGeneration and none of the run bookkeeping this agent writes (currentRunFor).
func fromUpstream(ws *magosv1.Workspace) bool {
	st := ws.Status
	return st.Phase == magosv1.PhaseApplied && st.ObservedRevision != "" && st.ObservedGeneration == 0 && st.CurrentRunFor == ""
}

// adopt takes over a Workspace that upstream Magos had applied (fromUpstream) without running
// it again: its spec as it is counts as applied at status.observedRevision (upstream resets a
// Workspace whose spec changed, so its Applied is for the spec it has), the run bookkeeping is
// filled in, and status.appliedRevisions starts from that commit. Its next run is the one its
// schedule, a new commit or a spec change brings, under its Project or Rollout as usual.
func (r *Reconciler) adopt(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	from := ws.Status.Phase
	ws.Status.ObservedGeneration = ws.Generation
	ws.Status.CurrentRunFor = runFor(ws)
	recordApplied(ws, ws.Status.ObservedRevision)
	setPhase(ws, magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, fmt.Sprintf(
		"Adopted from upstream Magos: applied at commit %s; no run was needed", short(ws.Status.ObservedRevision)))
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	r.recorder.Eventf(ws, nil, corev1.EventTypeNormal, ReasonAdopted, "Adopt",
		"Adopted from upstream Magos: applied at commit %s, kept as it is (no run)", ws.Status.ObservedRevision)
	log.FromContext(ctx).Info("adopted a Workspace upstream Magos had applied", "revision", ws.Status.ObservedRevision)
	return step{again: true}, nil
}

// recordApplied adds an applied commit to status.appliedRevisions: at the end, once (a commit
// applied again moves there), at most MaxAppliedRevisions. The list starts again when the
// Workspace's source, in its canonical spelling, is not the one it was kept for; a Workspace
// that has none yet (it applied before the list existed) starts it from the commit it applied
// last. The hub reads the order of commits from this list (decision.Workspace.Order).
func recordApplied(ws *magosv1.Workspace, commit string) {
	if commit == "" {
		return
	}
	src := gitrepo.CanonicalSource(ws.Spec.Source.RepoURL, ws.Spec.Source.TargetRevision)
	a := ws.Status.AppliedRevisions
	switch {
	case a == nil:
		a = &magosv1.AppliedRevisions{Source: src}
		if prev := ws.Status.ObservedRevision; prev != "" && prev != commit {
			a.Commits = []string{prev}
		}
	case a.Source != src:
		a = &magosv1.AppliedRevisions{Source: src}
	default:
		a = a.DeepCopy()
	}
	a.Commits = append(slices.DeleteFunc(a.Commits, func(c string) bool { return c == commit }), commit)
	if n := len(a.Commits); n > magosv1.MaxAppliedRevisions {
		a.Commits = a.Commits[n-magosv1.MaxAppliedRevisions:]
	}
	ws.Status.AppliedRevisions = a
}

func violations(res runner.Result) []magosv1.PolicyViolation {
	out := make([]magosv1.PolicyViolation, 0, len(res.Violations))
	for _, v := range res.Violations {
		out = append(out, magosv1.PolicyViolation{Policy: v.Policy, Message: v.Message})
	}
	return out
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// reportInvalidGrantedRevision emits one InvalidGrantedRevision Warning event per invalid
// granted-revision seen for a run.
func (r *Reconciler) reportInvalidGrantedRevision(ctx context.Context, ws *magosv1.Workspace, granted string) {
	mark := ws.Status.CurrentRunID + "/" + granted
	if prev, ok := r.invalidGrants.Load(statusKey(ws)); ok && prev == mark {
		return
	}
	r.invalidGrants.Store(statusKey(ws), mark)
	log.FromContext(ctx).Info("ignoring a grant whose granted-revision is not a commit SHA", "runID", ws.Status.CurrentRunID, "grantedRevision", granted)
	r.recorder.Eventf(ws, nil, corev1.EventTypeWarning, ReasonInvalidGrantedRevision, "Ignore",
		"Ignoring the grant for run %s: %s %q is not a commit SHA (40 hex digits)", ws.Status.CurrentRunID, keys.GrantedRevision, granted)
}

// reportUnfencedGrant emits one UnfencedGrant Warning event per run about a grant without
// granted-run on a hub-connected agent, which never runs it.
func (r *Reconciler) reportUnfencedGrant(ctx context.Context, ws *magosv1.Workspace) {
	mark := ws.Status.CurrentRunID
	if prev, ok := r.unfencedGrants.Load(statusKey(ws)); ok && prev == mark {
		return
	}
	r.unfencedGrants.Store(statusKey(ws), mark)
	log.FromContext(ctx).Info("ignoring a grant without granted-run: this agent is connected to a hub", "runID", ws.Status.CurrentRunID)
	r.recorder.Eventf(ws, nil, corev1.EventTypeWarning, ReasonUnfencedGrant, "Ignore",
		"Ignoring %s=true without %s: this cluster is managed by a hub, which is the only authority; grant run %s from the hub (its Rollout or Project) instead",
		keys.ExecutionAllowed, keys.GrantedRun, ws.Status.CurrentRunID)
}

// ReasonOtherPlanApproved is the reason of the Warning event about an apply grant bound to
// another plan than the current run's (the plan changed after its approval): it is not applied.
const ReasonOtherPlanApproved = "OtherPlanApproved"

// reportOtherPlan emits one OtherPlanApproved Warning event per run and granted plan.
func (r *Reconciler) reportOtherPlan(ctx context.Context, ws *magosv1.Workspace, granted string) {
	mark := ws.Status.CurrentRunID + "/" + granted + "/" + ws.Status.PlanDigest
	if prev, ok := r.otherPlans.Load(statusKey(ws)); ok && prev == mark {
		return
	}
	r.otherPlans.Store(statusKey(ws), mark)
	log.FromContext(ctx).Info("not applying: the grant approves another plan", "runID", ws.Status.CurrentRunID, "grantedPlan", granted, "planDigest", ws.Status.PlanDigest)
	r.recorder.Eventf(ws, nil, corev1.EventTypeWarning, ReasonOtherPlanApproved, "Ignore",
		"Not applying run %s: its grant approves plan %s, and this run's plan is %s", ws.Status.CurrentRunID, granted, message.Or(ws.Status.PlanDigest, "unknown"))
}

// spentOnEarlierRun reports whether run, which a grant names, is a run of this Workspace's
// history (status.runs) that ran: the grant is the one that run used, which the hub leaves in
// place after the run ended (it starts nothing, and the next grant replaces it). Ignoring it is
// routine, not worth a StaleGrant Event each run.
func spentOnEarlierRun(ws *magosv1.Workspace, run string) bool {
	for _, rec := range ws.Status.Runs {
		if rec.RunID == run {
			return len(rec.Operations) > 0
		}
	}
	return false
}

// reportStaleGrant emits one StaleGrant event per stale grant seen.
func (r *Reconciler) reportStaleGrant(ws *magosv1.Workspace, granted string) {
	mark := granted + "/" + ws.Status.CurrentRunID
	if prev, ok := r.staleGrants.Load(statusKey(ws)); ok && prev == mark {
		return
	}
	r.staleGrants.Store(statusKey(ws), mark)
	r.recorder.Eventf(ws, nil, corev1.EventTypeNormal, "StaleGrant", "Ignore",
		"Ignoring the grant for run %s: the current run is %s", granted, ws.Status.CurrentRunID)
}

// planChanges is what status.resourceChanges says of a plan's result: its counts, and how many of
// its changes revert drift.
func planChanges(res runner.Result) *magosv1.ResourceChanges {
	return &magosv1.ResourceChanges{Add: res.Add, Change: res.Change, Destroy: res.Destroy, DriftReverted: res.DriftReverts}
}
