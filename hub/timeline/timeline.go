// Package timeline tells the story of one Rollout, oldest first: the commits it rolled out, its
// steps started and completed, approvals (who, when, which plans), failures, retries, pauses and
// resumes, rollbacks, drift and its acceptances, passed progress deadlines. Build is pure: it
// reads the Rollout (its spec records who approved, accepted drift or asked for a rollback; its
// status the commits and the present state) and the Events the hub's controllers recorded on it
// (what happened, and when), and merges them without duplicates.
package timeline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
)

// Entry types. An Event whose reason is none of the known ones keeps its reason as its type.
const (
	// CommitRolledOut: the Rollout started rolling out a commit (a RevisionChanged Event, or
	// status.revisions).
	CommitRolledOut = "CommitRolledOut"
	// StepStarted: a step became the current one (StepChanged).
	StepStarted = "StepStarted"
	// StepCompleted: a step is done, and soaked (StepCompleted).
	StepCompleted = "StepCompleted"
	// StepAwaitingApproval: the step's plans wait for a person (AwaitingApproval).
	StepAwaitingApproval = "StepAwaitingApproval"
	// StepApproved: someone approved the step's plans (spec.approvals; an Approved Event for an
	// approval the spec no longer holds).
	StepApproved = "StepApproved"
	// ApprovalVoided: a plan changed after its approval (ApprovalVoided).
	ApprovalVoided = "ApprovalVoided"
	// StepRejected: someone rejected the step's plans, with a reason (spec.rejections; an
	// ApprovalRejected Event for a rejection the spec no longer holds).
	StepRejected = "StepRejected"
	// RolloutFailed: the Rollout halted on a failure (StepFailed, PreviewFailed,
	// NoWorkspacesFound, InvalidSelector, InvalidVerification, InvalidChangeWindow).
	RolloutFailed = "RolloutFailed"
	// FailureTolerated: Workspaces failed within the step's maxFailures (FailureTolerated).
	FailureTolerated = "FailureTolerated"
	// RetryRequested: a person (the Event names them), or the hub rolling back, asked a
	// Workspace for a new run (RetryRequested).
	RetryRequested = "RetryRequested"
	// RolloutPaused: the Rollout was paused (Paused).
	RolloutPaused = "RolloutPaused"
	// RolloutResumed: a paused Rollout went on (a Resumed Event naming who; or, from a hub that
	// did not record one, the first status Event after a Paused one).
	RolloutResumed = "RolloutResumed"
	// RollbackRequested: spec.rollback was written (by a person, or the hub for onFailure).
	RollbackRequested = "RollbackRequested"
	// RollbackStarted: a failed step rolled the Rollout back (RollbackStarted).
	RollbackStarted = "RollbackStarted"
	// DriftDetected: Workspaces of the current step drifted (DriftDetected).
	DriftDetected = "DriftDetected"
	// DriftAccepted: someone accepted a Workspace's drift (spec.driftAcceptances).
	DriftAccepted = "DriftAccepted"
	// ProgressDeadlineExceeded: the current step did not progress within
	// spec.progressDeadline (the Event, or condition Progressing).
	ProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// WaitingForClusters: the step waits for clusters that are unavailable or not synced.
	WaitingForClusters = "WaitingForClusters"
	// RolloutCompleted: every step is done (RolloutCompleted).
	RolloutCompleted = "RolloutCompleted"
)

// Sources of an entry.
const (
	SourceEvent  = "event"
	SourceSpec   = "spec"
	SourceStatus = "status"
)

// Entry is one thing that happened to the Rollout.
type Entry struct {
	// Time is when it happened (for repeated Events, the first time).
	Time time.Time `json:"time"`
	// LastTime is, for an Event seen more than once, the last time.
	LastTime *time.Time `json:"lastTime,omitempty"`
	// Count is how many times it happened (1 unless an Event repeated).
	Count int32 `json:"count"`
	// Type is what happened (StepStarted, ...).
	Type string `json:"type"`
	// Reason is the Event's reason, when the entry comes from one.
	Reason string `json:"reason,omitempty"`
	// Step is the step it is about, if any.
	Step string `json:"step,omitempty"`
	// Who is the person (or component) who did it, when known: approvals, drift acceptances,
	// rollbacks and rejections record it; the hub's own decisions name nobody.
	Who string `json:"who,omitempty"`
	// Message says what happened.
	Message string `json:"message"`
	// Workspace is the Workspace it is about (cluster/namespace/name or as the Event names it),
	// if one.
	Workspace string `json:"workspace,omitempty"`
	// Commit is the commit rolled out (CommitRolledOut).
	Commit string `json:"commit,omitempty"`
	// Plans are the plans an approval names, with their digests.
	Plans []magosv1.ApprovedPlan `json:"plans,omitempty"`
	// Warning marks what went wrong (a Warning Event, a failure).
	Warning bool `json:"warning,omitempty"`
	// Source is where the entry comes from: event, spec or status.
	Source string `json:"source"`
}

