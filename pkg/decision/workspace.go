package decision

import (
	"slices"
	"time"

	"k8s.io/utils/ptr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// FromWorkspace converts a Workspace as the hub sees it in the named cluster (a mirror in an
// agent cluster's hub namespace, or a spoke Workspace read directly) into what Decide needs.
// The key and generation are the origin's (mirror.OriginOf). The Workspace's labels are shared,
// not copied, unless it is a mirror (then the mirror bookkeeping labels are removed from a copy).
func FromWorkspace(cluster string, ws *magosv1.Workspace) Workspace {
	o := mirror.OriginOf(cluster, ws)
	ann := ws.Annotations
	src := SourceOf(ws.Spec.Source.RepoURL, ws.Spec.Source.TargetRevision)
	w := Workspace{
		Key:                Key{Cluster: o.Cluster, Namespace: o.Namespace, Name: o.Name},
		Labels:             ownLabels(ws),
		ProjectRef:         ws.Spec.ProjectRef.Name,
		Phase:              ws.Status.Phase,
		Reason:             ws.Status.Reason,
		Generation:         o.Generation,
		ObservedGeneration: ws.Status.ObservedGeneration,
		RunID:              ws.Status.CurrentRunID,
		Source:             src,
		Spelling:           spelling(ws.Spec.Source),
		Order:              orderOf(ws, src),
		ObservedRevision:   ws.Status.ObservedRevision,
		CurrentRevision:    ws.Status.CurrentRevision,
		DetectedRevision:   ann[keys.DetectedRevision],
		DetectedAt:         parseTime(ann[keys.DetectedAt]),
		ReconcileRequested: ann[keys.ReconcileRequest] != "",
		Grant:              grant.Parse(ann),
		PlanDigest:         ws.Status.PlanDigest,
		PlanOnly:           ws.Status.PlanOnly,
		Changes:            ptr.Deref(ws.Status.ResourceChanges, magosv1.ResourceChanges{}),
		PolicyViolations:   int32(len(ws.Status.PolicyViolations)),
	}
	w.Trigger, w.RetryRequested, w.RequestedBy, w.Applied = ws.Status.CurrentRunTrigger, ann[keys.RetryRun], ann[keys.RequestedBy], appliedOf(ws, src)
	if d := ws.Status.Drift; d.DriftedAt(ws.Status.ObservedRevision) {
		w.Drifted, w.DriftDigest = true, d.PlanDigest
		w.DriftChanges = ptr.Deref(d.ResourceChanges, magosv1.ResourceChanges{})
	}
	return w
}

// spelling is how a Workspace writes its source: "<repoURL>@<targetRevision>" ("" without a
// repository).
func spelling(src magosv1.Source) string {
	if src.RepoURL == "" {
		return ""
	}
	return src.RepoURL + "@" + src.TargetRevision
}

// orderOf is the order in which the Workspace saw the commits of its source src (its canonical
// Source; Workspace.Order): the commits it applied from that source, oldest first, then a
// detected revision other than the one last applied (the agent saw the ref there after its last
// run started: a detection older than that is consumed when the run starts). A commit appears
// once, at its last place.
func orderOf(ws *magosv1.Workspace, src Source) []string {
	out := slices.Clone(appliedOf(ws, src))
	if d := ws.Annotations[keys.DetectedRevision]; d != "" && d != ws.Status.ObservedRevision {
		out = append(slices.DeleteFunc(out, func(c string) bool { return c == d }), d)
	}
	return out
}

// appliedOf is the commits of its source src (canonical) the Workspace applied, oldest first:
// status.appliedRevisions when it is kept for that source, else none.
func appliedOf(ws *magosv1.Workspace, src Source) []string {
	if a := ws.Status.AppliedRevisions; a != nil && src.RepoURL != "" && a.Source == gitrepo.SourceKey(src.RepoURL, src.Ref) {
		return a.Commits
	}
	return nil
}

// parseTime parses an RFC 3339 time; zero when absent or unparsable.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func ownLabels(ws *magosv1.Workspace) map[string]string {
	if !mirror.IsMirror(ws) {
		return ws.Labels
	}
	out := make(map[string]string, len(ws.Labels))
	for k, v := range ws.Labels {
		out[k] = v
	}
	// The mirror's bookkeeping labels are not the Workspace's own: dropped, so that a selector
	// matches the same Workspaces in agent and direct clusters.
	for _, k := range mirror.LabelKeys {
		delete(out, k)
	}
	return out
}

// AppliedForCurrent reports whether the Workspace is Applied for its current spec and
// revision: phase Applied, observedGeneration equal to the generation, no detected-revision
// other than the observed one and no pending reconcile-request. Decide also requires the
// Workspace's cluster to be available before it counts the Workspace as Done.
func (w Workspace) AppliedForCurrent() bool {
	return w.info().Succeeded &&
		w.ObservedGeneration == w.Generation &&
		(w.DetectedRevision == "" || w.DetectedRevision == w.ObservedRevision) &&
		!w.ReconcileRequested
}

// MemberOf reports whether the Workspace belongs to the hub Project namespace/project: its
// spec.projectRef names the Project and it lives in the namespace of the same name (namespace
// sameness). This is the one definition of Project membership.
func (w Workspace) MemberOf(namespace, project string) bool {
	return w.ProjectRef == project && w.Key.Namespace == namespace
}

