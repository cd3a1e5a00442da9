package timeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

var t0 = time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func mt(s int) metav1.Time { return metav1.NewTime(at(s)) }

// web is the Rollout the tests tell the story of.
func web() *magosv1.Rollout {
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}}
	ro.Spec.ProjectRef = "web"
	ro.Spec.Strategy.Steps = []magosv1.RolloutStep{{Name: "us"}, {Name: "eu", RequireApproval: true}}
	return ro
}

// ev is an Event the hub's Rollout controller records on web, s seconds after t0.
func ev(s int, typ, reason, action, note string) eventsv1.Event {
	return eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web.%s.%d", reason, s), UID: types.UID(fmt.Sprintf("%s-%d", reason, s))},
		EventTime:  metav1.NewMicroTime(at(s)), Type: typ, Reason: reason, Action: action, Note: note,
		ReportingController: "magos-hub-rollout",
		Regarding:           corev1.ObjectReference{Kind: "Rollout", Namespace: "shop", Name: "web", UID: "uid-web"},
	}
}

func normal(s int, reason, action, note string) eventsv1.Event {
	return ev(s, corev1.EventTypeNormal, reason, action, note)
}

func warning(s int, reason, action, note string) eventsv1.Event {
	return ev(s, corev1.EventTypeWarning, reason, action, note)
}

// line is an entry in a form tests compare: "+S type step who count".
func line(e Entry) string {
	s := fmt.Sprintf("+%d %s", int(e.Time.Sub(t0).Seconds()), e.Type)
	if e.Step != "" {
		s += " step=" + e.Step
	}
	if e.Who != "" {
		s += " who=" + e.Who
	}
	if e.Workspace != "" {
		s += " ws=" + e.Workspace
	}
	if e.Commit != "" {
		s += " commit=" + e.Commit
	}
	if e.Count != 1 {
		s += fmt.Sprintf(" count=%d", e.Count)
	}
	if e.Warning {
		s += " warning"
	}
	return s
}

func lines(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = line(e)
	}
	return out
}

