package decision

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// limited returns the step with maxConcurrency and maxFailures set (nil: unset).
func limited(s magosv1.RolloutStep, concurrency, failures *intstr.IntOrString) magosv1.RolloutStep {
	s.MaxConcurrency, s.MaxFailures = concurrency, failures
	return s
}

func intOrPercent(v string) *intstr.IntOrString {
	x := intstr.Parse(v)
	return &x
}

// fiveAcrossThree is a step "all" of five Workspaces over three clusters, then a step "next".
func fiveAcrossThree() []Workspace {
	return []Workspace{
		newWS("c1", "a", "env", "prod"), newWS("c1", "b", "env", "prod"),
		newWS("c2", "c", "env", "prod"), newWS("c2", "d", "env", "prod"),
		newWS("c3", "e", "env", "prod"),
		newWS("c3", "z", "env", "next"),
	}
}

// TestDecideMaxConcurrency walks a step of five Workspaces over three clusters under each limit:
// never more than the limit plan or apply at once (counted across clusters, a granted run that
// has not started included), the places are refilled as runs end, and the next step starts only
// when all five are Applied.
func TestDecideMaxConcurrency(t *testing.T) {
	tests := []struct {
		limit string // "" unset
		want  int32  // the resolved limit (0: none)
	}{
		{"", 0}, {"1", 1}, {"2", 2}, {"40%", 2},
		{"50%", 2}, // 2.5 rounds down
		{"10%", 1}, // 0.5 rounds down, to at least 1
		{"100%", 5}, {"9", 9},
	}
	for _, tt := range tests {
		t.Run("maxConcurrency="+tt.limit, func(t *testing.T) {
			var c *intstr.IntOrString
			if tt.limit != "" {
				c = intOrPercent(tt.limit)
			}
			f := &fleet{t: t, ws: fiveAcrossThree(), clusters: clusters("c1", "c2", "c3"),
				rollout: rolloutOf(limited(stepSpec("all", "env", "prod"), c, nil), stepSpec("next", "env", "next"))}
			var batches []int
			for round := 0; round < 20; round++ {
				d := f.decide()
				if d.Steps[0].MaxConcurrency != tt.want {
					t.Fatalf("status.steps[0].maxConcurrency = %d, want %d", d.Steps[0].MaxConcurrency, tt.want)
				}
				if len(d.Grants) > 0 {
					batches = append(batches, len(d.Grants))
				}
				f.start()
				running := 0
				for _, w := range f.ws {
					if w.InFlight() {
						running++
					}
				}
				if tt.want > 0 && running > int(tt.want) {
					t.Fatalf("round %d: %d running at once, limit %d", round, running, tt.want)
				}
				// The first run to end frees one place only: finish one at a time.
				if finishOne(f) == 0 && len(d.Grants) == 0 {
					break
				}
			}
			// One run ends per round, so the step refills one place at a time: a first batch up to
			// the limit, then one by one, then the next step.
			first := 5
			if tt.want > 0 {
				first = min(5, int(tt.want))
			}
			want := []int{first}
			for range 5 - first + 1 {
				want = append(want, 1)
			}
			if fmt.Sprint(batches) != fmt.Sprint(want) {
				t.Fatalf("grant batches %v, want %v", batches, want)
			}
			d := f.decide()
			assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 2)
			if n := len(f.applies); n != 6 {
				t.Fatalf("%d applies, want 6", n)
			}
			if last := f.applies[len(f.applies)-1].key; last != k("c3", "z") {
				t.Fatalf("the next step applied before the limited one finished: last apply %s", last)
			}
		})
	}

	t.Run("runs in flight and grants held take the places", func(t *testing.T) {
		ws := fiveAcrossThree()
		ws[0] = ws[0].with(inPhase(magosv1.PhaseApplying, magosv1.ReasonApplying)) // c1/a in flight
		ws[2] = ws[2].with(grantedNow)                                             // c2/c granted, not started
		f := &fleet{t: t, ws: ws, clusters: clusters("c1", "c2", "c3"),
			rollout: rolloutOf(limited(stepSpec("all", "env", "prod"), intOrPercent("3"), nil), stepSpec("next", "env", "next"))}
		d := f.decide()
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "b")}) // one place left, in key order
		if len(d.Revokes) != 0 {
			t.Fatalf("revokes %v: a held grant is kept", d.Revokes)
		}
		// The limit lowered below what runs: nothing new, the held grant is kept.
		f.rollout.Spec.Strategy.Steps[0].MaxConcurrency = intOrPercent("1")
		if d := f.decide(); len(d.Grants) != 0 || len(d.Revokes) != 0 {
			t.Fatalf("limit lowered: grants %v revokes %v, want none", d.Grants, d.Revokes)
		}
	})

	t.Run("a silent cluster's member is skipped, not waited for, while places are free", func(t *testing.T) {
		f := &fleet{t: t, ws: fiveAcrossThree(), clusters: clusters("c1", "c2", "c3"),
			rollout: rolloutOf(limited(stepSpec("all", "env", "prod"), intOrPercent("2"), nil), stepSpec("next", "env", "next"))}
		c := f.clusters["c1"]
		c.Available = false
		f.clusters["c1"] = c
		d := f.decide()
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c2", "c"), k("c2", "d")})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 0)
	})
}

