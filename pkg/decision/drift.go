package decision

import (
	"fmt"
	"slices"
	"strings"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// maxDriftedListed is how many drifted Workspaces a step's status lists (StepStatus.Drifted).
const maxDriftedListed = 100

// DriftAccepted reports whether the Rollout's spec.driftAcceptances accept the Workspace's
// drift: an acceptance names the Workspace (cluster/namespace/name) with the digest of the plan
// its last drift check made (DriftDigest). An acceptance of another digest (a later check found
// other drift) accepts nothing.
func (w Workspace) DriftAccepted(acceptances []magosv1.DriftAcceptance) bool {
	key := w.Key.String()
	return w.Drifted && w.DriftDigest != "" && slices.ContainsFunc(acceptances, func(a magosv1.DriftAcceptance) bool {
		return a.Workspace == key && a.Digest == w.DriftDigest
	})
}

// driftOf finds, for every step whose drift is not ignore, the members it holds that drifted at
// the commit they applied (Workspace.Drifted) and whose drift the Rollout does not accept
// (Workspace.DriftAccepted), in key order: the step's drifted members.
func driftOf(steps []step, ms []member, ro *magosv1.Rollout) {
	for i := range steps {
		s := &steps[i]
		s.drifted = nil
		if s.spec.DriftPolicy() == magosv1.DriftIgnore {
			continue
		}
		for _, mi := range s.matched {
			if w := ms[mi].ws; w.Drifted && !w.DriftAccepted(ro.Spec.DriftAcceptances) {
				s.drifted = append(s.drifted, mi)
			}
		}
	}
}

// driftBlocks reports whether the step's drift is block and members of it drifted: while it is
// current, it grants none of its members a run that may apply (a full grant, the apply of a
// plan, a destroy), only the plans it grants plan-only (requireApproval, planFirst); grants its
// members already hold for their runs are kept, and runs in flight go on.
func (s *step) driftBlocks() bool {
	return s.spec.DriftPolicy() == magosv1.DriftBlock && len(s.drifted) > 0
}

// holdForDrift marks, in the current step s that blocks on drift, every member whose grant
// would allow more than a plan and that does not hold it yet: it is granted nothing
// (member.driftHold). Called once approvals shaped the members' grants.
func holdForDrift(s *step, ms []member) {
	for _, i := range s.matched {
		m := &ms[i]
		m.driftHold = !m.planOnly && !m.ws.Holds(m.change())
	}
}

// driftedNames renders the step's drifted members for its status, at most maxDriftedListed.
func driftedNames(s *step, ms []member) []string {
	if len(s.drifted) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(s.drifted), maxDriftedListed))
	for _, mi := range s.drifted[:min(len(s.drifted), maxDriftedListed)] {
		out = append(out, ms[mi].ws.Key.String())
	}
	return out
}

// driftMessage is the DriftDetected message of a step that blocks on drift: it names its
// drifted members (at most maxListed, then how many more) and how to go on.
func driftMessage(s *step, ms []member, ro *magosv1.Rollout) string {
	names := make([]string, 0, maxListed+1)
	for _, mi := range s.drifted[:min(len(s.drifted), maxListed)] {
		names = append(names, ms[mi].ws.Key.String())
	}
	if more := len(s.drifted) - maxListed; more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	return fmt.Sprintf("Step %s blocks on drift: %d Workspace(s) drifted from the commit they applied: %s; "+
		"nothing new applies in the step until a drift check finds none or the drift is accepted "+
		"(magosctl rollout accept-drift %s --step %s) (%d/%d applied)",
		s.spec.Name, len(s.drifted), strings.Join(names, ", "), ro.Name, s.spec.Name, s.applied, len(s.matched))
}
