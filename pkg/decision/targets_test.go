package decision

import (
	"slices"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestDecideFrozenTargets: with spec.targets Frozen, a Workspace that appears while a change
// rolls out does not join a step that has passed (nor the current one): it joins with the next
// commit. With Dynamic, the same Workspace sends the Rollout back to its step at once.
func TestDecideFrozenTargets(t *testing.T) {
	late := k("c1", "late")
	for _, targets := range []string{magosv1.TargetsFrozen, magosv1.TargetsDynamic} {
		t.Run(targets, func(t *testing.T) {
			f := &fleet{t: t, clusters: clusters("c1", "c2"), now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
				ws:      []Workspace{newWS("c1", "a", "env", "dev"), newWS("c2", "b", "env", "prod")},
				rollout: rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("prod", "env", "prod"))}
			f.rollout.Spec.Targets = targets
			f.decide() // grants dev
			f.start()
			f.finish()
			f.now = f.now.Add(time.Minute)
			d := f.decide() // grants prod
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
			if targets == magosv1.TargetsFrozen {
				if s := d.Steps[0]; !slices.Equal(s.Targets, []string{"c1/payments/a"}) || s.TargetsRecordedAt == nil {
					t.Fatalf("step dev %+v: want its targets recorded", s)
				}
			}
			f.start()

			// A dev Workspace appears while prod runs.
			f.ws = append(f.ws, newWS("c1", "late", "env", "dev"))
			f.now = f.now.Add(time.Minute)
			d = f.decide()
			if targets == magosv1.TargetsDynamic {
				assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
				assertKeys(t, "grants", keysOf(d.Grants), []Key{late})
				return
			}
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
			if len(d.Grants) != 0 || d.Steps[0].Late != 1 || d.Steps[0].Phase != magosv1.StepCompleted || d.Total != 2 {
				t.Fatalf("grants %v, step dev %+v, total %d: want nothing granted, dev Completed with 1 late, 2 Workspaces", d.Grants, d.Steps[0], d.Total)
			}
			f.finish()
			_, d = f.walk()
			assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 2)
			if w := f.get(late); w.Phase != magosv1.PhasePending || w.HasGrant() {
				t.Fatalf("late Workspace %s with grant %+v after the change completed: want it Pending, never granted", w.Phase, w.Grant)
			}

			// The next commit is a new change: the late Workspace joins dev, before prod.
			f.now = f.now.Add(time.Minute)
			f.head = "rev-2"
			for _, w := range []Key{k("c1", "a"), k("c2", "b"), late} {
				f.poll(w, "rev-2", f.now)
			}
			f.applies = nil
			_, d = f.walk()
			assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 2)
			if got := f.appliedKeys(); len(got) != 3 || got[2] != k("c2", "b") || !slices.Contains(got[:2], late) {
				t.Errorf("applies %v: want a and late (step dev) before b (step prod)", got)
			}
			if s := d.Steps[0]; !slices.Equal(s.Targets, []string{"c1/payments/a", "c1/payments/late"}) || s.Late != 0 {
				t.Errorf("step dev %+v: want the late Workspace recorded with the new change", s)
			}
		})
	}
}