// finishOne ends the first run in flight (Applied, or as f.fail says), and returns how many
// ended (0 or 1).
func finishOne(f *fleet) int {
	for i := range f.ws {
		if f.ws[i].InFlight() {
			keep := f.ws
			only := []Workspace{f.ws[i]}
			f.ws = only
			n := f.finish()
			keep[i] = f.ws[0]
			f.ws = keep
			return n
		}
	}
	return 0
}

// TestDecideMaxFailures: failures up to a step's maxFailures are tolerated (the step passes and
// the Rollout goes on, and the decision names them); one more fails the step.
func TestDecideMaxFailures(t *testing.T) {
	tests := []struct {
		name      string
		max       string // "" unset
		fail      []string
		wantPhase magosv1.Phase
		reason    string
		tolerated int
	}{
		{"unset: the first failure halts", "", []string{"b"}, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0},
		{"0 halts", "0", []string{"b"}, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0},
		{"1 tolerates one", "1", []string{"b"}, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 1},
		{"1 fails on two", "1", []string{"b", "d"}, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0},
		{"40% of five is two", "40%", []string{"b", "d"}, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 2},
		{"39% of five rounds down to one", "39%", []string{"b", "d"}, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0},
		{"100% tolerates all", "100%", []string{"a", "b", "c", "d", "e"}, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m *intstr.IntOrString
			if tt.max != "" {
				m = intOrPercent(tt.max)
			}
			f := &fleet{t: t, ws: fiveAcrossThree(), clusters: clusters("c1", "c2", "c3"), fail: map[Key]magosv1.Phase{},
				rollout: rolloutOf(limited(stepSpec("all", "env", "prod"), nil, m), stepSpec("next", "env", "next"))}
			for _, name := range tt.fail {
				for _, w := range f.ws {
					if w.Key.Name == name {
						f.fail[w.Key] = magosv1.PhaseFailed
					}
				}
			}
			_, d := f.walk()
			if d.Phase != tt.wantPhase || d.Reason != tt.reason {
				t.Fatalf("ended %s/%s (%q), want %s/%s", d.Phase, d.Reason, d.Message, tt.wantPhase, tt.reason)
			}
			if got := len(d.Tolerated["all"]); got != tt.tolerated {
				t.Fatalf("tolerated %v, want %d", d.Tolerated, tt.tolerated)
			}
			if d.Steps[0].Failed != int32(len(tt.fail)) {
				t.Fatalf("status.steps[0].failed = %d, want %d", d.Steps[0].Failed, len(tt.fail))
			}
			nextApplied := false
			for _, a := range f.applies {
				nextApplied = nextApplied || a.key == k("c3", "z")
			}
			if nextApplied != (tt.wantPhase == magosv1.PhaseApplied) {
				t.Fatalf("next step applied: %v, want %v", nextApplied, tt.wantPhase == magosv1.PhaseApplied)
			}
			if tt.tolerated > 0 && !strings.Contains(d.Message, fmt.Sprintf("%d failed Workspace(s) tolerated", tt.tolerated)) {
				t.Fatalf("completed message %q does not count the tolerated failures", d.Message)
			}
			if tt.wantPhase == magosv1.PhaseFailed && d.Steps[0].Phase != magosv1.StepFailed {
				t.Fatalf("step phase %s, want Failed", d.Steps[0].Phase)
			}
		})
	}

	t.Run("the rest of the step runs while a failure is tolerated", func(t *testing.T) {
		f := &fleet{t: t, ws: fiveAcrossThree(), clusters: clusters("c1", "c2", "c3"), fail: map[Key]magosv1.Phase{k("c1", "a"): magosv1.PhaseValidationFailed},
			rollout: rolloutOf(limited(stepSpec("all", "env", "prod"), intOrPercent("1"), intOrPercent("1")), stepSpec("next", "env", "next"))}
		f.decide()
		f.start()
		f.finish() // c1/a fails
		d := f.decide()
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "b")})
		assertKeys(t, "tolerated", d.Tolerated["all"], []Key{k("c1", "a")})
	})
}

