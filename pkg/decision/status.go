package decision

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// maxListed is how many Workspaces a StepFailed message names before "and N more".
const maxListed = 5

// maxPlansListed is how many plans waiting for approval a step's status lists.
const maxPlansListed = 1000

// stepStatuses renders the evaluated steps. A step whose phase was not set by the decision is
// Completed when every matched member is Done, and Pending otherwise.
func stepStatuses(steps []step, ms []member) []magosv1.StepStatus {
	out := make([]magosv1.StepStatus, len(steps))
	for i := range steps {
		s := &steps[i]
		phase := s.phase
		if phase == "" {
			phase = magosv1.StepPending
			if s.done() {
				phase = magosv1.StepCompleted
			}
		}
		var clusters []string
		for _, mi := range s.matched {
			c := ms[mi].ws.Key.Cluster
			if len(clusters) == 0 || clusters[len(clusters)-1] != c {
				clusters = append(clusters, c)
			}
		}
		if len(s.removed) > 0 { // remembered until they come back or the spec changes
			clusters = append(clusters, s.removed...)
			slices.Sort(clusters)
			clusters = slices.Compact(clusters)
		}
		running := s.running
		for _, mi := range s.matched {
			if ms[mi].granted && ms[mi].ws.AwaitingApproval() {
				running++ // its apply is granted now: it counts as running, as it will next time
			}
		}
		out[i] = magosv1.StepStatus{
			Name:           s.spec.Name,
			Phase:          phase,
			Matched:        int32(len(s.matched)),
			Applied:        s.applied,
			Running:        running,
			Failed:         s.failed,
			MaxFailures:    s.maxFailures,
			MaxConcurrency: s.maxConcurrency,
			Clusters:       clusters,
			Drifted:        driftedNames(s, ms),
		}
		if !s.succeededAt.IsZero() {
			out[i].SucceededAt = &metav1.Time{Time: s.succeededAt}
		}
		if !s.soakEnds.IsZero() {
			out[i].SoakEndsAt = &metav1.Time{Time: s.soakEnds}
		}
		if s.rejection != nil {
			out[i].Rejection = s.rejection.DeepCopy()
		}
		if s.approval != nil {
			out[i].Approval = s.approval.DeepCopy()
		}
		out[i].Preview, out[i].PreviewOmitted = s.preview, s.previewOmitted
		if s.targets != nil {
			out[i].Targets = slices.Clone(s.targets)
			out[i].TargetsRecordedAt = &metav1.Time{Time: s.recordedAt}
			out[i].Late = s.late
		}
		if phase == magosv1.StepAwaitingApproval {
			for _, mi := range s.plans[:min(len(s.plans), maxPlansListed)] {
				w := ms[mi].ws
				p := magosv1.PlanStatus{Workspace: w.Key.String(), Run: w.RunID, Revision: w.CurrentRevision, Digest: approvalDigest(*w)}
				if !w.DestroyPending() { // a destroy has no plan: its counts are not known
					p.Add, p.Change, p.Destroy = w.Changes.Add, w.Changes.Change, w.Changes.Destroy
				}
				out[i].Plans = append(out[i].Plans, p)
			}
		}
	}
	return out
}

// tolerated returns, per step up to the current one, the failed members whose failures the
// step tolerates (nil when none).
func tolerated(steps []step, ms []member, current int) map[string][]Key {
	var out map[string][]Key
	for i := 0; i < len(steps) && i <= current; i++ {
		s := &steps[i]
		if s.failed == 0 || s.tooManyFailures() {
			continue
		}
		if out == nil {
			out = map[string][]Key{}
		}
		for _, mi := range s.matched {
			if ms[mi].failed() {
				out[s.spec.Name] = append(out[s.spec.Name], ms[mi].ws.Key)
			}
		}
	}
	return out
}

// completedMessage is the status message of a completed Rollout; it counts the failures the
// steps tolerated.
func completedMessage(steps []step) string {
	var n int32
	for i := range steps {
		n += steps[i].failed
	}
	if n == 0 {
		return msgCompleted
	}
	return fmt.Sprintf("All steps completed, %d failed Workspace(s) tolerated within maxFailures", n)
}

// failedMessage is the StepFailed message of a step: it names its failed members.
func failedMessage(s *step, ms []member) string {
	return fmt.Sprintf("One or more workspaces failed in step %s: %s", s.spec.Name, failedNames(s, ms))
}

// failedNames names the failed members of a step with their reasons, at most maxListed of them.
func failedNames(s *step, ms []member) string {
	var b strings.Builder
	listed := 0
	for _, i := range s.matched {
		w := ms[i].ws
		if !ms[i].failed() {
			continue
		}
		if listed == maxListed {
			fmt.Fprintf(&b, ", and %d more", int(s.failed)-maxListed)
			break
		}
		if listed > 0 {
			b.WriteString(", ")
		}
		reason := w.Reason
		if reason == "" {
			reason = string(w.Phase)
		}
		fmt.Fprintf(&b, "%s (%s)", w.Key, reason)
		listed++
	}
	return b.String()
}

// previewFailedMessage says why a later step's preview stops the Rollout.
func previewFailedMessage(s *step, ms []member) string {
	return fmt.Sprintf("Preview of step %s: %d Workspace(s) failed, more than its maxFailures (%d), so nothing applies: %s",
		s.spec.Name, s.failed, s.maxFailures, failedNames(s, ms))
}

// previewing describes a preview that is not complete: how many of the Workspaces of the steps
// from current on planned the change, and what it waits for.
func previewing(steps []step, current int, ms []member, g previewGap) string {
	var waits []string
	for _, mi := range g.pending[:min(len(g.pending), maxListed)] {
		waits = append(waits, ms[mi].ws.Key.String())
	}
	if len(g.pending) > maxListed {
		waits = append(waits, fmt.Sprintf("%d more", len(g.pending)-maxListed))
	}
	for _, c := range g.unknown {
		waits = append(waits, "the Workspaces of cluster "+c)
	}
	return fmt.Sprintf("Previewing the change before step %s applies: %d/%d Workspace(s) planned; waiting for %s",
		steps[current].spec.Name, g.total-len(g.pending), g.total, strings.Join(waits, ", "))
}

// waitingFor describes the clusters a step waits for: "cluster <name>: <reason>", once each, in
// cluster order.
// waitedFor is the clusters names, sorted, each once: what Decision.WaitingFor lists.
func waitedFor(names []string) []string {
	names = slices.Clone(names)
	slices.Sort(names)
	return slices.Compact(names)
}

func waitingFor(names []string, clusters map[string]Cluster) []string {
	names = waitedFor(names)
	var out []string
	for _, name := range names {
		c, registered := clusters[name]
		reason := c.Reason
		switch {
		case !registered:
			reason = "removed from the hub's configuration while the step ran (register it again, or list it in the Rollout's annotation " +
				keys.AcknowledgeRemovedClusters + " to go on without it)"
		case c.Synced && c.Available:
			reason = "no complete sync since the Rollout was created"
		case reason != "":
		case !c.Synced:
			reason = "not synced"
		default:
			reason = "unavailable"
		}
		out = append(out, "cluster "+name+": "+reason)
	}
	return out
}
