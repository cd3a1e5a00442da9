package decision

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/changewindow"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/policy"
)

// Status messages. NoWorkspacesFound keeps upstream's wording.
const (
	msgParallel          = "Project is orchestrating workspaces in parallel"
	msgNoSteps           = "No steps defined in strategy"
	msgCompleted         = "All steps completed successfully"
	msgNoWorkspacesFound = "No workspaces found matching selector for step %s; halting to prevent skipping environments"
)

// member is a Workspace of the Project with what Decide derived about it.
type member struct {
	ws        *Workspace
	available bool
	// clockOffset is the member's cluster's Cluster.ClockOffset.
	clockOffset time.Duration
	done        bool
	// revision is the commit the Rollout rolls out for the member's source ("" if unknown).
	revision string
	// selected is true when some step matches the member.
	selected bool
	// granted is true when this decision wants the member to hold a grant for its run.
	granted bool
	// planOnly and plan shape the grant (Change.PlanOnly, Change.Plan): in a step that requires
	// approval, a plan only, or the apply of the approved plan.
	planOnly bool
	plan     string
	// verification is the current step's verification, encoded (Change.Verification): the
	// apply it grants is checked before the member counts as Applied.
	verification string
	// approved is set on a member whose plan waits for approval (Workspace.AwaitingApproval)
	// when the current step does not require one, or its approval covers the plan: it may
	// apply.
	approved bool
	// holdDestroy: the member's destroy waits for its step's approval (requireApproval).
	holdDestroy bool
	// driftHold: the member's step blocks on drift, and the grant it would get allows more than
	// a plan and is not held yet: it gets none (holdForDrift).
	driftHold bool
	// rollback: spec.rollback rolls the member's source back to revision.
	rollback bool
}

// failed reports whether the member's run failed in a way its step counts: any failure, but
// under a rollback only one at the commit rolled back to (a run that failed at the commit
// rolled back from is what the rollback replaces: it is retried, not counted).
func (m *member) failed() bool {
	return m.ws.Failed() && (!m.rollback || m.ws.CurrentRevision == m.revision)
}

// rolledBack reports whether a member of a source under spec.rollback is at the commit rolled
// back to: it applied that commit for its current spec, and has no run in flight or failed
// since. A run its agent minted because the ref has moved on (trigger revision), waiting for a
// grant, does not count: the Rollout holds the source at the commit rolled back to.
func (m *member) rolledBack() bool {
	w := m.ws
	if w.ObservedRevision != m.revision || w.ObservedGeneration != w.Generation || w.ReconcileRequested {
		return false
	}
	return w.Phase == magosv1.PhaseApplied || w.Grantable() && !w.DestroyPending() && w.Trigger == magosv1.TriggerRevision
}

// needsRetry reports whether the member, under a rollback, must be asked for a new run before
// the commit rolled back to can be granted to it: its current run ended (applied or failed) at
// another commit, and no retry of that run was asked yet.
func (m *member) needsRetry() bool {
	w := m.ws
	return m.rollback && !m.done && m.available && w.RunID != "" && w.info().Ended && !m.failed() &&
		w.RetryRequested != w.RunID
}

// DestroyDigest stands for the plan digest of a destroy in status.steps[].plans and in an
// approval's plans: a destroy under a step with requireApproval waits for an approval naming
// the Workspace, the commit it destroys and this digest, as a plan waits for one naming its own.
const DestroyDigest = "destroy"

// approvalDigest is what an approval must name for the member's run: its plan's digest, or
// DestroyDigest for a destroy.
func approvalDigest(w Workspace) string {
	if w.DestroyPending() {
		return DestroyDigest
	}
	return w.PlanDigest
}

// change is the grant the decision wants the member to hold.
func (m *member) change() Change {
	return Change{Key: m.ws.Key, Run: m.ws.RunID, Revision: m.revision, PlanOnly: m.planOnly, Plan: m.plan, Verification: m.verification}
}

// grantable reports whether the member waits for a grant: its run waits to plan (or destroy),
// or its plan waits for an approval it has; and its step's drift does not hold it.
func (m *member) grantable() bool {
	return (m.ws.Grantable() && !m.holdDestroy || m.approved) && !m.driftHold && !m.done
}

