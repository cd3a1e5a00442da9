package decision

import (
	"slices"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// maxPreviewListed is how many Workspaces the previews of all steps list together, in step
// order, so that the Rollout's status stays well within the API server's object size limit.
const maxPreviewListed = 4000

// plannedChange reports whether the member has a plan of the change that waits or applies:
// Planned, Applying or Verifying (its apply's checks run) with a plan digest, of the commit the Rollout rolls out for it (any commit
// while that is unknown).
func (m *member) plannedChange() bool {
	w := m.ws
	return w.PlanDigest != "" && (w.Phase == magosv1.PhasePlanned || w.Phase == magosv1.PhaseApplying || w.Phase == magosv1.PhaseVerifying) &&
		(m.revision == "" || w.CurrentRevision == m.revision)
}

// previewed reports whether the member's part of a fleet-wide preview is known: it is Done,
// failed on the commit the Rollout rolls out for it (any commit while that is unknown), has a
// plan of the change, or is deleted with its destroy waiting (a destroy is not previewed: it
// goes in step order like any run). A member that failed on an older commit has not previewed
// this one: the preview waits for its plan of it.
func (m *member) previewed() bool {
	failedOnChange := m.ws.Failed() && (m.revision == "" || m.ws.CurrentRevision == m.revision)
	return m.done || failedOnChange || m.ws.DestroyPending() || m.plannedChange()
}

// previewGap is what a fleet-wide preview still waits for: the members of the steps from the
// current one on that have not planned the change (in key order, once each), and the clusters
// those steps may select in whose Workspaces the hub does not know (sorted, once each), out of
// total members in those steps.
type previewGap struct {
	pending []int
	unknown []string
	total   int
}

// complete reports whether the preview waits for nothing: the current step may apply.
func (g previewGap) complete() bool { return len(g.pending) == 0 && len(g.unknown) == 0 }

// unpreviewed returns, for a Rollout with spec.planFirst, what the preview of the steps from
// current on still waits for.
func unpreviewed(steps []step, current int, ms []member) previewGap {
	var g previewGap
	seen := make([]bool, len(ms))
	for i := current; i < len(steps); i++ {
		for _, mi := range steps[i].matched {
			if seen[mi] {
				continue
			}
			seen[mi] = true
			g.total++
			if !ms[mi].previewed() {
				g.pending = append(g.pending, mi)
			}
		}
		g.unknown = append(g.unknown, steps[i].unknown...)
	}
	slices.Sort(g.pending)
	slices.Sort(g.unknown)
	g.unknown = slices.Compact(g.unknown)
	return g
}

// previewFailed returns the first step after current with more failed members than its
// maxFailures (their previews failed: the Rollout would stop there), or -1.
func previewFailed(steps []step, current int) int {
	for i := current + 1; i < len(steps); i++ {
		if steps[i].tooManyFailures() {
			return i
		}
	}
	return -1
}

// previews fills, for a Rollout with spec.planFirst, each step's preview: every member it
// matches with its plan of the change, in key order, at most maxPreviewListed across the steps
// (in step order; a step counts those left out in previewOmitted). Each entry
// carries, from the Rollout's status, the plan first previewed for the same commit when the
// Workspace planned again since and its plan differs from it (or it has none yet), and, unless
// the step's drift is ignore, the Workspace's drift at the commit it applied (driftSummary),
// accepted or not: apart from the plan of the change.
func previews(steps []step, ms []member, ro *magosv1.Rollout) {
	budget := maxPreviewListed
	for i := range steps {
		s := &steps[i]
		n := min(len(s.matched), budget)
		budget -= n
		s.previewOmitted = int32(len(s.matched) - n)
		var old map[string]*magosv1.PreviewPlan
		if j := slices.IndexFunc(ro.Status.Steps, func(st magosv1.StepStatus) bool { return st.Name == s.spec.Name }); j >= 0 {
			old = make(map[string]*magosv1.PreviewPlan, len(ro.Status.Steps[j].Preview))
			for k := range ro.Status.Steps[j].Preview {
				p := &ro.Status.Steps[j].Preview[k]
				old[p.Workspace] = p
			}
		}
		s.preview = make([]magosv1.PreviewPlan, 0, n)
		showDrift := s.spec.DriftPolicy() != magosv1.DriftIgnore
		for _, mi := range s.matched[:n] {
			m := &ms[mi]
			p := previewOf(m, old[m.ws.Key.String()])
			if showDrift {
				p.Drift = driftSummary(*m.ws)
			}
			s.preview = append(s.preview, p)
		}
	}
}

// previewOf is the member's entry in its step's preview; old is its entry in the Rollout's
// status (nil: none).
func previewOf(m *member, old *magosv1.PreviewPlan) magosv1.PreviewPlan {
	w := m.ws
	p := magosv1.PreviewPlan{Workspace: w.Key.String(), Run: w.RunID, Revision: m.revision, Result: magosv1.PreviewPending}
	plan := magosv1.PlanSummary{Digest: w.PlanDigest, Add: w.Changes.Add, Change: w.Changes.Change, Destroy: w.Changes.Destroy,
		DriftReverted: w.Changes.DriftReverted}
	switch {
	case m.done:
		p.Result, p.Revision, p.PlanSummary = magosv1.PreviewApplied, w.ObservedRevision, plan
	case w.Phase == magosv1.PhaseValidationFailed:
		p.Result, p.Revision, p.PlanSummary, p.PolicyViolations = magosv1.PreviewPolicyViolation, w.CurrentRevision, plan, w.PolicyViolations
	case w.Failed():
		p.Result, p.Revision = magosv1.PreviewFailed, w.CurrentRevision
	case m.plannedChange():
		p.Result, p.Revision, p.PlanSummary = magosv1.PreviewPlanned, w.CurrentRevision, plan
	}
	if old == nil || p.Revision == "" || old.Revision != p.Revision {
		return p // a new change: its preview starts afresh
	}
	switch {
	case old.Previewed != nil:
		if old.Previewed.Digest != p.Digest {
			p.Previewed = old.Previewed.DeepCopy()
		}
	case old.Digest != "" && old.Digest != p.Digest:
		first := old.PlanSummary
		p.Previewed = &first
	}
	return p
}

// driftSummary is the Workspace's drift at the commit it applied, as a preview shows it: the
// drift check's plan digest and counts (nil when it did not drift there).
func driftSummary(w Workspace) *magosv1.PlanSummary {
	if !w.Drifted {
		return nil
	}
	return &magosv1.PlanSummary{Digest: w.DriftDigest, Add: w.DriftChanges.Add, Change: w.DriftChanges.Change, Destroy: w.DriftChanges.Destroy}
}
