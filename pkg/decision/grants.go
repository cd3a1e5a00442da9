package decision

import (
	"fmt"
	"slices"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
)

// approvals prepares the grants of the current step s for its approval. Without
// requireApproval a plan that waits for an approval (the step required one before) may apply.
// With it, a run waiting to plan is granted the plan only, and the plans waiting for approval
// (s.plans) apply only when the step's approval in spec.approvals covers each of them (same
// Workspace, commit and digest): then each is granted the apply of its own plan. A plan of
// another commit than the one rolled out is not approvable: its Workspace plans again. It
// returns why the step's approval no longer holds ("" when it holds or there is none).
func approvals(s *step, ms []member, ro *magosv1.Rollout) (voided string) {
	s.plans = s.plans[:0]
	verification := grant.EncodeVerification(s.spec.Verification)
	for _, i := range s.matched {
		m := &ms[i]
		m.holdDestroy = false
		if !m.ws.DestroyPending() {
			m.verification = verification // a destroy leaves nothing to verify
		}
		switch {
		case s.spec.RequireApproval && m.ws.DestroyPending() && m.ws.Grantable():
			// A destroy is a change like an apply: it waits for the step's approval, and keeps
			// its grant only while the approval names it.
			m.holdDestroy = true
			s.plans = append(s.plans, i)
		case !m.ws.AwaitingApproval():
			m.planOnly = (s.spec.RequireApproval || ro.Spec.PlanFirst) && m.ws.Grantable() && !m.ws.DestroyPending()
		case !s.spec.RequireApproval && ro.Spec.PlanFirst:
			// The plan previewed applies, bound to its digest; a plan of another commit than the
			// one rolled out does not: its Workspace plans again.
			if m.revision == "" || m.ws.CurrentRevision == m.revision {
				m.approved, m.plan = true, m.ws.PlanDigest
			}
		case !s.spec.RequireApproval:
			m.approved = true
		case m.revision == "" || m.ws.CurrentRevision == m.revision:
			s.plans = append(s.plans, i)
		}
	}
	if !s.spec.RequireApproval {
		return ""
	}
	a, r := stepApproval(ro, s.spec.Name), stepRejection(ro, s.spec.Name)
	if r != nil && (a == nil || !a.ApprovedAt.After(r.RejectedAt.Time)) {
		// A rejection newer than the step's approval (or as new) sets the approval aside; while it
		// names every plan waiting, it holds them back and the step says so.
		if rejects(r, s, ms) {
			s.rejection = r
		}
		return ""
	}
	if a == nil {
		return ""
	}
	approved := make(map[string]magosv1.ApprovedPlan, len(a.Plans))
	for _, p := range a.Plans {
		approved[p.Workspace] = p
	}
	if len(s.plans) == 0 {
		// Nothing waits: the approval is the step's while applies it granted are under way.
		for _, i := range s.matched {
			w := ms[i].ws
			if w.InFlight() && w.Grant.ApprovesPlan(w.PlanDigest) && w.grantedCurrentRun() &&
				approved[w.Key.String()] == (magosv1.ApprovedPlan{Workspace: w.Key.String(), Revision: w.CurrentRevision, Digest: w.PlanDigest}) {
				s.approval = a
			}
		}
		return ""
	}
	for _, i := range s.plans {
		w := ms[i].ws
		p, named := approved[w.Key.String()]
		var why string
		switch {
		case !named:
			why = fmt.Sprintf("it does not name the plan of %s", w.Key)
		case p.Digest != approvalDigest(*w):
			why = fmt.Sprintf("the plan of %s is now %s, it approved %s", w.Key, approvalDigest(*w), p.Digest)
		case p.Revision != w.CurrentRevision:
			why = fmt.Sprintf("the plan of %s is of commit %.12s, it approved commit %.12s", w.Key, w.CurrentRevision, p.Revision)
		}
		if why != "" {
			return fmt.Sprintf("the approval by %s at %s no longer holds: %s", a.ApprovedBy, a.ApprovedAt.UTC().Format(time.RFC3339), why)
		}
	}
	s.approval = a
	for _, i := range s.plans {
		m := &ms[i]
		m.approved, m.plan = true, m.ws.PlanDigest
		if m.holdDestroy {
			m.holdDestroy, m.plan = false, "" // a destroy has no plan to bind
		}
	}
	return ""
}