// Decide decides, for one Project, the status of its Rollout (or of the Project in parallel
// mode) and the grants and revocations to write. It reads the members, decides (decideParallel
// or decideRollout, then the progress deadline) and turns what it decided into writes, one way:
// what the writer needs to know is in the Decision. See the package documentation for the rules.
func Decide(in Input) Decision {
	ms := members(in)
	d := Decision{Members: make([]Key, len(ms))}
	for i := range ms {
		d.Members[i] = ms[i].ws.Key
		if i == 0 || ms[i-1].ws.Key.Cluster != ms[i].ws.Key.Cluster {
			d.Clusters = append(d.Clusters, ms[i].ws.Key.Cluster)
		}
		if ms[i].ws.ObservedRevision != "" {
			d.AppliedBefore = true
		}
	}

	if in.Rollout == nil {
		for i := range ms {
			ms[i].done = ms[i].available && ms[i].ws.AppliedForCurrent()
		}
		decideParallel(&d, ms)
		writes(&d, ms, false)
		return d
	}
	steps := in.Rollout.Spec.Strategy.Steps
	if len(steps) == 0 {
		d.Phase, d.Reason, d.Message = magosv1.PhaseReady, magosv1.ReasonNoSteps, msgNoSteps
		return d
	}
	d.Revisions = fleetRevisions(in.Rollout.Status.Revisions, ms, in.Now)
	rollback := rollbackCommits(in.Rollout.Spec.Rollback)
	for i := range ms {
		m := &ms[i]
		if !m.ws.DestroyPending() { // a destroy runs at the commit last applied, never the Rollout's
			m.revision = revisionOf(d.Revisions, m.ws.Source)
			if c, ok := rollback[m.ws.Source]; ok {
				m.revision, m.rollback = c, true
			}
		}
		if m.rollback {
			m.done = m.available && m.rolledBack()
		} else {
			m.done = m.available && m.ws.AppliedForCurrent() && (m.revision == "" || m.ws.ObservedRevision == m.revision)
		}
	}
	decideRollout(&d, in, ms)
	progress(&d, in.Rollout, in.Now)
	writes(&d, ms, true)
	return d
}

// progress decides, for a Rollout with spec.progressDeadline, when its current step last
// progressed and whether the deadline has passed. The step progressed now when it differs from
// the Rollout's recorded status: another current step, another count of matched, applied, running
// or failed Workspaces, or another spec generation. Only a step that progresses or waits (reasons
// LevelProgressing and WaitingForClusters) is held to the deadline; a paused, soaking, failed or
// completed Rollout progressed now.
func progress(d *Decision, ro *magosv1.Rollout, now time.Time) {
	deadline := ro.Spec.ProgressDeadline
	if deadline == nil || deadline.Duration <= 0 {
		return
	}
	d.LastProgress = now.Truncate(time.Second) // as the API stores it
	if d.Reason != magosv1.ReasonLevelProgressing && d.Reason != magosv1.ReasonWaitingForClusters {
		return
	}
	old := ro.Status
	if old.LastProgressTime != nil && !old.LastProgressTime.After(now) && old.ObservedGeneration == ro.Generation &&
		old.CurrentStep == d.CurrentStep && d.CurrentStep < len(d.Steps) {
		if j := slices.IndexFunc(old.Steps, func(st magosv1.StepStatus) bool { return st.Name == d.CurrentStepName }); j >= 0 {
			was, is := old.Steps[j], d.Steps[d.CurrentStep]
			if was.Matched == is.Matched && was.Applied == is.Applied && was.Running == is.Running && was.Failed == is.Failed {
				d.LastProgress = old.LastProgressTime.Time
			}
		}
	}
	ends := d.LastProgress.Add(deadline.Duration)
	if !now.Before(ends) {
		d.DeadlineExceeded = true
		return
	}
	if left := ends.Sub(now); d.RecheckAfter == 0 || left < d.RecheckAfter {
		d.RecheckAfter = left
	}
}