// TypeOf is the entry type of an Event of a Rollout with reason: what happened, in the words
// the timeline and the notifications (package notify) both use; ok is false for a reason the
// timeline does not know (it keeps such an Event with its reason as its type).
func TypeOf(reason string) (typ string, ok bool) {
	typ, ok = typeOf[reason]
	return typ, ok
}

// typeOf maps the reason of a Rollout's Event to its entry type: the one definition of what an
// Event of a Rollout means, which TypeOf serves to the notifications too.
var typeOf = map[string]string{
	rollout.EventRevisionChanged:           CommitRolledOut,
	rollout.EventStepChanged:               StepStarted,
	rollout.EventStepCompleted:             StepCompleted,
	magosv1.ReasonAwaitingApproval:         StepAwaitingApproval,
	magosv1.ReasonApproved:                 StepApproved,
	magosv1.ReasonApprovalVoided:           ApprovalVoided,
	magosv1.ReasonApprovalRejected:         StepRejected,
	magosv1.ReasonStepFailed:               RolloutFailed,
	magosv1.ReasonPreviewFailed:            RolloutFailed,
	magosv1.ReasonNoWorkspacesFound:        RolloutFailed,
	magosv1.ReasonInvalidSelector:          RolloutFailed,
	magosv1.ReasonInvalidVerification:      RolloutFailed,
	magosv1.ReasonInvalidChangeWindow:      RolloutFailed,
	magosv1.ReasonFailureTolerated:         FailureTolerated,
	fleetview.EventRetryRequested:          RetryRequested,
	magosv1.ReasonPaused:                   RolloutPaused,
	rollout.EventResumed:                   RolloutResumed,
	rollout.EventRollbackStarted:           RollbackStarted,
	magosv1.ReasonDriftDetected:            DriftDetected,
	magosv1.ReasonProgressDeadlineExceeded: ProgressDeadlineExceeded,
	magosv1.ReasonWaitingForClusters:       WaitingForClusters,
	magosv1.ReasonRolloutCompleted:         RolloutCompleted,
}

// statusReasons are the reasons of the Events that record a change of the Rollout's status
// reason: a Paused one followed by any other is a resume.
var statusReasons = map[string]bool{
	magosv1.ReasonNoSteps: true, magosv1.ReasonNoWorkspacesFound: true, magosv1.ReasonRolloutCompleted: true,
	magosv1.ReasonStepFailed: true, magosv1.ReasonLevelProgressing: true, magosv1.ReasonWaitingForClusters: true,
	magosv1.ReasonPaused: true, magosv1.ReasonInvalidSelector: true, magosv1.ReasonRollingBack: true,
	magosv1.ReasonRolledBack: true, magosv1.ReasonInvalidVerification: true, magosv1.ReasonSoaking: true,
	magosv1.ReasonOutsideChangeWindow: true, magosv1.ReasonInvalidChangeWindow: true,
	magosv1.ReasonAwaitingApproval: true, magosv1.ReasonPreviewing: true, magosv1.ReasonPreviewFailed: true,
	magosv1.ReasonDriftDetected: true, magosv1.ReasonApprovalRejected: true,
}

// skipped are reasons left out of the timeline: one grant or revocation per Workspace and run
// (the grid shows where each Workspace stands), and the routine "executing step" status, which
// only repeats the step started.
var skipped = map[string]bool{
	fleetview.EventGranted: true, fleetview.EventRevoked: true, magosv1.ReasonLevelProgressing: true,
}

// notifyAction is the action of the Events the notifier records about its deliveries: about the
// webhooks, not the Rollout, so left out.
const notifyAction = "Notify"