// stepApproval is the approval of step in spec.approvals (nil: none).
func stepApproval(ro *magosv1.Rollout, step string) *magosv1.StepApproval {
	if j := slices.IndexFunc(ro.Spec.Approvals, func(a magosv1.StepApproval) bool { return a.Step == step }); j >= 0 {
		return &ro.Spec.Approvals[j]
	}
	return nil
}

// stepRejection is the rejection of step in spec.rejections (nil: none).
func stepRejection(ro *magosv1.Rollout, step string) *magosv1.StepRejection {
	if j := slices.IndexFunc(ro.Spec.Rejections, func(r magosv1.StepRejection) bool { return r.Step == step }); j >= 0 {
		return &ro.Spec.Rejections[j]
	}
	return nil
}

// rejects reports whether rejection r names every plan step s waits with (same Workspace, commit
// and digest), and it waits with at least one: a plan that changed since (a new commit, a new
// spec) makes the step ask for approval again.
func rejects(r *magosv1.StepRejection, s *step, ms []member) bool {
	if len(s.plans) == 0 {
		return false
	}
	for _, i := range s.plans {
		w := ms[i].ws
		if !slices.Contains(r.Plans, magosv1.ApprovedPlan{Workspace: w.Key.String(), Revision: w.CurrentRevision, Digest: approvalDigest(*w)}) {
			return false
		}
	}
	return true
}

// grantMatched marks the grantable members of step s in available clusters to be granted, at
// most the step's maxConcurrency planning or applying at once: members in flight and members
// holding a grant for their current run take their places first, then members are granted in
// key order while places are free. Only members for which candidate returns true (every member
// when it is nil) are granted. unavailable is called with the cluster of every candidate that
// cannot be granted because its cluster is unavailable.
func grantMatched(s *step, ms []member, candidate func(i int) bool, unavailable func(cluster string)) {
	limited := s.maxConcurrency > 0
	free := s.maxConcurrency - s.running // places left, when limited
	if candidate == nil {
		candidate = func(int) bool { return true }
	}
	if limited {
		for _, i := range s.matched {
			if m := &ms[i]; candidate(i) && m.available && m.grantable() && m.ws.Holds(m.change()) {
				m.granted = true // kept: it may start any moment
				free--
			}
		}
	}
	for _, i := range s.matched {
		m := &ms[i]
		switch {
		case !candidate(i):
		case !m.available:
			unavailable(m.ws.Key.Cluster)
		case m.granted || !m.grantable():
		case !limited || free > 0:
			m.granted = true
			free--
		}
	}
}

// grantPreviews marks the members of the steps after current that wait to plan to be granted
// their plan only, each by the first of those steps that matches it, within that step's
// maxConcurrency. Members of the current step or an earlier one are the current step's to grant,
// and a destroy waits for its step. A member in an unavailable cluster is not granted: the
// preview waits for it (unpreviewed).
func grantPreviews(steps []step, current int, ms []member) {
	owner := make([]int, len(ms)) // the step that grants the member's preview; -1: none
	for i := range owner {
		owner[i] = -1
	}
	for i := 0; i <= current && i < len(steps); i++ {
		for _, mi := range steps[i].matched {
			owner[mi] = len(steps)
		}
	}
	for i := current + 1; i < len(steps); i++ {
		for _, mi := range steps[i].matched {
			if owner[mi] < 0 {
				owner[mi] = i
			}
		}
	}
	for i := current + 1; i < len(steps); i++ {
		candidate := func(mi int) bool {
			return owner[mi] == i && ms[mi].ws.Grantable() && !ms[mi].ws.DestroyPending()
		}
		for _, mi := range steps[i].matched {
			if candidate(mi) {
				ms[mi].planOnly = true
			}
		}
		grantMatched(&steps[i], ms, candidate, func(string) {})
	}
}
