package decision

import (
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// lossFleet is two Workspaces in each of r1, r2 and r3, stepped region by region; r2 and r3
// require approval. It is the fleet of TestLosingTheHub in tools/realnode.
func lossFleet(t *testing.T) *fleet {
	f := &fleet{t: t, clusters: clusters("r1", "r2", "r3"), plans: map[Key]string{}, rollout: lossRollout()}
	for _, c := range []string{"r1", "r2", "r3"} {
		f.ws = append(f.ws, newWS(c, "api", "region", c), newWS(c, "web", "region", c))
	}
	return f
}

// lossRollout is the Rollout of lossFleet as it is kept in git: no status, no approvals.
func lossRollout() *magosv1.Rollout {
	r2, r3 := stepSpec("r2", "region", "r2"), stepSpec("r3", "region", "r3")
	r2.RequireApproval, r3.RequireApproval = true, true
	return rolloutOf(stepSpec("r1", "region", "r1"), r2, r3)
}

// loseTheHub is the hub's cluster lost and a new one installed: the Rollout applied again from
// git (no status, no approvals) and the mirrors made again by the agents from the spokes, which
// carry no decision up (mirror.UpAnnotations): every grant the old hub wrote is gone from what
// the new hub sees. Everything the spokes record (phases, runs, plans, commits applied and
// detected, plan-only runs) stays.
func (f *fleet) loseTheHub() {
	f.rollout = lossRollout()
	for i := range f.ws {
		f.ws[i].Grant = Grant{}
	}
}

// TestDecideHubLostMidChange: commit rev-1 everywhere; rev-2 applied in r1, approved and
// applied in r2, planned and waiting for approval in r3, when the hub is lost. The new hub,
// from the re-created Rollout and the spokes' reports alone, rolls out rev-2 (not rev-1),
// applies nothing in r1 and r2 again, and applies nothing in r3 before an approval given on the
// new hub; then r3 applies rev-2 and the Rollout completes.
func TestDecideHubLostMidChange(t *testing.T) {
	f := lossFleet(t)
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	f.now = t0

	// rev-1 everywhere, each approval given on the first hub.
	_, d := f.walk()
	f.approveStep(d, 1)
	_, d = f.walk()
	f.approveStep(d, 2)
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)

	// rev-2: applied in r1, approved and applied in r2, waiting for approval in r3.
	f.head = "rev-2"
	f.now = t0.Add(time.Hour)
	for _, w := range f.ws {
		f.poll(w.Key, "rev-2", f.now)
	}
	_, d = f.walk()
	f.approveStep(d, 1)
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 2)
	applied := len(f.applies)
	for _, a := range f.applies[applied-4:] {
		if a.commit != "rev-2" || a.key.Cluster == "r3" {
			t.Fatalf("before the loss: %+v applied; want r1 and r2 at rev-2 only", f.applies[applied-4:])
		}
	}
	waiting := map[Key]string{}
	for _, w := range f.ws {
		if w.Key.Cluster == "r3" {
			if !w.AwaitingApproval() || w.CurrentRevision != "rev-2" {
				t.Fatalf("%s: %s at %s, want a plan of rev-2 awaiting approval", w.Key, w.Phase, w.CurrentRevision)
			}
			waiting[w.Key] = w.RunID
		}
	}

	// The hub is lost; the new one decides from the spokes alone.
	f.loseTheHub()
	f.now = t0.Add(2 * time.Hour)
	f.grants = nil
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 2)
	if len(d.Revisions) != 1 || d.Revisions[0].Commit != "rev-2" {
		t.Fatalf("the new hub rolls out %+v, want rev-2", d.Revisions)
	}
	if got := f.applies[applied:]; len(got) != 0 {
		t.Fatalf("the new hub applied %+v before any approval on it", got)
	}
	for _, g := range f.grants {
		if g.Key.Cluster != "r3" || !g.PlanOnly {
			t.Fatalf("the new hub granted %+v: want no grant in r1 and r2, and at most plan-only grants in r3", g)
		}
	}
	for i, want := range []string{magosv1.StepCompleted, magosv1.StepCompleted, magosv1.StepAwaitingApproval} {
		if s := d.Steps[i]; s.Phase != want || s.Approval != nil {
			t.Fatalf("step %s on the new hub: %s (approval %+v), want %s with no approval", s.Name, s.Phase, s.Approval, want)
		}
	}
	for _, w := range f.ws {
		if run, ok := waiting[w.Key]; ok && (w.RunID != run || !w.AwaitingApproval()) {
			t.Fatalf("%s: run %s %s, want its plan of run %s still awaiting approval", w.Key, w.RunID, w.Phase, run)
		}
	}

	// Approved on the new hub: r3 applies the plans it waited with, and nothing else applies.
	f.approveStep(d, 2)
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	assertKeys(t, "applies after the approval on the new hub", keysOfApplies(f.applies[applied:]), []Key{k("r3", "api"), k("r3", "web")})
	for _, a := range f.applies[applied:] {
		if a.commit != "rev-2" {
			t.Fatalf("%s applied %s after the loss, want rev-2", a.key, a.commit)
		}
	}
}

func keysOfApplies(as []applied) []Key {
	out := make([]Key, len(as))
	for i, a := range as {
		out[i] = a.key
	}
	return out
}