// Build returns the timeline of ro, oldest first, from ro and the Events recorded on it (Events
// of other objects, or of an earlier Rollout of the same name, are ignored). Repeated Events (an
// Event series, or the count of an older Event) make one entry with their count and last time;
// an Event and the spec or status field that records the same thing make one entry.
func Build(ro *magosv1.Rollout, events []eventsv1.Event) []Entry {
	evs := ofRollout(ro, events)
	var out []Entry
	var statusSeq []Entry // the status-reason Events, for resumes
	for i := range evs {
		ev := &evs[i]
		e, ok := fromEvent(ev)
		if statusReasons[ev.Reason] {
			statusSeq = append(statusSeq, Entry{Time: e.Time, Reason: ev.Reason, Step: e.Step})
		}
		if !ok {
			continue
		}
		out = append(out, e)
	}
	out = append(out, resumes(statusSeq, out)...)
	out = mergeRevisions(ro, out)
	out = mergeApprovals(ro, out)
	out = append(out, driftAcceptances(ro)...)
	out = append(out, rollbackRequest(ro)...)
	out = rejections(ro, out)
	out = append(out, fromConditions(ro, out)...)
	out = dedup(out)
	pausedBy(ro, out)
	slices.SortStableFunc(out, compare)
	return out
}

// ofRollout keeps the Events regarding ro, in the order they were first recorded.
func ofRollout(ro *magosv1.Rollout, events []eventsv1.Event) []eventsv1.Event {
	var out []eventsv1.Event
	for _, ev := range events {
		r := ev.Regarding
		if r.Kind != "Rollout" || r.Namespace != ro.Namespace || r.Name != ro.Name {
			continue
		}
		if r.UID != "" && ro.UID != "" && r.UID != ro.UID {
			continue // an earlier Rollout of the same name
		}
		out = append(out, ev)
	}
	slices.SortStableFunc(out, func(a, b eventsv1.Event) int { return firstTime(&a).Compare(firstTime(&b)) })
	return out
}

// fromEvent makes the entry of one Event; ok is false for an Event the timeline leaves out.
func fromEvent(ev *eventsv1.Event) (Entry, bool) {
	e := Entry{Time: firstTime(ev), Count: 1, Reason: ev.Reason, Message: ev.Note,
		Warning: ev.Type == corev1.EventTypeWarning, Source: SourceEvent}
	if step, ok := strings.CutPrefix(ev.Action, "Step "); ok {
		e.Step = step
	}
	if skipped[ev.Reason] || ev.Action == notifyAction {
		return e, false
	}
	e.Type = ev.Reason
	if t, ok := typeOf[ev.Reason]; ok {
		e.Type = t
	}
	if n, last := count(ev); n > 1 {
		e.Count = n
		if !last.IsZero() && !last.Equal(e.Time) {
			e.LastTime = &last
		}
	}
	if ev.Related != nil && ev.Related.Name != "" {
		e.Workspace = ev.Related.Name
		if ev.Related.Namespace != "" {
			e.Workspace = ev.Related.Namespace + "/" + ev.Related.Name
		}
	}
	switch e.Type {
	case CommitRolledOut:
		e.Commit = wordAfter(ev.Note, "commit")
	case StepApproved, RolloutResumed, RetryRequested, RolloutPaused:
		// "... approved by alice at ...", "Resumed by bob", "... requested by carol".
		e.Who = wordAfter(ev.Note, "by")
	case RolloutFailed:
		e.Warning = true
	}
	return e, true
}

// firstTime is when an Event was first recorded: its eventTime, or (an Event of the older API)
// its first timestamp or creation.
func firstTime(ev *eventsv1.Event) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.DeprecatedFirstTimestamp.IsZero():
		return ev.DeprecatedFirstTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

// count is how many times an Event was seen, and the last time.
func count(ev *eventsv1.Event) (int32, time.Time) {
	if s := ev.Series; s != nil && s.Count > 0 {
		// A series counts every occurrence, the first included.
		return max(s.Count, 1), s.LastObservedTime.Time
	}
	if ev.DeprecatedCount > 1 {
		return ev.DeprecatedCount, ev.DeprecatedLastTimestamp.Time
	}
	return 1, time.Time{}
}

// wordAfter returns the word that follows the first word w in s ("" if none), without trailing
// punctuation.
func wordAfter(s, w string) string {
	f := strings.Fields(s)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == w {
			return strings.TrimRight(f[i+1], ",.:;")
		}
	}
	return ""
}

// resumes finds the resumes no Resumed Event recorded in the sequence of status-reason Events:
// a Paused one followed by another reason.
func resumes(seq, recorded []Entry) []Entry {
	var out []Entry
	for i := 1; i < len(seq); i++ {
		if seq[i-1].Reason == magosv1.ReasonPaused && seq[i].Reason != magosv1.ReasonPaused &&
			!slices.ContainsFunc(recorded, func(e Entry) bool {
				return e.Type == RolloutResumed && !e.Time.Before(seq[i-1].Time) && !e.Time.After(seq[i].Time.Add(time.Second))
			}) {
			out = append(out, Entry{Time: seq[i].Time, Count: 1, Type: RolloutResumed, Step: seq[i].Step,
				Message: "The Rollout was resumed (" + seq[i].Reason + ")", Source: SourceEvent})
		}
	}
	return out
}

