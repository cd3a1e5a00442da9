// Package decision decides which Workspaces of a Project may run now. Decide is a pure
// function: given a Rollout (or none, for a Project in parallel mode), the Workspaces the hub
// sees across the fleet and the health of their clusters, it returns the Rollout's status and
// the grants and revocations to write. Controllers only gather the inputs and write the output.
// Decide does no I/O, reads no clock and sorts everything it returns, so the same Input always
// gives the same Decision.
//
// # Members
//
// A Workspace is a member of the Project when its spec.projectRef names Input.Project and it
// lives in the namespace Input.Namespace (namespace sameness), in a cluster listed in
// Input.Clusters. Workspaces of other Projects are never granted nor revoked, whatever their
// labels; Workspaces of clusters that are not registered are ignored entirely (a removed
// cluster's Workspaces drop out of every step). Keys are expected to be unique.
//
// A deleted Workspace stays a member while the hub still has a say in it: while its destroy
// run waits for a grant (Deleting/DestroyPending with a run ID) and when its destroy failed
// (Deleting/DestroyFailed, which counts as Failed). Once it lets go (Deleting/Deleting) or its
// destroy runs (Deleting/Destroying) it is leaving and drops out of every step.
//
// # Applied, grantable, in flight
//
// A member is Done (counted Applied for a step) when its phase is Applied for its current
// generation (status.observedGeneration equals the generation), under a Rollout at the commit
// the Rollout rolls out for its source (below), no detected-revision differs from
// status.observedRevision, no reconcile-request is pending, and its cluster is available. A
// report from an older spec or commit, or from a silent cluster, never counts.
//
// # One commit per source, fleet-wide
//
// Under a Rollout, Decide keeps in Decision.Revisions, for every Source (repository and ref)
// its members track, the commit it rolls out, starting from the Rollout's status.revisions. A
// recorded commit is replaced only by a commit a member reports with a detection time later
// than the recorded one (an agent polled the ref and saw it there); a report without a time
// never replaces it. With no commit recorded, the latest detection wins, else the commit of a
// run in flight, else the commit most members applied. Every grant names the commit of the
// member's source, so a step never runs a commit the earlier steps did not apply, whichever
// region's agent polled first.
//
// # Complete views
//
// A step is Done only when every member it matches is Done and every cluster it may select in
// (all registered clusters, or those its clusterSelector matches) is Synced. A step that
// matches nothing is empty (NoWorkspacesFound) only when every such cluster is Synced,
// Available and synced after the Rollout's creation (Cluster.SyncedAt); otherwise it waits. A
// cluster listed in an unfinished step's previous status (same Rollout generation) that is no
// longer registered keeps the step waiting too: a removed cluster never shrinks a step.
//
// A member is grantable when it has a run ID and its phase is Pending, or it is
// Deleting/DestroyPending (its destroy waits for a grant). A grant always names that run; a
// destroy's grant names no commit (the agent destroys at the commit last applied), and a
// destroy is never Done. A member already granted for its run needs no write, so deciding
// again after the writes are done changes nothing (a replayed event is harmless). A member is
// in flight while it is Planning, Planned or Applying.
//
// # Parallel mode
//
// Without a Rollout (Input.Rollout nil) the Project runs its Workspaces in parallel: every
// grantable member in an available cluster is granted and nothing is revoked. The status is
// Ready/DefaultParallel.
//
// # Rollout
//
// In order of precedence:
//
//   - no steps: Ready/NoSteps, no grants and no revocations;
//   - a step whose selector or clusterSelector does not parse: Failed/InvalidSelector;
//   - change windows that cannot be read, or that never open: Failed/InvalidChangeWindow;
//   - a step that matches no member on a complete view: Failed/NoWorkspacesFound, with
//     CurrentStep at the first such step. Every step is checked up front, so a typo never
//     silently skips an environment;
//   - spec.paused: Reconciling/Paused;
//   - every member matched by a step is Done: Applied/RolloutCompleted, CurrentStep is the number
//     of steps;
//   - the current step is done and soaks (below): Reconciling/Soaking, with no grants, and
//     Decision.RecheckAfter set to when the soak ends;
//   - more members of the current step are Failed or ValidationFailed than its maxFailures
//     (default 0): Failed/StepFailed (stop on the first failure beyond the budget);
//   - with spec.changeWindows, outside every window: Reconciling/OutsideChangeWindow, with no
//     new grants (unused ones are revoked), Decision.NextWindowAt and RecheckAfter set to when the
//     next window opens; inside one, RecheckAfter is set to when it closes;
//   - otherwise the current step progresses: Reconciling/LevelProgressing, or
//     Reconciling/WaitingForClusters while members of the step that are not Done live in
//     unavailable clusters, or clusters it may select in are not Synced or were removed (the
//     Rollout then waits: it neither advances past them nor fails; the message names them), or
//     Reconciling/DriftDetected while the step's drift is block and members of it drifted
//     (below).
//
// The current step is the first step, in order, that is not done or still soaks. A step is done
// when each member it matches is Done or failed, with no more failed than its maxFailures (a
// number, or a percentage of the members it matches rounded down). It is
// recomputed from scratch every time, so a new Workspace, a spec change, a new revision or a
// reconcile-request in an earlier step makes that step current again (the rollout rewinds).
// Only a progressing current step gets grants: its grantable members in available clusters, at
// most maxConcurrency of its members in flight or holding a grant for their run at once (a
// number, or a percentage rounded down and at least 1); members are granted in key order.
// Grants already held are kept when the limit is lowered.
//
// # Soak
//
// A step with minSuccessTime soaks once it is done: the next step is granted nothing until the
// soak ends, that long after the step succeeded (StepStatus.SucceededAt, carried over from the
// Rollout's status while the step stays done and no commit its members roll out started after
// it). Any member no longer Done ends the soak (the step is current again, or fails beyond
// maxFailures); once it is done again, the soak starts over.
//
// # Progress deadline
//
// With spec.progressDeadline, Decision.LastProgress is when the current step last progressed:
// now, unless the Rollout's status records the same generation, current step and counts of
// matched, applied, running and failed Workspaces, in which case its lastProgressTime is kept.
// Decision.DeadlineExceeded is set when a step that progresses or waits for clusters has not
// progressed for the deadline; it changes no grant. A paused, soaking, failed or completed
// Rollout progressed now. RecheckAfter is set to when the deadline would pass.
//
// # Fleet-wide preview
//
// With spec.planFirst, every change is planned across the fleet before anything applies:
//
//   - the current step grants its runs their plan only (as requireApproval does), and each plan
//     waiting in it applies under a grant bound to its digest (granted-plan), once the step's
//     approval covers it when the step requires one. A plan of another commit than the one
//     rolled out never applies: its Workspace plans again;
//   - while the Rollout progresses, the members of later steps that wait to plan are granted
//     their plan only, each by the first later step that matches it and within that step's
//     maxConcurrency (members of the current step or an earlier one are the current step's; a
//     destroy waits for its step);
//   - the current step applies nothing new (Reconciling/Previewing, step phase Previewing) until
//     every member of it and of the later steps is previewed: Done, failed, deleted with its
//     destroy waiting, or holding a plan of the commit rolled out (Planned or Applying with a
//     digest), and the hub knows the Workspaces of every cluster those steps may select in. An
//     apply grant already held is kept;
//   - a later step with more failed members than its maxFailures stops the Rollout before the
//     current step progresses: Failed/PreviewFailed, naming them;
//   - each step's status lists its members' plans (StepStatus.Preview): Pending, Planned,
//     Applied, PolicyViolation or Failed, with the plan's digest and counts. An entry keeps,
//     from the Rollout's status, the plan first previewed for the same commit (Previewed) while
//     its Workspace plans again and when the new plan's digest differs.
//
// Precedence: PreviewFailed comes after StepFailed; WaitingForClusters (for the current step)
// before DriftDetected, DriftDetected before Previewing, and Previewing before AwaitingApproval.
//
// # Drift
//
// A member drifted when its last drift check found drift at the commit it applied
// (Workspace.Drifted: status.drift.DriftedAt(status.observedRevision); a check of an older
// commit is a stale view, no drift). The Rollout accepts a member's drift when
// spec.driftAcceptances names the member with the digest of that check's plan
// (Workspace.DriftAccepted); an acceptance of another digest (a later check found other drift)
// accepts nothing. A step's drifted members are those it holds that drifted, not accepted,
// unless its drift is ignore: StepStatus.Drifted lists them (at most 100, in key order) for
// warn and block.
//
// While the current step's drift is block and it has drifted members, it grants none of its
// members a run that may apply (a full grant, the apply of a plan, a destroy); its plan-only
// grants (requireApproval, planFirst and the later steps' previews) still go, grants its
// members hold for their runs are kept and runs in flight go on. The Rollout is
// Reconciling/DriftDetected, naming the drifted members, and the step DriftBlocked. warn and
// ignore hold nothing. With planFirst, each preview entry shows its Workspace's drift at the
// commit it applied (PreviewPlan.Drift), accepted or not, unless its step's drift is ignore.
//
// # Tolerated failures
//
// Decision.Tolerated names, per step up to the current one, the failed members the step
// tolerates. A completed Rollout with tolerated failures says how many in its message.
// Destroys are grantable members like any other, so they go in step order, halt with the
// Rollout and wait while it is paused; in parallel mode they are granted at once.
// A Workspace matched by several steps counts in each of them; since only the single current
// step is ever granted, it never flaps between a grant and a revocation.
//
// Under a Rollout (except with no steps), every member carrying a grant (execution-allowed or
// granted-run) that is not granted by this decision is revoked, except members in flight: a
// run that already started keeps its grant and finishes (as a pause lets granted runs finish),
// wherever the rollout stands. So grants left by parallel mode on later steps are revoked when
// a Rollout takes over, members matched by no step are revoked, a halted or paused rollout
// revokes the grants of members that have not started, and spent grants on Applied or Failed
// members are cleaned up.
package decision
