package revision

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

// op is one step of a registry scenario.
type op struct {
	upsert   string // Workspace name to upsert (with target/interval)
	remove   string // Workspace name to remove
	target   Target
	interval time.Duration
	advance  time.Duration // move the clock
	poll     bool          // take Due targets and complete them (sha)
	sha      string
	fail     bool
}

func TestSchedule(t *testing.T) {
	a := Target{RepoURL: "file:///a", Ref: "main"}
	b := Target{RepoURL: "file:///b", Ref: "main"}
	aCreds := Target{RepoURL: "file:///a", Ref: "main", Namespace: "ns", Secret: "creds"}
	tests := []struct {
		name          string
		ops           []op
		wantTargets   int
		wantMembers   int
		wantScheduled int
		wantPolls     int // number of Targets polled in total
		wantNextIn    time.Duration
	}{
		{
			name: "Workspaces sharing a target share one schedule entry",
			ops: []op{
				{upsert: "w1", target: a, interval: 30 * time.Second},
				{upsert: "w2", target: a, interval: 30 * time.Second},
				{upsert: "w3", target: a, interval: 30 * time.Second},
			},
			wantTargets: 1, wantMembers: 3, wantScheduled: 1,
		},
		{
			name: "credentials make a distinct target",
			ops: []op{
				{upsert: "w1", target: a, interval: 30 * time.Second},
				{upsert: "w2", target: aCreds, interval: 30 * time.Second},
			},
			wantTargets: 2, wantMembers: 2, wantScheduled: 2,
		},
		{
			name: "a ref change moves the Workspace: no lost or duplicated entries, polled at once",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Hour},
				{upsert: "w1", target: b, interval: time.Hour},
				{upsert: "w1", target: a, interval: time.Hour},
				{upsert: "w1", target: b, interval: time.Hour},
				{poll: true, sha: "x"},
			},
			wantTargets: 1, wantMembers: 1, wantScheduled: 1, wantPolls: 1, wantNextIn: 64*time.Minute + 48*time.Second,
		},
		{
			name: "moving one of two members keeps the old target for the other",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Minute},
				{upsert: "w2", target: a, interval: time.Minute},
				{upsert: "w2", target: b, interval: time.Minute},
			},
			wantTargets: 2, wantMembers: 2, wantScheduled: 2,
		},
		{
			name: "upserting the same thing twice changes nothing",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Minute},
				{upsert: "w1", target: a, interval: time.Minute},
			},
			wantTargets: 1, wantMembers: 1, wantScheduled: 1,
		},
		{
			name: "the shortest member interval wins and pulls the next poll in",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Hour},
				{upsert: "w2", target: a, interval: 10 * time.Second},
				{advance: 10 * time.Second, poll: true, sha: "x"},
			},
			wantTargets: 1, wantMembers: 2, wantScheduled: 1, wantPolls: 1, wantNextIn: 10800 * time.Millisecond,
		},
		{
			name: "removing the last member drops the target and its entry",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Minute},
				{upsert: "w2", target: b, interval: time.Minute},
				{remove: "w1"},
				{remove: "w1"},
			},
			wantTargets: 1, wantMembers: 1, wantScheduled: 1,
		},
		{
			name: "a failed poll retries after at most 30s",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Hour},
				{advance: time.Hour, poll: true, fail: true},
			},
			wantTargets: 1, wantMembers: 1, wantScheduled: 1, wantPolls: 1, wantNextIn: 30 * time.Second,
		},
		{
			name: "a target removed while being polled is not rescheduled",
			ops: []op{
				{upsert: "w1", target: a, interval: time.Minute},
				{advance: time.Minute},
				{poll: true, remove: "w1", sha: "x"},
			},
			wantTargets: 0, wantMembers: 0, wantScheduled: 0, wantPolls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			g := NewSchedule()
			g.Jitter = func() float64 { return 0.9 } // first poll at 90% of the interval; +8% later
			polls := 0
			for _, o := range tt.ops {
				now = now.Add(o.advance)
				if o.upsert != "" {
					g.Upsert(key(o.upsert), o.target, o.interval, now)
				}
				if o.poll {
					due := g.Due(now)
					if o.remove != "" {
						g.Remove(key(o.remove))
					}
					for _, target := range due {
						polls++
						g.Done(target, o.sha, o.fail, now)
					}
					continue
				}
				if o.remove != "" {
					g.Remove(key(o.remove))
				}
			}
			if g.Len() != tt.wantTargets || g.Members() != tt.wantMembers || g.Scheduled() != tt.wantScheduled {
				t.Errorf("targets/members/scheduled = %d/%d/%d, want %d/%d/%d",
					g.Len(), g.Members(), g.Scheduled(), tt.wantTargets, tt.wantMembers, tt.wantScheduled)
			}
			if polls != tt.wantPolls {
				t.Errorf("polls = %d, want %d", polls, tt.wantPolls)
			}
			if tt.wantNextIn != 0 {
				next, ok := g.Next()
				if !ok || next.Sub(now) != tt.wantNextIn {
					t.Errorf("next poll in %s, want %s", next.Sub(now), tt.wantNextIn)
				}
			}
		})
	}
}

func TestScheduleResults(t *testing.T) {
	now := time.Now()
	g := NewSchedule()
	target := Target{RepoURL: "file:///a", Ref: "main"}
	g.Upsert(key("w"), target, time.Second, now)
	steps := []struct {
		sha    string
		fail   bool
		result string
	}{
		{sha: "a", result: ResultSeeded},
		{sha: "a", result: ResultUnchanged},
		{fail: true, result: ResultError},
		{sha: "a", result: ResultUnchanged},
		{sha: "b", result: ResultChanged},
	}
	for i, s := range steps {
		now = now.Add(time.Minute)
		due := g.Due(now)
		if len(due) != 1 {
			t.Fatalf("step %d: %d targets due, want 1", i, len(due))
		}
		if len(g.Due(now)) != 0 {
			t.Fatalf("step %d: a target being polled was handed out twice", i)
		}
		members, result := g.Done(due[0], s.sha, s.fail, now)
		if result != s.result || len(members) != 1 {
			t.Errorf("step %d: result %s with %d members, want %s with 1", i, result, len(members), s.result)
		}
	}
}

func TestNeedsMark(t *testing.T) {
	const sha, old, older = "bbbb", "aaaa", "9999"
	tests := []struct {
		name     string
		detected string
		observed string
		current  string
		deleting bool
		want     bool
	}{
		{name: "never ran: its first run resolves the ref", want: false},
		{name: "applied an older commit", observed: old, current: old, want: true},
		{name: "already applied", observed: sha, current: sha, want: false},
		{name: "running or failed on it", observed: old, current: sha, want: false},
		{name: "failed before any apply, on an older commit", current: older, want: true},
		{name: "already marked", detected: sha, observed: old, current: old, want: false},
		{name: "marked with an older commit", detected: older, observed: old, current: old, want: true},
		{name: "stale mark after the ref moved back", detected: older, observed: sha, current: sha, want: true},
		{name: "being deleted", observed: old, current: old, deleting: true, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := &magosv1.Workspace{}
			if tt.detected != "" {
				ws.Annotations = map[string]string{keys.DetectedRevision: tt.detected}
			}
			if tt.deleting {
				ws.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			}
			ws.Status.ObservedRevision, ws.Status.CurrentRevision = tt.observed, tt.current
			if got := NeedsMark(ws, sha); got != tt.want {
				t.Errorf("NeedsMark = %v, want %v", got, tt.want)
			}
		})
	}
}
