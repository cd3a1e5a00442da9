package hubsync

import (
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestProgressHold is the table of which status changes wait (a run's progress between running
// phases) and which are written at once (a new run, what the hub acts on, what ends a run),
// and of what the heartbeat's audit counts as held (in sync): a status held, until its hold ends.
func TestProgressHold(t *testing.T) {
	const run, other = "20261207T030000-0000aaaa", "20261207T020000-0000bbbb"
	ws := func(run string, phase magosv1.Phase, reason string) *magosv1.Workspace {
		w := &magosv1.Workspace{}
		w.Name = "ns.web"
		w.Status.CurrentRunID, w.Status.Phase, w.Status.Reason = run, phase, reason
		return w
	}
	for _, tc := range []struct {
		name       string
		have, want *magosv1.Workspace
		held       bool
	}{
		{"granted run starts planning", ws(run, magosv1.PhasePending, ""), ws(run, magosv1.PhasePlanning, ""), true},
		{"planning to applying", ws(run, magosv1.PhasePlanning, ""), ws(run, magosv1.PhaseApplying, ""), true},
		{"applying to verifying", ws(run, magosv1.PhaseApplying, ""), ws(run, magosv1.PhaseVerifying, ""), true},
		{"applied", ws(run, magosv1.PhaseApplying, ""), ws(run, magosv1.PhaseApplied, ""), false},
		{"failed", ws(run, magosv1.PhasePlanning, ""), ws(run, magosv1.PhaseFailed, ""), false},
		{"planned, waiting for the hub", ws(run, magosv1.PhasePlanning, ""), ws(run, magosv1.PhasePlanned, ""), false},
		{"a new run", ws(other, magosv1.PhaseApplied, ""), ws(run, magosv1.PhasePending, ""), false},
		{"a run the hub has not seen runs", ws(other, magosv1.PhaseApplied, ""), ws(run, magosv1.PhasePlanning, ""), false},
		{"an approved plan applies", ws(run, magosv1.PhasePlanned, ""), ws(run, magosv1.PhaseApplying, ""), false},
		{"a destroy starts", ws(run, magosv1.PhaseDeleting, magosv1.ReasonDestroyPending), ws(run, magosv1.PhaseDeleting, magosv1.ReasonDestroying), false},
		{"no run", ws("", magosv1.PhasePending, ""), ws("", magosv1.PhasePlanning, ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
			p := &progressHold{hold: time.Second, now: func() time.Time { return now }}
			if p.holding(tc.have, tc.want) {
				t.Fatal("holding before the syncer saw it")
			}
			wait := p.wait(tc.have, tc.want)
			if held := wait > 0; held != tc.held {
				t.Fatalf("held %v (%s), want %v", held, wait, tc.held)
			}
			if held := p.holding(tc.have, tc.want); held != tc.held {
				t.Fatalf("the audit finds it held %v, want %v", held, tc.held)
			}
			if !tc.held {
				return
			}
			if wait != time.Second {
				t.Fatalf("first sight waits %s, want the hold", wait)
			}
			now = now.Add(600 * time.Millisecond)
			if wait := p.wait(tc.have, tc.want); wait != 400*time.Millisecond {
				t.Fatalf("0.6 s later waits %s, want 0.4 s", wait)
			}
			if other := tc.want.DeepCopy(); true {
				other.Status.Phase = magosv1.PhaseVerifying
				if tc.want.Status.Phase == magosv1.PhaseVerifying {
					other.Status.Phase = magosv1.PhaseApplying
				}
				if p.holding(tc.have, other) {
					t.Fatal("the audit finds another phase than the one held held")
				}
			}
			now = now.Add(400 * time.Millisecond)
			if p.holding(tc.have, tc.want) {
				t.Fatal("the audit finds it held after the hold: it is behind")
			}
			if wait := p.wait(tc.have, tc.want); wait != 0 {
				t.Fatalf("after the hold waits %s, want 0: written", wait)
			}
			p.forget(tc.have.Name)
			p.hold = -1
			if wait := p.wait(tc.have, tc.want); wait != 0 || p.holding(tc.have, tc.want) {
				t.Fatalf("with the hold off waits %s", wait)
			}
		})
	}
}