// TestDecideSoak: a step with minSuccessTime holds the next step until it has been all Applied
// for that long; new work during the soak starts it over once the step is Applied again, and a
// failure during the soak fails the step.
func TestDecideSoak(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	newFleet := func() *fleet {
		soak := stepSpec("dev", "env", "dev")
		soak.MinSuccessTime = &metav1.Duration{Duration: 20 * time.Second}
		return &fleet{t: t, now: t0, clusters: clusters("c1", "c2"), fail: map[Key]magosv1.Phase{},
			ws:      []Workspace{newWS("c1", "app", "env", "dev"), newWS("c2", "app", "env", "prod")},
			rollout: rolloutOf(soak, stepSpec("prod", "env", "prod"))}
	}
	settleDev := func(f *fleet) {
		t.Helper()
		d := f.decide()
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "app")})
		f.start()
		f.finish()
	}

	t.Run("the next step waits out the soak", func(t *testing.T) {
		f := newFleet()
		settleDev(f)
		f.now = t0.Add(time.Second)
		d := f.decide()
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonSoaking, 0)
		if len(d.Grants) != 0 || d.RecheckAfter != 20*time.Second || d.Steps[0].Phase != magosv1.StepSoaking {
			t.Fatalf("soaking: grants %v, recheck %v, step %s", d.Grants, d.RecheckAfter, d.Steps[0].Phase)
		}
		if !d.Steps[0].SucceededAt.Time.Equal(f.now) || !d.Steps[0].SoakEndsAt.Time.Equal(f.now.Add(20*time.Second)) {
			t.Fatalf("succeededAt %v soakEndsAt %v", d.Steps[0].SucceededAt, d.Steps[0].SoakEndsAt)
		}
		f.now = t0.Add(20 * time.Second) // one second before the end
		if d := f.decide(); len(d.Grants) != 0 || d.RecheckAfter != time.Second {
			t.Fatalf("before the soak ends: grants %v, recheck %v", d.Grants, d.RecheckAfter)
		}
		f.now = t0.Add(21 * time.Second)
		d = f.decide()
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c2", "app")})
		if d.RecheckAfter != 0 {
			t.Fatalf("recheck %v after the soak", d.RecheckAfter)
		}
	})

	t.Run("a step seen done within a second soaks no less than minSuccessTime", func(t *testing.T) {
		f := newFleet()
		settleDev(f)
		seen := t0.Add(1900 * time.Millisecond)
		f.now = seen
		d := f.decide()
		if want := t0.Add(2 * time.Second); !d.Steps[0].SucceededAt.Time.Equal(want) {
			t.Fatalf("succeededAt %v, want %v (rounded up, as the API stores it)", d.Steps[0].SucceededAt, want)
		}
		f.now = seen.Add(20*time.Second - 50*time.Millisecond)
		if d := f.decide(); len(d.Grants) != 0 {
			t.Fatalf("granted %v %v after the step was seen done, before minSuccessTime (20s)", d.Grants, f.now.Sub(seen))
		}
		f.now = t0.Add(22 * time.Second)
		assertKeys(t, "grants", keysOf(f.decide().Grants), []Key{k("c2", "app")})
	})

	t.Run("new work during the soak starts it over", func(t *testing.T) {
		f := newFleet()
		settleDev(f)
		f.now = t0.Add(time.Second)
		f.decide() // soak starts at t0+1s
		f.now = t0.Add(10 * time.Second)
		f.poll(k("c1", "app"), "rev-2", f.now)
		d := f.decide()
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
		if d.Steps[0].SucceededAt != nil {
			t.Fatalf("succeededAt %v kept while the step has new work", d.Steps[0].SucceededAt)
		}
		f.start()
		f.finish()
		f.now = t0.Add(15 * time.Second)
		d = f.decide()
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonSoaking, 0)
		if d.RecheckAfter != 20*time.Second {
			t.Fatalf("the soak did not start over: recheck %v", d.RecheckAfter)
		}
		f.now = t0.Add(30 * time.Second) // 21 s after the first success, 15 s after the second
		if d := f.decide(); d.Reason != magosv1.ReasonSoaking || len(d.Grants) != 0 {
			t.Fatalf("at +30s: %s, grants %v: the first soak's end let the next step through", d.Reason, d.Grants)
		}
	})

	t.Run("a failure during the soak fails the step", func(t *testing.T) {
		f := newFleet()
		settleDev(f)
		f.now = t0.Add(time.Second)
		f.decide()
		f.fail[k("c1", "app")] = magosv1.PhaseFailed
		f.reset(k("c1", "app"), magosv1.ReasonNewRevisionDetected)
		f.decide()
		f.start()
		f.finish()
		f.now = t0.Add(25 * time.Second)
		d := f.decide()
		assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0)
		if len(d.Grants) != 0 {
			t.Fatalf("grants %v after a failure in the soak", d.Grants)
		}
	})

	t.Run("a success recorded before the commit it rolls out started does not count", func(t *testing.T) {
		f := newFleet()
		settleDev(f)
		f.now = t0.Add(time.Second)
		f.decide()
		// The recorded success predates the commit being rolled out (a status written before the
		// commit changed): the step succeeded now, and soaks from now.
		f.rollout.Status.Revisions[0].Since = metav1.NewTime(t0.Add(5 * time.Second))
		f.now = t0.Add(22 * time.Second)
		d := f.decide()
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonSoaking, 0)
		if !d.Steps[0].SucceededAt.Time.Equal(f.now) {
			t.Fatalf("succeededAt %v, want now %v", d.Steps[0].SucceededAt, f.now)
		}
	})
}

