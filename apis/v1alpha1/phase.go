package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PhaseInfo is what a status phase (and, for Deleting, its reason) means. It is the one
// definition of these facts: the agent, the hub's decision and controllers, the CLI and the
// dashboard read them here rather than compare phases themselves. Each field names the kinds
// it speaks of; a phase a kind never writes tells that kind nothing.
//
// +kubebuilder:object:generate=false
type PhaseInfo struct {
	// Running (Workspace): a run executes now: Planning, Applying or Verifying (its apply's
	// checks).
	Running bool
	// InFlight (Workspace): a run started and has not ended: Planning, Planned (a plan waiting
	// for approval or for the grant of its apply), Applying or Verifying.
	InFlight bool
	// Settled (Workspace): the Workspace waits for the schedule, a new revision, a spec change or
	// a request before a new run: Applied, Failed, ValidationFailed or Planned.
	Settled bool
	// Ended (Workspace): the run ended and can start nothing more: Applied, Failed or
	// ValidationFailed (Settled but for Planned, whose apply may still run).
	Ended bool
	// Succeeded (every kind): the work ended well: Applied (a Workspace's apply succeeded, a
	// Rollout completed).
	Succeeded bool
	// RunFailed (Workspace): the last plan or apply run failed: Failed or ValidationFailed.
	RunFailed bool
	// Failed (every kind): the object failed and waits for a person, a spec change or a new
	// revision: Failed (a Rollout, a Project, a Workspace's run), ValidationFailed (a Workspace's
	// plan broke a policy), or Deleting/DestroyFailed (a deleted Workspace's destroy failed).
	Failed bool
	// AwaitsGrant (Workspace): a run it minted (when it has a run ID) waits for the hub's grant:
	// Pending, or Deleting/DestroyPending (a destroy on deletion).
	AwaitsGrant bool
	// Progressing (Rollout): the hub works through its steps, or holds them (paused, soaking,
	// waiting for clusters or a change window), and has neither completed nor failed:
	// Reconciling.
	Progressing bool
	// Deleting (every kind): the object is being deleted: phase Deleting, whatever the reason.
	Deleting bool
	// Leaving (Workspace): deleted and needing nothing more from the hub: Deleting with any
	// reason but DestroyPending (its destroy waits for a grant) and DestroyFailed (it waits for a
	// person). A Workspace in Deleting/DestroyPending without a run ID leaves too; that depends
	// on more than the status, so the decision adds it (pkg/decision Workspace.Leaving).
	Leaving bool
	// Ready (every kind) is the status of the Ready condition that summarises the phase: True
	// when the object settled well (Applied; Planned: a Workspace's plan succeeded; Ready: a
	// Rollout without steps, a Project), False when it failed or is being deleted (it will not
	// become ready again), Unknown while work goes on or waits (and for a phase not known).
	Ready metav1.ConditionStatus
}

// phaseInfos is the table: one row per phase. Reasons refine it in reasonInfos.
var phaseInfos = map[Phase]PhaseInfo{
	PhasePending:          {AwaitsGrant: true, Ready: metav1.ConditionUnknown},
	PhaseReconciling:      {Progressing: true, Ready: metav1.ConditionUnknown},
	PhaseReady:            {Ready: metav1.ConditionTrue},
	PhaseIdle:             {Ready: metav1.ConditionUnknown},
	PhasePlanning:         {Running: true, InFlight: true, Ready: metav1.ConditionUnknown},
	PhasePlanned:          {InFlight: true, Settled: true, Ready: metav1.ConditionTrue},
	PhaseApplying:         {Running: true, InFlight: true, Ready: metav1.ConditionUnknown},
	PhaseVerifying:        {Running: true, InFlight: true, Ready: metav1.ConditionUnknown},
	PhaseApplied:          {Settled: true, Ended: true, Succeeded: true, Ready: metav1.ConditionTrue},
	PhaseFailed:           {Settled: true, Ended: true, RunFailed: true, Failed: true, Ready: metav1.ConditionFalse},
	PhaseValidationFailed: {Settled: true, Ended: true, RunFailed: true, Failed: true, Ready: metav1.ConditionFalse},
	PhaseDeleting:         {Deleting: true, Leaving: true, Ready: metav1.ConditionFalse},
}