// mergeRevisions adds the commits of status.revisions that no RevisionChanged Event recorded
// (Events expire; the status keeps the commits being rolled out).
func mergeRevisions(ro *magosv1.Rollout, out []Entry) []Entry {
	for _, rev := range ro.Status.Revisions {
		if slices.ContainsFunc(out, func(e Entry) bool { return e.Type == CommitRolledOut && e.Commit == rev.Commit }) {
			continue
		}
		out = append(out, Entry{Time: rev.Since.Time, Count: 1, Type: CommitRolledOut, Commit: rev.Commit,
			Message: fmt.Sprintf("Rolling out commit %s of %s (%s)", rev.Commit, rev.RepoURL, rev.TargetRevision), Source: SourceStatus})
	}
	return out
}

// mergeApprovals adds spec.approvals, who approved which plans and when, in place of the
// Approved Events that recorded the same approval (their note names its approver and time).
func mergeApprovals(ro *magosv1.Rollout, out []Entry) []Entry {
	for _, a := range ro.Spec.Approvals {
		at := a.ApprovedAt.UTC().Format(time.RFC3339)
		out = slices.DeleteFunc(out, func(e Entry) bool {
			return e.Type == StepApproved && e.Source == SourceEvent && e.Step == a.Step &&
				e.Who == a.ApprovedBy && strings.Contains(e.Message, at)
		})
		digests := make([]string, len(a.Plans))
		for i, p := range a.Plans {
			digests[i] = p.Workspace + " " + p.Digest
		}
		out = append(out, Entry{Time: a.ApprovedAt.Time, Count: 1, Type: StepApproved, Step: a.Step, Who: a.ApprovedBy,
			Plans: slices.Clone(a.Plans), Source: SourceSpec,
			Message: fmt.Sprintf("%s approved %d plan(s) of step %s: %s", a.ApprovedBy, len(a.Plans), a.Step, strings.Join(digests, ", "))})
	}
	return out
}

// driftAcceptances are spec.driftAcceptances: who accepted which Workspace's drift, and when.
func driftAcceptances(ro *magosv1.Rollout) []Entry {
	var out []Entry
	for _, a := range ro.Spec.DriftAcceptances {
		out = append(out, Entry{Time: a.AcceptedAt.Time, Count: 1, Type: DriftAccepted, Who: a.AcceptedBy, Workspace: a.Workspace,
			Source: SourceSpec, Message: fmt.Sprintf("%s accepted the drift of %s (plan %s)", a.AcceptedBy, a.Workspace, a.Digest)})
	}
	return out
}

// rollbackRequest is spec.rollback: who asked to roll back to which commits, and why.
func rollbackRequest(ro *magosv1.Rollout) []Entry {
	rb := ro.Spec.Rollback
	if rb == nil {
		return nil
	}
	commits := make([]string, len(rb.Commits))
	for i, c := range rb.Commits {
		commits[i] = fmt.Sprintf("%.12s of %s@%s", c.Commit, c.RepoURL, c.TargetRevision)
	}
	msg := fmt.Sprintf("%s asked to roll back to %s", rb.RequestedBy, strings.Join(commits, ", "))
	if rb.Reason != "" {
		msg += ": " + rb.Reason
	}
	return []Entry{{Time: rb.RequestedAt.Time, Count: 1, Type: RollbackRequested, Who: rb.RequestedBy, Message: msg,
		Warning: true, Source: SourceSpec}}
}

// rejections are spec.rejections: who rejected which plans of a step, when and why, in place of
// the ApprovalRejected Events the hub recorded on that rejection (at its time or later).
func rejections(ro *magosv1.Rollout, out []Entry) []Entry {
	for _, r := range ro.Spec.Rejections {
		out = slices.DeleteFunc(out, func(e Entry) bool {
			return e.Type == StepRejected && e.Source == SourceEvent && e.Step == r.Step && !e.Time.Before(r.RejectedAt.Add(-time.Second))
		})
		out = append(out, Entry{Time: r.RejectedAt.Time, Count: 1, Type: StepRejected, Step: r.Step, Who: r.RejectedBy,
			Plans: slices.Clone(r.Plans), Warning: true, Source: SourceSpec,
			Message: fmt.Sprintf("%s rejected %d plan(s) of step %s: %s", r.RejectedBy, len(r.Plans), r.Step, r.Reason)})
	}
	return out
}