// TestBuildEntries: one kind of entry per case, from the Event or the spec or status field
// that records it.
func TestBuildEntries(t *testing.T) {
	commit := strings.Repeat("c", 40)
	for _, tc := range []struct {
		name   string
		ro     func(*magosv1.Rollout)
		events []eventsv1.Event
		want   []string
		// check looks at the entries further.
		check func(t *testing.T, es []Entry)
	}{
		{name: "a commit rolled out, from its Event",
			events: []eventsv1.Event{normal(1, "RevisionChanged", "Revision", "Rolling out commit "+commit+" of https://git.example/web (main)")},
			want:   []string{"+1 CommitRolledOut commit=" + commit}},
		{name: "a commit rolled out, from status.revisions when its Event expired",
			ro: func(ro *magosv1.Rollout) {
				ro.Status.Revisions = []magosv1.RolloutRevision{{RepoURL: "https://git.example/web", TargetRevision: "main", Commit: commit, Since: mt(2)}}
			},
			want: []string{"+2 CommitRolledOut commit=" + commit},
			check: func(t *testing.T, es []Entry) {
				if es[0].Source != SourceStatus || !strings.Contains(es[0].Message, "https://git.example/web (main)") {
					t.Errorf("entry %+v: want the commit from the status, naming its repository", es[0])
				}
			}},
		{name: "the status's commit and its Event are one entry",
			ro: func(ro *magosv1.Rollout) {
				ro.Status.Revisions = []magosv1.RolloutRevision{{RepoURL: "https://git.example/web", TargetRevision: "main", Commit: commit, Since: mt(1)}}
			},
			events: []eventsv1.Event{normal(1, "RevisionChanged", "Revision", "Rolling out commit "+commit+" of https://git.example/web (main)")},
			want:   []string{"+1 CommitRolledOut commit=" + commit}},
		{name: "steps started and completed",
			events: []eventsv1.Event{
				normal(1, "StepChanged", "Step us", "Step 1/2 us is current"),
				normal(9, "StepCompleted", "Step us", "Step 1/2 us completed: 1/1 applied, 0 failed"),
				normal(9, "StepChanged", "Step eu", "Step 2/2 eu is current"),
			},
			want: []string{"+1 StepStarted step=us", "+9 StepCompleted step=us", "+9 StepStarted step=eu"}},
		{name: "awaiting approval",
			events: []eventsv1.Event{normal(3, "AwaitingApproval", "Step eu", "Step eu awaits approval of 1 plan(s)")},
			want:   []string{"+3 StepAwaitingApproval step=eu"}},
		{name: "an approval: who, when, and the plans' digests",
			ro: func(ro *magosv1.Rollout) {
				ro.Spec.Approvals = []magosv1.StepApproval{{Step: "eu", ApprovedBy: "alice", ApprovedAt: mt(4),
					Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/shop/web", Revision: commit, Digest: "d1g35t"}}}}
			},
			events: []eventsv1.Event{normal(5, "Approved", "Step eu",
				"Step eu: 1 plan(s) approved by alice at "+at(4).Format(time.RFC3339)+" (eu-west-1/shop/web d1g35t); applying them")},
			want: []string{"+4 StepApproved step=eu who=alice"},
			check: func(t *testing.T, es []Entry) {
				if len(es[0].Plans) != 1 || es[0].Plans[0].Digest != "d1g35t" || !strings.Contains(es[0].Message, "eu-west-1/shop/web d1g35t") {
					t.Errorf("approval %+v: want its plan's digest", es[0])
				}
			}},
		{name: "an earlier approval the spec no longer holds, from its Event",
			events: []eventsv1.Event{normal(5, "Approved", "Step eu",
				"Step eu: 1 plan(s) approved by bob at "+at(4).Format(time.RFC3339)+" (eu-west-1/shop/web d0); applying them")},
			want: []string{"+5 StepApproved step=eu who=bob"}},
		{name: "an approval voided",
			events: []eventsv1.Event{warning(6, "ApprovalVoided", "Step eu", "Step eu: the plan of eu-west-1/shop/web changed")},
			want:   []string{"+6 ApprovalVoided step=eu warning"}},
		{name: "a rejection: who, when and why",
			ro: func(ro *magosv1.Rollout) {
				ro.Spec.Rejections = []magosv1.StepRejection{{Step: "eu", RejectedBy: "carol", RejectedAt: mt(7), Reason: "destroys the database",
					Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/shop/web", Digest: "d1g35t"}}}}
			},
			events: []eventsv1.Event{warning(8, "ApprovalRejected", "Step eu", "carol rejected the plans")},
			want:   []string{"+7 StepRejected step=eu who=carol warning"},
			check: func(t *testing.T, es []Entry) {
				if !strings.Contains(es[0].Message, "destroys the database") {
					t.Errorf("rejection %+v: want its reason", es[0])
				}
			}},
		{name: "a failure: which Workspace and why",
			events: []eventsv1.Event{warning(10, "StepFailed", "Step eu", "Step eu failed: eu-west-1/shop/web: Failed (ApplyFailed)")},
			want:   []string{"+10 RolloutFailed step=eu warning"},
			check: func(t *testing.T, es []Entry) {
				if es[0].Reason != "StepFailed" || !strings.Contains(es[0].Message, "eu-west-1/shop/web") {
					t.Errorf("failure %+v: want its reason and Workspace", es[0])
				}
			}},
		{name: "a failure from the status when its Event expired",
			ro: func(ro *magosv1.Rollout) {
				ro.Status.Phase, ro.Status.Reason, ro.Status.Message, ro.Status.CurrentStepName = magosv1.PhaseFailed, magosv1.ReasonStepFailed, "eu-west-1/shop/web failed", "eu"
				ro.Status.Conditions = []metav1.Condition{{Type: magosv1.ConditionReady, Status: metav1.ConditionFalse, Reason: magosv1.ReasonStepFailed, LastTransitionTime: mt(11)}}
			},
			want: []string{"+11 RolloutFailed step=eu warning"}},
		{name: "failures tolerated",
			events: []eventsv1.Event{warning(12, "FailureTolerated", "Step us", "Step 1/2 us: 1 failed Workspace(s) tolerated (maxFailures 1): us-east-1/shop/web")},
			want:   []string{"+12 FailureTolerated step=us warning"}},
		{name: "a retry, naming the Workspace",
			events: []eventsv1.Event{func() eventsv1.Event {
				e := normal(13, "RetryRequested", "Retry", "Asked us-east-1/shop/web for a new run to roll back")
				e.Related = &corev1.ObjectReference{Kind: "Workspace", Namespace: "magos-cluster-us-east-1", Name: "shop.web"}
				return e
			}()},
			want: []string{"+13 RetryRequested ws=magos-cluster-us-east-1/shop.web"}},
		{name: "a pause and a resume, naming who from the Rollout's annotation",
			ro: func(ro *magosv1.Rollout) { ro.Annotations = map[string]string{keys.PausedBy: "dave"} },
			events: []eventsv1.Event{
				normal(14, "Paused", "Step us", "Paused"),
				normal(20, "LevelProgressing", "Step us", "Executing step us (0/1 applied)"),
			},
			want: []string{"+14 RolloutPaused step=us", "+20 RolloutResumed step=us who=dave"}},
		{name: "a resume recorded by the hub, naming who",
			events: []eventsv1.Event{
				normal(14, "Paused", "Step us", "Paused"),
				normal(20, "Resumed", "Resume", "Resumed by gina"),
				normal(20, "LevelProgressing", "Step us", "Executing step us (0/1 applied)"),
			},
			want: []string{"+14 RolloutPaused step=us", "+20 RolloutResumed who=gina"}},
		{name: "a retry a person asked for, naming them",
			events: []eventsv1.Event{normal(15, "RetryRequested", "Retry", "Retry of run 20261205T070000-0badcafe of us-east-1/shop/web requested by hank")},
			want:   []string{"+15 RetryRequested who=hank"}},
		{name: "a rollback requested, and started by the hub",
			ro: func(ro *magosv1.Rollout) {
				ro.Spec.Rollback = &magosv1.RolloutRollback{RequestedBy: "erin", RequestedAt: mt(21), Reason: "bad release",
					Commits: []magosv1.RollbackCommit{{RepoURL: "https://git.example/web", TargetRevision: "main", Commit: commit}}}
			},
			events: []eventsv1.Event{warning(22, "RollingBack", "Step eu", "Rolling back")},
			want:   []string{"+21 RollbackRequested who=erin warning", "+22 RollingBack step=eu warning"}},
		{name: "drift detected and accepted",
			ro: func(ro *magosv1.Rollout) {
				ro.Spec.DriftAcceptances = []magosv1.DriftAcceptance{{Workspace: "eu-west-1/shop/web", Digest: "dd1", AcceptedBy: "frank", AcceptedAt: mt(24)}}
			},
			events: []eventsv1.Event{warning(23, "DriftDetected", "Step eu", "eu-west-1/shop/web drifted")},
			want:   []string{"+23 DriftDetected step=eu warning", "+24 DriftAccepted who=frank ws=eu-west-1/shop/web"}},
		{name: "a progress deadline, from its Event and not again from the condition",
			ro: func(ro *magosv1.Rollout) {
				ro.Status.Conditions = []metav1.Condition{{Type: magosv1.ConditionProgressing, Status: metav1.ConditionFalse,
					Reason: magosv1.ReasonProgressDeadlineExceeded, LastTransitionTime: mt(25)}}
			},
			events: []eventsv1.Event{warning(25, "ProgressDeadlineExceeded", "Step eu", "Step eu has not progressed for 10m0s")},
			want:   []string{"+25 ProgressDeadlineExceeded step=eu warning"}},
		{name: "a progress deadline from the condition when its Event expired",
			ro: func(ro *magosv1.Rollout) {
				ro.Status.CurrentStepName = "eu"
				ro.Status.Conditions = []metav1.Condition{{Type: magosv1.ConditionProgressing, Status: metav1.ConditionFalse,
					Reason: magosv1.ReasonProgressDeadlineExceeded, LastTransitionTime: mt(26)}}
			},
			want: []string{"+26 ProgressDeadlineExceeded step=eu warning"}},
		{name: "waiting for clusters, and completed",
			events: []eventsv1.Event{
				warning(27, "WaitingForClusters", "Step eu", "Waiting for cluster eu-west-1: AgentSilent"),
				normal(30, "RolloutCompleted", "Decide", "All 2 steps completed"),
			},
			want: []string{"+27 WaitingForClusters step=eu warning", "+30 RolloutCompleted"}},
		{name: "grants, revocations, notifications and other objects' Events are left out",
			events: []eventsv1.Event{
				normal(1, "Granted", "Grant", "Granted apply to us-east-1/shop/web"),
				normal(2, "Revoked", "Revoke", "Revoked the grant of us-east-1/shop/web"),
				warning(3, "NotificationFailed", "Notify", "webhook oncall: 500"),
				func() eventsv1.Event {
					e := normal(4, "StepChanged", "Step us", "Step 1/2 us is current")
					e.Regarding.UID = "uid-of-an-earlier-web"
					return e
				}(),
				func() eventsv1.Event {
					e := normal(5, "StepChanged", "Step us", "Step 1/2 us is current")
					e.Regarding.Name = "api"
					return e
				}(),
			},
			want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := web()
			if tc.ro != nil {
				tc.ro(ro)
			}
			got := Build(ro, tc.events)
			if !slices.Equal(lines(got), tc.want) {
				t.Errorf("timeline\n%s\nwant\n%s", strings.Join(lines(got), "\n"), strings.Join(tc.want, "\n"))
				return
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// TestBuildOrderAndRepeats: entries come oldest first whatever the order of the Events, a step
// completed before the next one started at the same instant; a repeated Event (a series, or an
// older Event's count) is one entry with its count and last time, and the same occurrence
// recorded twice is one entry.
func TestBuildOrderAndRepeats(t *testing.T) {
	series := warning(5, "WaitingForClusters", "Step eu", "Waiting for cluster eu-west-1: AgentSilent")
	series.Series = &eventsv1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(at(50))}
	old := warning(60, "FailureTolerated", "Step us", "1 failed Workspace(s) tolerated")
	old.EventTime = metav1.MicroTime{}
	old.DeprecatedFirstTimestamp, old.DeprecatedLastTimestamp, old.DeprecatedCount = mt(60), mt(70), 3
	twice := normal(80, "RolloutCompleted", "Decide", "All 2 steps completed")
	again := twice
	again.UID, again.Name = "other", "web.other"
	for _, tc := range []struct {
		name   string
		events []eventsv1.Event
		ro     func(*magosv1.Rollout)
		want   []string
	}{
		{name: "out of order, same instant",
			events: []eventsv1.Event{
				normal(9, "StepChanged", "Step eu", "Step 2/2 eu is current"),
				normal(1, "StepChanged", "Step us", "Step 1/2 us is current"),
				normal(9, "StepCompleted", "Step us", "Step 1/2 us completed"),
				normal(0, "RevisionChanged", "Revision", "Rolling out commit abc of r (main)"),
			},
			want: []string{"+0 CommitRolledOut commit=abc", "+1 StepStarted step=us", "+9 StepCompleted step=us", "+9 StepStarted step=eu"}},
		{name: "an approval written in the second the step started awaiting it, and the step completed in that second too",
			events: []eventsv1.Event{
				normal(40, "StepChanged", "Step eu", "Step 2/2 eu is current"),
				func() eventsv1.Event {
					e := normal(41, "AwaitingApproval", "Step eu", "Step eu awaits approval")
					e.EventTime = metav1.NewMicroTime(at(41).Add(600 * time.Millisecond))
					return e
				}(),
				func() eventsv1.Event {
					e := normal(41, "StepCompleted", "Step eu", "Step 2/2 eu completed")
					e.EventTime = metav1.NewMicroTime(at(41).Add(700 * time.Millisecond))
					return e
				}(),
			},
			ro: func(ro *magosv1.Rollout) {
				// magosctl writes approvedAt to the second: 41.0, before the Event at 41.6.
				ro.Spec.Approvals = []magosv1.StepApproval{{Step: "eu", ApprovedBy: "alice", ApprovedAt: mt(41),
					Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/shop/web", Digest: "d"}}}}
			},
			want: []string{"+40 StepStarted step=eu", "+41 StepAwaitingApproval step=eu", "+41 StepApproved step=eu who=alice", "+41 StepCompleted step=eu"}},
		{name: "a series", events: []eventsv1.Event{series}, want: []string{"+5 WaitingForClusters step=eu count=4 warning"}},
		{name: "an older Event's count", events: []eventsv1.Event{old}, want: []string{"+60 FailureTolerated step=us count=3 warning"}},
		{name: "one occurrence recorded twice", events: []eventsv1.Event{twice, again}, want: []string{"+80 RolloutCompleted count=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := web()
			if tc.ro != nil {
				tc.ro(ro)
			}
			got := Build(ro, tc.events)
			if !slices.Equal(lines(got), tc.want) {
				t.Errorf("timeline\n%s\nwant\n%s", strings.Join(lines(got), "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	got := Build(web(), []eventsv1.Event{series})
	if got[0].LastTime == nil || !got[0].LastTime.Equal(at(50)) {
		t.Errorf("series last time %v, want %s", got[0].LastTime, at(50))
	}
	got = Build(web(), []eventsv1.Event{old})
	if got[0].LastTime == nil || !got[0].LastTime.Equal(at(70)) {
		t.Errorf("older Event's last time %v, want %s", got[0].LastTime, at(70))
	}
}