// phaseReason is a phase with a reason.
type phaseReason struct {
	phase  Phase
	reason string
}

// reasonInfos are the rows a reason changes: only a deleted Workspace's reason says something
// its phase does not. A reason without a row means what its phase means.
var reasonInfos = map[phaseReason]PhaseInfo{
	{PhaseDeleting, ReasonDestroyPending}: {Deleting: true, AwaitsGrant: true, Ready: metav1.ConditionFalse},
	{PhaseDeleting, ReasonDestroyFailed}:  {Deleting: true, Failed: true, Ready: metav1.ConditionFalse},
}

// phaseRow is a phase's row of phaseInfos with the rows of reasonInfos that refine it (nil for
// a phase no reason refines): the index InfoOf reads.
type phaseRow struct {
	info     PhaseInfo
	byReason map[string]PhaseInfo
}

// phaseIndex is phaseInfos and reasonInfos indexed by phase, built once from them: InfoOf runs
// on the hub's hot path (several times per Workspace per decision), where looking every phase
// and reason pair up in reasonInfos cost a quarter of a decision.
var phaseIndex = func() map[Phase]phaseRow {
	index := make(map[Phase]phaseRow, len(phaseInfos))
	for p, info := range phaseInfos {
		index[p] = phaseRow{info: info}
	}
	for k, info := range reasonInfos {
		row := index[k.phase]
		if row.byReason == nil {
			row.byReason = map[string]PhaseInfo{}
		}
		row.byReason[k.reason] = info
		index[k.phase] = row
	}
	return index
}()

// InfoOf is what phase with reason means. A phase not in the table (the empty phase of an object
// no controller reported yet) means nothing: every flag false, Ready Unknown.
func InfoOf(phase Phase, reason string) PhaseInfo {
	row, ok := phaseIndex[phase]
	if !ok {
		return PhaseInfo{Ready: metav1.ConditionUnknown}
	}
	if info, refined := row.byReason[reason]; refined {
		return info
	}
	return row.info
}

// Info is what the phase means whatever its reason (InfoOf with no reason). Use InfoOf where a
// Workspace may be Deleting: its reason tells a destroy that waits or failed from one that
// leaves.
func (p Phase) Info() PhaseInfo { return InfoOf(p, "") }

// Running reports a Workspace phase whose run is executing now: Planning or Applying.
func (p Phase) Running() bool { return p.Info().Running }

// InFlight reports a Workspace phase whose run started and has not ended: Planning, Planned
// (a plan waiting for approval) or Applying.
func (p Phase) InFlight() bool { return p.Info().InFlight }

// RunFailed reports a Workspace phase whose last run failed: Failed or ValidationFailed.
func (p Phase) RunFailed() bool { return p.Info().RunFailed }

// Settled reports a Workspace phase that waits for the schedule, a new revision, a spec change
// or a request before a new run: Applied, Failed, ValidationFailed, or Planned.
func (p Phase) Settled() bool { return p.Info().Settled }

// ReadyCondition is the Ready condition that summarises a status (PhaseInfo.Ready), on every
// kind: the Workspace's phase as its agent writes it, and a Rollout's or Project's as the hub
// writes it. An empty reason is replaced by the condition's status (a condition needs one).
func ReadyCondition(phase Phase, reason, message string, generation int64) metav1.Condition {
	status := InfoOf(phase, reason).Ready
	if reason == "" {
		reason = string(status)
	}
	return metav1.Condition{
		Type: ConditionReady, Status: status, Reason: reason, Message: message,
		ObservedGeneration: generation,
	}
}