// TestDecideProgressDeadline: a current step that has not progressed for spec.progressDeadline
// is reported (DeadlineExceeded), whether its runs are stuck or its cluster is silent; any change
// of the step's counts is progress; a paused or soaking Rollout is not held to it; and the
// decision asks to be made again when the deadline would pass.
func TestDecideProgressDeadline(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	newFleet := func(deadline time.Duration) *fleet {
		ro := rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("prod", "env", "prod"))
		if deadline > 0 {
			ro.Spec.ProgressDeadline = &metav1.Duration{Duration: deadline}
		}
		return &fleet{t: t, now: t0, clusters: clusters("c1", "c2"),
			ws: []Workspace{newWS("c1", "app", "env", "dev"), newWS("c2", "app", "env", "prod")}, rollout: ro}
	}
	at := func(f *fleet, d time.Duration) Decision { f.now = t0.Add(d); return f.decide() }

	t.Run("a granted run that does not start", func(t *testing.T) {
		f := newFleet(10 * time.Second)
		if d := at(f, 0); d.DeadlineExceeded || !d.LastProgress.Equal(t0) || d.RecheckAfter != 10*time.Second {
			t.Fatalf("at 0s: exceeded %v, last progress %v, recheck %v", d.DeadlineExceeded, d.LastProgress, d.RecheckAfter)
		}
		if d := at(f, 6*time.Second); d.DeadlineExceeded || !d.LastProgress.Equal(t0) || d.RecheckAfter != 4*time.Second {
			t.Fatalf("at 6s: exceeded %v, last progress %v, recheck %v", d.DeadlineExceeded, d.LastProgress, d.RecheckAfter)
		}
		if d := at(f, 10*time.Second); !d.DeadlineExceeded || d.Phase != magosv1.PhaseReconciling {
			t.Fatalf("at 10s: exceeded %v, phase %s: want exceeded, the Rollout still going", d.DeadlineExceeded, d.Phase)
		}
		f.start() // the run starts: progress
		if d := at(f, 12*time.Second); d.DeadlineExceeded || !d.LastProgress.Equal(t0.Add(12*time.Second)) {
			t.Fatalf("after the run started: exceeded %v, last progress %v", d.DeadlineExceeded, d.LastProgress)
		}
	})

	t.Run("a silent cluster", func(t *testing.T) {
		f := newFleet(10 * time.Second)
		at(f, 0)
		f.start()
		f.finish()
		c := f.clusters["c2"]
		c.Available, c.Reason = false, "AgentSilent"
		f.clusters["c2"] = c
		d := at(f, time.Second)
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 1)
		if d.DeadlineExceeded {
			t.Fatal("exceeded at once")
		}
		if d := at(f, 11*time.Second); !d.DeadlineExceeded {
			t.Fatalf("waiting 10s on a silent cluster: not exceeded (last progress %v)", d.LastProgress)
		}
	})

	t.Run("paused and soaking Rollouts are not held to it", func(t *testing.T) {
		f := newFleet(10 * time.Second)
		f.rollout.Spec.Paused = true
		at(f, 0)
		if d := at(f, time.Hour); d.DeadlineExceeded || !d.LastProgress.Equal(f.now) {
			t.Fatalf("paused: exceeded %v, last progress %v", d.DeadlineExceeded, d.LastProgress)
		}
		f = newFleet(10 * time.Second)
		f.rollout.Spec.Strategy.Steps[0].MinSuccessTime = &metav1.Duration{Duration: time.Hour}
		at(f, 0)
		f.start()
		f.finish()
		at(f, time.Second)
		d := at(f, 30*time.Minute)
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonSoaking, 0)
		if d.DeadlineExceeded || d.RecheckAfter != 30*time.Minute+time.Second {
			t.Fatalf("soaking: exceeded %v, recheck %v (want the soak's end)", d.DeadlineExceeded, d.RecheckAfter)
		}
	})

	t.Run("without a deadline nothing is tracked", func(t *testing.T) {
		f := newFleet(0)
		at(f, 0)
		if d := at(f, time.Hour); d.DeadlineExceeded || !d.LastProgress.IsZero() || d.RecheckAfter != 0 {
			t.Fatalf("no deadline: exceeded %v, last progress %v, recheck %v", d.DeadlineExceeded, d.LastProgress, d.RecheckAfter)
		}
	})
}