// members returns the Project's Workspaces, sorted by key.
func members(in Input) []member {
	ms := make([]member, 0, len(in.Workspaces))
	for i := range in.Workspaces {
		w := &in.Workspaces[i]
		if !w.MemberOf(in.Namespace, in.Project) {
			continue
		}
		c, ok := in.Clusters[w.Key.Cluster]
		if !ok || w.Leaving() {
			continue
		}
		ms = append(ms, member{ws: w, available: c.Available, clockOffset: c.ClockOffset})
	}
	slices.SortFunc(ms, func(a, b member) int { return compareKeys(a.ws.Key, b.ws.Key) })
	return ms
}

func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Cluster, b.Cluster); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// decideParallel marks every grantable member in an available cluster to be granted (Decide
// revokes nothing in parallel mode).
func decideParallel(d *Decision, ms []member) {
	d.Phase, d.Reason, d.Message = magosv1.PhaseReady, magosv1.ReasonDefaultParallel, msgParallel
	d.Total = int32(len(ms))
	for i := range ms {
		m := &ms[i]
		if m.done {
			d.Applied++
		}
		m.approved = m.ws.AwaitingApproval() // no Rollout: nothing to approve
		m.granted = m.available && m.grantable()
	}
}

// decideRollout decides a Rollout with steps, in stages that run one way: evaluate the steps
// against the members, count the Workspaces they select, halt on a spec that cannot be decided,
// find the current step and what holds it (gate), grant what it may (progressStep, or keepHeld
// while it waits for clusters to sync), then render the steps' status.
func decideRollout(d *Decision, in Input, ms []member) {
	steps := evaluateSteps(in, ms, d.Revisions)
	countSelected(d, ms)
	rollingBack := in.Rollout.Spec.Rollback != nil
	if rollingBack {
		// A rollback goes through the steps from the last to the first: decided on the steps
		// reversed, and the status put back in the spec's order below.
		slices.Reverse(steps)
	}
	if win, ok := validate(d, steps, in); ok {
		current := currentStep(steps, in.Now)
		switch gate(d, steps, current, ms, in, win) {
		case holding:
			keepHeld(&steps[current], ms, in.Rollout)
		case progressing:
			progressStep(d, steps, current, ms, in.Rollout, in.Clusters)
			if rollingBack {
				retries(d, &steps[current], ms)
			}
		}
	}
	renderSteps(d, steps, ms, in.Rollout)
	if rollingBack {
		inSpecOrder(d, in.Rollout)
	}
}

// retries asks the members of the current step s that need it (member.needsRetry) for a new
// run, in key order.
func retries(d *Decision, s *step, ms []member) {
	for _, i := range s.matched { // in key order
		if m := &ms[i]; m.needsRetry() {
			d.Retries = append(d.Retries, Change{Key: m.ws.Key, Run: m.ws.RunID})
		}
	}
}

// inSpecOrder puts the status of a Rollout decided on its steps reversed (a rollback) back in
// the spec's order, and says that it rolls back.
func inSpecOrder(d *Decision, ro *magosv1.Rollout) {
	slices.Reverse(d.Steps)
	if n := len(d.Steps); d.CurrentStep < n {
		d.CurrentStep = n - 1 - d.CurrentStep
	}
	to := rollbackSummary(ro.Spec.Rollback)
	switch d.Reason {
	case magosv1.ReasonLevelProgressing:
		d.Reason, d.Message = magosv1.ReasonRollingBack, fmt.Sprintf("Rolling back to %s, last step first: %s", to, d.Message)
	case magosv1.ReasonRolloutCompleted:
		d.Reason, d.Message = magosv1.ReasonRolledBack, fmt.Sprintf("Rolled back to %s in every step (requested by %s); remove spec.rollback to roll the refs out again", to, ro.Spec.Rollback.RequestedBy)
	default:
		d.Message = fmt.Sprintf("Rolling back to %s: %s", to, d.Message)
	}
}

// countSelected counts the distinct members the steps select, and those of them that are Done.
func countSelected(d *Decision, ms []member) {
	for i := range ms {
		if ms[i].selected {
			d.Total++
			if ms[i].done {
				d.Applied++
			}
		}
	}
}