// info is what the Workspace's phase and reason mean (magosv1.InfoOf): every classification of
// its status below reads it.
func (w Workspace) info() magosv1.PhaseInfo { return magosv1.InfoOf(w.Phase, w.Reason) }

// Grantable reports whether the Workspace waits for a grant of a run it minted: phase Pending
// with a run ID, or a deleted Workspace whose destroy waits for the hub (Deleting/DestroyPending
// with a run ID) (PhaseInfo.AwaitsGrant).
func (w Workspace) Grantable() bool {
	return w.RunID != "" && w.info().AwaitsGrant
}

// DestroyPending reports whether the Workspace is deleted and its destroy waits for a grant
// (Deleting/DestroyPending). Such a Workspace is still a member of its steps: its destroy goes
// in step order.
func (w Workspace) DestroyPending() bool {
	i := w.info()
	return i.Deleting && i.AwaitsGrant
}

// InFlight reports whether a run of the Workspace has started: Planning, Planned or Applying
// (PhaseInfo.InFlight).
func (w Workspace) InFlight() bool {
	return w.info().InFlight
}

// Failed reports whether the Workspace's last run failed: Failed or ValidationFailed, or its
// destroy on deletion failed (Deleting/DestroyFailed: it waits for a person, so its step halts
// rather than wait forever) (PhaseInfo.Failed).
func (w Workspace) Failed() bool {
	return w.info().Failed
}

// Leaving reports whether the Workspace is being deleted and needs nothing more from the hub:
// it lets go (Deleting/Deleting) or its destroy runs (Deleting/Destroying). It is on its way out
// of the fleet, so it is no member of any step. A destroy that waits for its grant
// (DestroyPending, with a run ID) or that failed (DestroyFailed) keeps the Workspace a member
// (PhaseInfo.Leaving, and a DestroyPending without a run ID: no destroy to grant).
func (w Workspace) Leaving() bool {
	return w.info().Leaving || w.DestroyPending() && w.RunID == ""
}

// HasGrant reports whether the Workspace carries any decision (execution-allowed or
// granted-run), which a revocation would remove.
func (w Workspace) HasGrant() bool { return w.Grant.Exists() }

// GrantSpent reports whether the Workspace's grant can start nothing more: it names a run other
// than the current one (the agent ignores it), or the current run has finished (Applied, Failed
// or ValidationFailed). Removing such a grant is housekeeping, not a halt.
func (w Workspace) GrantSpent() bool {
	if w.Grant.Run == "" {
		return false
	}
	return w.Grant.NamesOtherRun(w.RunID) || w.Phase == magosv1.PhaseApplied || w.Phase.RunFailed()
}

// Holds reports whether the Workspace carries exactly the grant c for its current run (same
// commit, same plan-only flag, same plan, same verification), so granting c again would change
// nothing.
func (w Workspace) Holds(c Change) bool {
	return w.grantedCurrentRun() && w.Grant.SameTerms(c.Grant(""))
}

// Grant is the grant the change c writes when by (keys.GrantedByRollout or
// keys.GrantedByProject) decided it: the one definition of a change's terms, which the hub's
// writer writes and Holds compares (a term left out of one of them wrote the same grant again at
// every decision).
func (c Change) Grant(by string) Grant {
	return Grant{Allowed: true, Run: c.Run, By: by, Revision: c.Revision, PlanOnly: c.PlanOnly, Plan: c.Plan, Verification: c.Verification}
}

// grantedCurrentRun reports whether the Workspace carries a grant (of any kind) for its current
// run.
func (w Workspace) grantedCurrentRun() bool {
	return w.Grant.AllowsRun(w.RunID)
}

// AwaitingApproval reports whether the Workspace's plan waits for an approval: its run was
// granted its plan only (status.planOnly), it is Planned with a plan digest, and it holds no
// grant the agent would apply it under (one for its run, allowing the apply, bound to no plan
// or to this one). Such a run is not counted as planning or applying.
func (w Workspace) AwaitingApproval() bool {
	applies := w.Grant.AllowsApply(w.RunID, w.PlanDigest)
	return w.Phase == magosv1.PhasePlanned && w.RunID != "" && w.PlanDigest != "" && w.PlanOnly && !applies
}

// Reported is the commit the Workspace reports for its source, and when its agent saw the
// ref there (zero when the report carries no time): a detected revision it has not applied
// yet; else, while a run is in flight, the commit of that run; else the commit last applied.
func (w Workspace) Reported() (commit string, seen time.Time) {
	switch {
	case w.DetectedRevision != "" && w.DetectedRevision != w.ObservedRevision:
		return w.DetectedRevision, w.DetectedAt
	case w.InFlight() && w.CurrentRevision != "":
		return w.CurrentRevision, time.Time{}
	default:
		return w.ObservedRevision, time.Time{}
	}
}

// HasWrites reports whether the decision has grants, revocations or retry requests to write.
func (d Decision) HasWrites() bool {
	return len(d.Grants) > 0 || len(d.Revokes) > 0 || len(d.Retries) > 0
}