// TestDecideChangeWindows: outside every change window nothing new is granted and unused grants
// are withdrawn (runs already started keep theirs); the decision names when the next window
// opens and asks to be made again then; windows that cannot be read fail the Rollout.
func TestDecideChangeWindows(t *testing.T) {
	weekdays := []magosv1.ChangeWindow{{Schedule: "0 9 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}}}
	thursday := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	newFleet := func(windows []magosv1.ChangeWindow) *fleet {
		ro := rolloutOf(stepSpec("prod", "env", "prod"))
		ro.Spec.ChangeWindows = windows
		return &fleet{t: t, clusters: clusters("c1"), rollout: ro, ws: []Workspace{
			newWS("c1", "a", "env", "prod").with(grantedNow), // granted earlier, not started
			newWS("c1", "b", "env", "prod").with(inPhase(magosv1.PhaseApplying, magosv1.ReasonApplying), grantedNow),
			newWS("c1", "c", "env", "prod"),
		}}
	}

	f := newFleet(weekdays)
	f.now = thursday.Add(8 * time.Hour)
	d := f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonOutsideChangeWindow, 0)
	if len(d.Grants) != 0 {
		t.Fatalf("grants %v outside the window", d.Grants)
	}
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "a")}) // b's run started: it finishes
	if !d.NextWindowAt.Equal(thursday.Add(9*time.Hour)) || d.RecheckAfter != time.Hour {
		t.Fatalf("next window %v, recheck %v; want 09:00 in 1h", d.NextWindowAt, d.RecheckAfter)
	}
	if !strings.Contains(d.Message, "at 2026-12-03T09:00:00Z") || d.Steps[0].Phase != magosv1.StepWaiting {
		t.Fatalf("message %q, step %s", d.Message, d.Steps[0].Phase)
	}

	f.now = thursday.Add(9 * time.Hour)
	d = f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
	assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "a"), k("c1", "c")})
	if d.RecheckAfter != 8*time.Hour || !d.NextWindowAt.IsZero() {
		t.Fatalf("inside the window: recheck %v (want when it closes, 8h), next window %v", d.RecheckAfter, d.NextWindowAt)
	}

	f.now = thursday.Add(17 * time.Hour) // closed again: the unused grants go
	d = f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonOutsideChangeWindow, 0)
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "a"), k("c1", "c")})

	for _, bad := range []struct {
		windows []magosv1.ChangeWindow
		want    string
	}{
		{[]magosv1.ChangeWindow{{Schedule: "0 25 * * *", Duration: metav1.Duration{Duration: time.Hour}}}, `schedule "0 25 * * *"`},
		{[]magosv1.ChangeWindow{{Schedule: "0 9 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Nowhere/Else"}}, `unknown timeZone "Nowhere/Else"`},
		{[]magosv1.ChangeWindow{{Schedule: "0 0 30 2 *", Duration: metav1.Duration{Duration: time.Hour}}}, "no change window ever opens"},
	} {
		f := newFleet(bad.windows)
		f.now = thursday
		d := f.decide()
		assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonInvalidChangeWindow, 0)
		if len(d.Grants) != 0 || !strings.Contains(d.Message, bad.want) {
			t.Fatalf("%v: grants %v, message %q (want %q)", bad.windows, d.Grants, d.Message, bad.want)
		}
	}
}