// window is the state of a Rollout's change windows at the time of the decision: whether one is
// open, when it closes (zero: never) and, when none is, when the next one opens.
type window struct {
	open          bool
	closes, opens time.Time
}

// validate halts the Rollout Failed when it cannot be decided: a step's selector, a step's
// verification expression or the change windows do not parse, or a step is empty while the hub knows every cluster it may select in
// and all answer. Otherwise it returns the change windows' state at in.Now and ok.
func validate(d *Decision, steps []step, in Input) (win window, ok bool) {
	for i := range steps {
		if steps[i].invalid != "" {
			halt(d, steps, i, magosv1.PhaseFailed, magosv1.ReasonInvalidSelector, steps[i].invalid)
			steps[i].phase = magosv1.StepFailed
			return window{}, false
		}
	}
	for i := range steps {
		if v := steps[i].spec.Verification; v != nil && v.Expression != "" {
			if err := policy.CheckOutputsExpression(v.Expression); err != nil {
				halt(d, steps, i, magosv1.PhaseFailed, magosv1.ReasonInvalidVerification,
					fmt.Sprintf("Invalid verification expression in step %s: %v", steps[i].spec.Name, err))
				steps[i].phase = magosv1.StepFailed
				return window{}, false
			}
		}
	}
	windows, err := changewindow.Parse(in.Rollout.Spec.ChangeWindows)
	if err == nil {
		win.open, win.closes, win.opens, err = windows.At(in.Now)
	}
	if err != nil {
		halt(d, steps, 0, magosv1.PhaseFailed, magosv1.ReasonInvalidChangeWindow, "Invalid change windows: "+err.Error())
		return window{}, false
	}
	for i := range steps {
		if len(steps[i].matched) == 0 && len(steps[i].unknown) == 0 && len(steps[i].blind) == 0 {
			halt(d, steps, i, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound,
				fmt.Sprintf(msgNoWorkspacesFound, steps[i].spec.Name))
			steps[i].phase = magosv1.StepFailed
			return window{}, false
		}
	}
	return win, true
}

// currentStep returns the first step that is not done, or still soaking at now (len(steps)
// when every step is done).
func currentStep(steps []step, now time.Time) int {
	for i := range steps {
		if !steps[i].done() || steps[i].soaking(now) {
			return i
		}
	}
	return len(steps)
}

// verdict is what gate decides for the current step.
type verdict int

const (
	// halted: nothing is granted (grants whose runs are not in flight are revoked).
	halted verdict = iota
	// holding: nothing new is granted; the current step keeps the grants its members hold for
	// their runs (keepHeld).
	holding
	// progressing: the current step progresses (progressStep).
	progressing
)