// pausedBy names, on the latest pause or resume, who paused or resumed the Rollout: the
// keys.PausedBy annotation that magosctl and the dashboard write with spec.paused.
func pausedBy(ro *magosv1.Rollout, out []Entry) {
	who := ro.Annotations[keys.PausedBy]
	if who == "" {
		return
	}
	typ := RolloutResumed
	if ro.Spec.Paused {
		typ = RolloutPaused
	}
	latest := -1
	for i, e := range out {
		if e.Type == typ && (latest < 0 || !e.Time.Before(out[latest].Time)) {
			latest = i
		}
	}
	if latest >= 0 && out[latest].Who == "" {
		out[latest].Who = who
	}
}

// fromConditions adds what the status says of now that no Event recorded (Events expire after
// an hour on most API servers): a passed progress deadline, and a halt on a failure.
func fromConditions(ro *magosv1.Rollout, out []Entry) []Entry {
	var add []Entry
	has := func(typ string, since time.Time) bool {
		return slices.ContainsFunc(out, func(e Entry) bool {
			last := e.Time
			if e.LastTime != nil {
				last = *e.LastTime
			}
			return e.Type == typ && !last.Before(since.Add(-time.Second))
		})
	}
	if c := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionProgressing); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == magosv1.ReasonProgressDeadlineExceeded && !has(ProgressDeadlineExceeded, c.LastTransitionTime.Time) {
		add = append(add, Entry{Time: c.LastTransitionTime.Time, Count: 1, Type: ProgressDeadlineExceeded, Step: ro.Status.CurrentStepName,
			Message: c.Message, Warning: true, Source: SourceStatus})
	}
	if c := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionReady); c != nil && typeOf[ro.Status.Reason] == RolloutFailed &&
		magosv1.InfoOf(ro.Status.Phase, ro.Status.Reason).Failed && !has(RolloutFailed, c.LastTransitionTime.Time) {
		add = append(add, Entry{Time: c.LastTransitionTime.Time, Count: 1, Type: RolloutFailed, Reason: ro.Status.Reason,
			Step: ro.Status.CurrentStepName, Message: ro.Status.Message, Warning: true, Source: SourceStatus})
	}
	return add
}

// dedup folds entries that say the same thing at the same time (two Events of one occurrence,
// recorded twice), adding their counts.
func dedup(in []Entry) []Entry {
	type key struct {
		t                                          time.Time
		typ, reason, step, message, workspace, who string
	}
	seen := map[key]int{}
	out := in[:0]
	for _, e := range in {
		k := key{e.Time.Truncate(time.Second), e.Type, e.Reason, e.Step, e.Message, e.Workspace, e.Who}
		if i, ok := seen[k]; ok {
			out[i].Count += e.Count
			if e.LastTime != nil && (out[i].LastTime == nil || e.LastTime.After(*out[i].LastTime)) {
				out[i].LastTime = e.LastTime
			}
			continue
		}
		seen[k] = len(out)
		out = append(out, e)
	}
	return out
}

// rank orders entries of the same time: a commit before the step it starts, a step completed
// before the next started, a step awaiting approval before its approval or rejection, and that
// before the step completed.
var rank = map[string]int{
	CommitRolledOut: 0, StepCompleted: 1, StepStarted: 2, StepAwaitingApproval: 3, StepApproved: 4, StepRejected: 4, RolloutCompleted: 9,
}

func rankOf(typ string) int {
	if r, ok := rank[typ]; ok {
		return r
	}
	return 5
}

// compare orders entries by time, then by rank; entries at the same time and rank keep the
// order of their Events. The spec records times to the second (approvals, rejections, drift
// acceptances, rollbacks): against one of those, times count to the second. Within one step, a
// step completed comes after everything else of that step.
func compare(a, b Entry) int {
	ta, tb := a.Time, b.Time
	if a.Source == SourceSpec || b.Source == SourceSpec {
		ta, tb = ta.Truncate(time.Second), tb.Truncate(time.Second)
	}
	if c := ta.Compare(tb); c != 0 {
		return c
	}
	if a.Step != "" && a.Step == b.Step && (a.Type == StepCompleted) != (b.Type == StepCompleted) {
		if a.Type == StepCompleted {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(rankOf(a.Type), rankOf(b.Type)); c != 0 {
		return c
	}
	return a.Time.Compare(b.Time)
}