// gate sets the Rollout's status for its current step: paused, completed, soaking, failed (the
// step's failures, or with planFirst a later step's preview), waiting for clusters to sync
// before anything new runs, waiting outside the change windows, or progressing. It returns
// whether the step is halted, holds its grants or progresses.
func gate(d *Decision, steps []step, current int, ms []member, in Input, win window) verdict {
	ro := in.Rollout
	if ro.Spec.Paused {
		msg := "Rollout is paused; all steps completed"
		if current < len(steps) {
			s := &steps[current]
			msg = fmt.Sprintf("Rollout is paused at step %s (%d/%d applied)", s.spec.Name, s.applied, len(s.matched))
		}
		if by := ro.Annotations[keys.PausedBy]; by != "" {
			msg += "; paused by " + by
		}
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonPaused, msg)
		if current < len(steps) {
			steps[current].phase = magosv1.StepWaiting
			if steps[current].tooManyFailures() {
				steps[current].phase = magosv1.StepFailed
			}
		}
		return halted
	}
	if current == len(steps) {
		halt(d, steps, current, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, completedMessage(steps))
		return halted
	}

	s := &steps[current]
	if s.soaking(in.Now) {
		// Done, and soaking: nothing of a later step runs before the soak ends.
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonSoaking,
			fmt.Sprintf("Step %s is soaking until %s (%s left; %d/%d applied)", s.spec.Name,
				s.soakEnds.UTC().Format(time.RFC3339), s.soakEnds.Sub(in.Now).Round(time.Second), s.applied, len(s.matched)))
		s.phase = magosv1.StepSoaking
		d.RecheckAfter = s.soakEnds.Sub(in.Now)
		return halted
	}
	if s.tooManyFailures() {
		halt(d, steps, current, magosv1.PhaseFailed, magosv1.ReasonStepFailed, failedMessage(s, ms))
		s.phase = magosv1.StepFailed
		return halted
	}
	if ro.Spec.PlanFirst {
		if f := previewFailed(steps, current); f >= 0 {
			// The preview shows a later step failing: applying the current one would leave the
			// fleet half rolled out.
			halt(d, steps, current, magosv1.PhaseFailed, magosv1.ReasonPreviewFailed, previewFailedMessage(&steps[f], ms))
			s.phase = magosv1.StepWaiting
			steps[f].phase = magosv1.StepFailed
			return halted
		}
	}
	if later := emptyUntilSynced(steps, current, in.Clusters); later >= 0 {
		// A later step matches no Workspace, and only the clusters' first sync since the Rollout
		// was created (seconds away) can tell whether it is empty. Upstream fails a Rollout with
		// an empty step before it grants anything, so that a typo in a later step never lets an
		// earlier one run: until then nothing new is granted (grants the current step holds for
		// its runs are kept). Then the Rollout fails with NoWorkspacesFound, or goes on.
		l := &steps[later]
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters,
			fmt.Sprintf("Waiting for %s (step %s matches no Workspace yet: nothing new runs until the clusters it may select in have synced)",
				strings.Join(waitingFor(l.blind, in.Clusters), "; "), l.spec.Name))
		d.WaitingFor = waitedFor(l.blind)
		s.phase = magosv1.StepWaiting
		return holding
	}
	if !win.open {
		// Outside every change window: nothing new runs (grants not used yet are withdrawn).
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonOutsideChangeWindow,
			fmt.Sprintf("Outside the change windows: step %s waits for the next window, at %s (%d/%d applied)",
				s.spec.Name, win.opens.Format(time.RFC3339), s.applied, len(s.matched)))
		s.phase = magosv1.StepWaiting
		d.NextWindowAt, d.RecheckAfter = win.opens, win.opens.Sub(in.Now)
		return halted
	}
	if !win.closes.IsZero() {
		d.RecheckAfter = win.closes.Sub(in.Now) // the window closes: withdraw unused grants then
	}
	halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing,
		fmt.Sprintf("Executing step %s (%d/%d applied)", s.spec.Name, s.applied, len(s.matched)))
	s.phase = magosv1.StepProgressing
	return progressing
}

// keepHeld prepares the grants of the current step s for its approval and keeps those its
// grantable members in available clusters hold for their runs; it grants nothing new.
func keepHeld(s *step, ms []member, ro *magosv1.Rollout) {
	approvals(s, ms, ro)
	for _, i := range s.matched {
		m := &ms[i]
		m.granted = m.available && m.grantable() && m.ws.Holds(m.change())
	}
}

// progressStep grants what the progressing current step may run: the applies its approval
// allows (with planFirst, only once the preview is complete; with drift block, none while
// members drifted), its members within its maxConcurrency and, with planFirst, the previews of
// the later steps. It then says what the step waits for, if anything, in this order: clusters,
// drift, the preview, or an approval.
func progressStep(d *Decision, steps []step, current int, ms []member, ro *magosv1.Rollout, clusters map[string]Cluster) {
	s := &steps[current]
	d.ApprovalVoided = approvals(s, ms, ro)
	var gap previewGap // complete without planFirst
	if ro.Spec.PlanFirst {
		if gap = unpreviewed(steps, current, ms); !gap.complete() {
			// The preview is not complete: plans wait, and no new apply is granted (an apply
			// grant already held is kept: its agent may be starting it).
			for _, i := range s.matched {
				if m := &ms[i]; m.approved && !m.ws.Holds(m.change()) {
					m.approved, m.plan = false, ""
				}
			}
		}
	}
	blocked := s.driftBlocks()
	if blocked {
		// Drifted members (drift: block): nothing new may apply; plans go on.
		holdForDrift(s, ms)
	}
	// The step waits for clusters whose Workspaces the hub does not know, for clusters without
	// any Workspace it matched that do not answer (an empty step is never decided on them), and
	// for the clusters of matched members that are not available (never Done).
	wait := slices.Clone(s.unknown)
	if len(s.matched) == 0 {
		wait = append(wait, s.blind...)
	}
	grantMatched(s, ms, nil, func(cluster string) { wait = append(wait, cluster) })
	if ro.Spec.PlanFirst {
		grantPreviews(steps, current, ms)
	}
	if waiting := waitingFor(wait, clusters); len(waiting) > 0 {
		d.Reason, d.WaitingFor = magosv1.ReasonWaitingForClusters, waitedFor(wait)
		d.Message = fmt.Sprintf("Waiting for %s (step %s: %d/%d applied)",
			strings.Join(waiting, "; "), s.spec.Name, s.applied, len(s.matched))
		s.phase = magosv1.StepWaiting
	} else if blocked {
		d.Reason, d.Message = magosv1.ReasonDriftDetected, driftMessage(s, ms, ro)
		s.phase = magosv1.StepDriftBlocked
	} else if !gap.complete() {
		d.Reason, d.Message = magosv1.ReasonPreviewing, previewing(steps, current, ms, gap)
		s.phase = magosv1.StepPreviewing
	} else if s.awaitingApproval() && s.rejection != nil {
		r := s.rejection
		d.Reason = magosv1.ReasonApprovalRejected
		d.Message = fmt.Sprintf("Step %s: its %d plan(s) were rejected by %s at %s: %s (a new plan asks for approval again; magosctl rollout approve %s --step %s approves these)",
			s.spec.Name, len(s.plans), r.RejectedBy, r.RejectedAt.UTC().Format(time.RFC3339), r.Reason, ro.Name, s.spec.Name)
		s.phase = magosv1.StepAwaitingApproval
	} else if s.awaitingApproval() {
		d.Reason = magosv1.ReasonAwaitingApproval
		d.Message = fmt.Sprintf("Step %s awaits approval of %d plan(s): magosctl rollout approve %s --step %s",
			s.spec.Name, len(s.plans), ro.Name, s.spec.Name)
		s.phase = magosv1.StepAwaitingApproval
	}
	if d.ApprovalVoided != "" {
		d.Message += "; " + d.ApprovalVoided
	}
}

// renderSteps renders the evaluated steps into the decision: their status (with planFirst,
// their previews) and the failures they tolerate up to the current step.
func renderSteps(d *Decision, steps []step, ms []member, ro *magosv1.Rollout) {
	if ro.Spec.PlanFirst {
		previews(steps, ms, ro)
	}
	d.Steps = stepStatuses(steps, ms)
	d.Tolerated = tolerated(steps, ms, d.CurrentStep)
}

// halt sets the Rollout's status and current step. It grants nothing: callers that progress
// mark the members to grant afterwards.
func halt(d *Decision, steps []step, current int, phase magosv1.Phase, reason, msg string) {
	d.Phase, d.Reason, d.Message = phase, reason, msg
	d.CurrentStep = current
	if current < len(steps) {
		d.CurrentStepName = steps[current].spec.Name
	}
}

// writes turns the members marked granted into grants (unless they already hold one for their
// run) and, when revoke is set, revokes every other grant that could still start a run: not
// those of members in flight, and not spent ones (Workspace.GrantSpent). A spent grant names a
// finished run or one the Workspace left; every run has a run ID of its own, minted once
// (runner.NewRunID), and the agent starts a run only under a grant naming it, so a spent grant
// starts nothing and stays until the next grant of the Workspace replaces it: removing it would
// cost a write per run for nothing.
func writes(d *Decision, ms []member, revoke bool) {
	for i := range ms {
		m := &ms[i]
		switch {
		case m.granted:
			if c := m.change(); !m.ws.Holds(c) {
				d.Grants = append(d.Grants, c)
			}
		case revoke && m.ws.HasGrant() && !m.ws.InFlight() && !m.ws.GrantSpent():
			d.Revokes = append(d.Revokes, Change{Key: m.ws.Key})
		}
	}
}
