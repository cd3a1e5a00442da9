package hubcontrollers_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/devfleet"
)

// acrossThenAfter is a Rollout of two steps: "across" (tier=across: a Workspace in each region)
// then "after" (tier=after), the first step adjusted by mutate.
func acrossThenAfter(ns, project string, mutate func(*magosv1.RolloutStep)) *magosv1.Rollout {
	ro := hubtest.Rollout(ns, project, []string{"across", "after"}, map[string]string{"tier": "across"}, map[string]string{"tier": "after"})
	mutate(&ro.Spec.Strategy.Steps[0])
	return ro
}

// acrossWorkspaces creates the Workspace app in every region (tier=across) and last in us-east-1
// (tier=after), waits until the hub mirrors them, and returns the keys of the first step's and
// of last.
func (w *world) acrossWorkspaces(t *testing.T, ns, project string) (across []string, after string) {
	t.Helper()
	w.Namespace(t, ns)
	for _, r := range regions {
		w.Workspace(t, r, ns, "app", project, map[string]string{"tier": "across"})
		across = append(across, key(r, ns, "app"))
	}
	w.Workspace(t, usEast, ns, "last", project, map[string]string{"tier": "after"})
	after = key(usEast, ns, "last")
	w.WaitMirrored(t, append(slices.Clone(across), after)...)
	return across, after
}

// TestRolloutControls runs the step controls of a Rollout (maxConcurrency, maxFailures,
// minSuccessTime) across a hub and three spokes, with the real binaries and tofu, and checks each
// on records the hub does not write: the spokes' Workspaces and the module's own ledger.
func TestRolloutControls(t *testing.T) {
	// A stopped agent's cluster turns unavailable 10s after its last heartbeat.
	w := start(t, devfleet.Options{HubLeaseDuration: 10 * time.Second})

	t.Run("maxConcurrency 1: one Workspace of the step runs at a time across the clusters", func(t *testing.T) {
		ns := "concurrency"
		for _, r := range regions {
			w.Hold(t, r, ns, "app")
		}
		across, after := w.acrossWorkspaces(t, ns, "conc")
		w.CreateHub(t, acrossThenAfter(ns, "conc", func(s *magosv1.RolloutStep) { s.MaxConcurrency = ptrIntOrString("1") }))

		// Each apply is held until it is seen: release them one by one as they come.
		released := map[string]bool{}
		testenv.Eventually(t, 3*wait, func() error {
			for _, a := range w.Applies(t, ns) {
				if p := strings.SplitN(a, "/", 3); slices.Contains(across, a) && !released[a] {
					released[a] = true
					w.Release(t, p[0], p[1], p[2])
				}
			}
			if len(released) < len(across) {
				return fmt.Errorf("released %d of %d held applies", len(released), len(across))
			}
			return nil
		})
		ro := w.WaitRollout(t, ns, "conc", Completed)
		if peak := w.grants.Peak(ns); peak != 1 {
			t.Errorf("at most %d Workspaces of the step were running at once (seen on the spokes), want 1", peak)
		}
		w.assertStepOrder(t, ns, across, []string{after})
		if s := ro.Status.Steps[0]; s.MaxConcurrency != 1 {
			t.Errorf("status.steps[0].maxConcurrency = %d, want 1", s.MaxConcurrency)
		}
	})

	t.Run("maxFailures 1: a failed Workspace is tolerated, reported, and the Rollout goes on", func(t *testing.T) {
		ns := "budget"
		w.FailNext(t, euWest, ns, "app")
		_, after := w.acrossWorkspaces(t, ns, "budget")
		w.CreateHub(t, acrossThenAfter(ns, "budget", func(s *magosv1.RolloutStep) { s.MaxFailures = ptrIntOrString("1") }))

		ro := w.WaitRollout(t, ns, "budget", Completed)
		failed := key(euWest, ns, "app")
		if ws := w.SpokeWorkspace(t, euWest, ns, "app"); ws.Status.Phase != magosv1.PhaseFailed {
			t.Errorf("%s is %s, want Failed (the module failed its apply)", failed, ws.Status.Phase)
		}
		if s := ro.Status.Steps[0]; s.Phase != magosv1.StepCompleted || s.Failed != 1 || s.MaxFailures != 1 || s.Applied != 2 {
			t.Errorf("step across: %+v, want Completed with 2 applied and 1 of 1 failure tolerated", s)
		}
		if !strings.Contains(ro.Status.Message, "1 failed Workspace(s) tolerated") {
			t.Errorf("message %q does not report the tolerated failure", ro.Status.Message)
		}
		// The next step ran, after every Workspace of the first had its apply.
		applies := w.Applies(t, ns)
		if len(applies) != 4 || applies[3] != after {
			t.Errorf("applies %v, want the three of step across, then %s", applies, after)
		}
		if notes := w.eventNotes(t, ns, "Rollout", "budget"); slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, magosv1.ReasonStepFailed) }) {
			t.Errorf("the Rollout halted on the tolerated failure on its way: %q", notes)
		}
		testenv.Eventually(t, wait, func() error {
			want := "FailureTolerated: Step 1/2 across: 1 failed Workspace(s) tolerated (maxFailures 1): " + failed
			if notes := w.eventNotes(t, ns, "Rollout", "budget"); !slices.Contains(notes, want) {
				return fmt.Errorf("no Event %q in %q", want, notes)
			}
			return nil
		})

		// Retried from the hub alone (the module no longer fails): the agent carries the request
		// down, the Rollout grants the new run, and the module applies it.
		out := w.magosctl(t, "retry", "app", "--cluster", euWest, "-n", ns)
		if !strings.Contains(out, "retry of run ") {
			t.Errorf("magosctl retry --cluster: %s", out)
		}
		testenv.Eventually(t, wait, func() error {
			ws := w.SpokeWorkspace(t, euWest, ns, "app")
			if ws.Status.Phase != magosv1.PhaseApplied {
				return fmt.Errorf("%s is %s/%s, want Applied after the retry", failed, ws.Status.Phase, ws.Status.Reason)
			}
			return nil
		})
		if applies := w.Applies(t, ns); len(applies) != 5 || applies[4] != failed {
			t.Errorf("applies %v, want the retried %s last", applies, failed)
		}
		if notes := w.spokeEventNotes(t, euWest, ns, "app"); !slices.ContainsFunc(notes, func(n string) bool {
			return strings.Contains(n, "requested on the hub by magos-test-admin")
		}) {
			t.Errorf("no Event on the spoke Workspace says who asked for the retry: %q", notes)
		}
		w.WaitRollout(t, ns, "budget", Completed)
	})

	t.Run("requireApproval: nothing applies before the approval, and a plan changed after it voids it", func(t *testing.T) {
		ns := "approval"
		// The step applies one Workspace at a time, in key order: ap-south-1's apply goes first and
		// is held while us-east-1's plan changes.
		w.Hold(t, apSouth, ns, "app")
		_, after := w.acrossWorkspaces(t, ns, "gate")
		w.CreateHub(t, acrossThenAfter(ns, "gate", func(s *magosv1.RolloutStep) {
			s.RequireApproval, s.MaxConcurrency = true, ptrIntOrString("1")
		}))

		ro := w.WaitRollout(t, ns, "gate", awaitingApproval(3, "magosctl rollout approve gate --step across"))
		for _, p := range ro.Status.Steps[0].Plans {
			parts := strings.SplitN(p.Workspace, "/", 3)
			ws := w.SpokeWorkspace(t, parts[0], parts[1], parts[2])
			if ws.Status.Phase != magosv1.PhasePlanned || ws.Status.PlanDigest != p.Digest || ws.Status.CurrentRevision != p.Revision {
				t.Errorf("%s is %s with plan %q of %s, want Planned with the plan the Rollout lists (%s of %s)",
					p.Workspace, ws.Status.Phase, ws.Status.PlanDigest, ws.Status.CurrentRevision, p.Digest, p.Revision)
			}
		}
		if applies := w.Applies(t, ns); len(applies) != 0 {
			t.Fatalf("applied %v before any approval", applies)
		}
		status := w.magosctl(t, "rollout", "status", "gate", "-n", ns)
		if !strings.Contains(status, "step across awaits approval of 3 plan(s)") {
			t.Errorf("rollout status does not show the wait:\n%s", status)
		}

		w.magosctl(t, "rollout", "approve", "gate", "--step", "across", "-n", ns)
		testenv.Eventually(t, wait, func() error {
			if a := w.Applies(t, ns); !slices.Contains(a, key(apSouth, ns, "app")) {
				return fmt.Errorf("applies %v: ap-south-1's has not started", a)
			}
			return nil
		})
		// us-east-1's plan changes (its variables: another VariableSet), after the approval and
		// before its apply: it plans again, and the approval does not name the new plan.
		w.variableSet(t, usEast, ns, "app-v2")
		spoke := w.SpokeWorkspace(t, usEast, ns, "app")
		spoke.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "app-v2"}}
		if err := w.f.Client(usEast).Update(w.ctx, spoke); err != nil {
			t.Fatal(err)
		}
		w.Release(t, apSouth, ns, "app")
		ro = w.WaitRollout(t, ns, "gate", awaitingApproval(1, "no longer holds: the plan of "+key(usEast, ns, "app")+" is now "))
		if p := ro.Status.Steps[0].Plans[0]; p.Workspace != key(usEast, ns, "app") {
			t.Errorf("awaiting approval of %+v, want us-east-1's new plan", p)
		}
		if a := w.Applies(t, ns); !slices.Equal(a, []string{key(apSouth, ns, "app"), key(euWest, ns, "app")}) {
			t.Errorf("applies %v, want ap-south-1's and eu-west-1's approved plans only", a)
		}
		testenv.Eventually(t, wait, func() error {
			if notes := w.eventNotes(t, ns, "Rollout", "gate"); !slices.ContainsFunc(notes, func(n string) bool {
				return strings.HasPrefix(n, magosv1.ReasonApprovalVoided+": Step across: the approval by ")
			}) {
				return fmt.Errorf("no ApprovalVoided Event in %q", notes)
			}
			return nil
		})

		approvedAt := time.Now()
		w.magosctl(t, "rollout", "approve", "gate", "--step", "across", "-n", ns)
		w.WaitRollout(t, ns, "gate", Completed)
		applies := w.appliesAt(t, ns)
		var got []string
		for _, a := range applies {
			got = append(got, a.key)
		}
		if want := []string{key(apSouth, ns, "app"), key(euWest, ns, "app"), key(usEast, ns, "app-v2"), after}; !slices.Equal(got, want) {
			t.Fatalf("applies %v, want %v (us-east-1 only its changed plan, once re-approved)", got, want)
		}
		if applies[2].at.Before(approvedAt) {
			t.Errorf("us-east-1's changed plan applied at %v, before its approval at %v", applies[2].at, approvedAt)
		}
	})

	t.Run("planFirst: the whole fleet plans before the first apply, and each step applies the plan previewed", w.planFirst)

	t.Run("targets Frozen: a Workspace that appears during a change never slips into a step that has passed", func(t *testing.T) {
		ns := "frozen"
		w.Hold(t, euWest, ns, "web-prod") // prod applies, held, while the new Workspace appears
		dev, prod := w.devProd(t, ns, false)
		ro := devProdRollout(ns)
		ro.Spec.Targets = magosv1.TargetsFrozen
		w.CreateHub(t, ro)
		testenv.Eventually(t, wait, func() error {
			if a := w.Applies(t, ns); !slices.Equal(a, []string{dev, prod}) {
				return fmt.Errorf("applies %v, want %s then %s (held)", a, dev, prod)
			}
			return nil
		})

		// A dev Workspace appears in ap-south-1 while prod applies: with Dynamic targets the
		// Rollout would go back to dev for it.
		w.Workspace(t, apSouth, ns, "web-late", "web", map[string]string{"env": "dev"})
		late := key(apSouth, ns, "web-late")
		w.WaitMirrored(t, late)
		w.WaitRollout(t, ns, "web", func(ro *magosv1.Rollout) error {
			if len(ro.Status.Steps) != 2 || ro.Status.Steps[0].Late != 1 {
				return fmt.Errorf("steps %+v: want step dev with 1 late Workspace", ro.Status.Steps)
			}
			if ro.Status.CurrentStepName != "prod" {
				return fmt.Errorf("current step %s, want prod (never back to dev)", ro.Status.CurrentStepName)
			}
			return nil
		})
		if status := w.magosctl(t, "rollout", "status", "web", "-n", ns); !strings.Contains(status, "(late: joins with the next change)") {
			t.Errorf("rollout status does not mark the late Workspace:\n%s", status)
		}
		w.Release(t, euWest, ns, "web-prod")
		w.WaitRollout(t, ns, "web", Completed)
		if g := w.grants.For(late); len(g) != 0 {
			t.Errorf("the late Workspace was granted %v during the change", g)
		}
		if a := w.Applies(t, ns); !slices.Equal(a, []string{dev, prod}) {
			t.Errorf("applies %v, want only %s and %s", a, dev, prod)
		}
	})

	t.Run("minSuccessTime 20s: the next step starts no earlier than 20s after the step is Applied", func(t *testing.T) {
		ns := "soak"
		dev, prod := w.devProd(t, ns, false)
		ro := devProdRollout(ns)
		ro.Spec.Strategy.Steps[0].MinSuccessTime = &metav1.Duration{Duration: 20 * time.Second}
		w.CreateHub(t, ro)

		soaking := w.WaitRollout(t, ns, "web", phase(magosv1.PhaseReconciling, magosv1.ReasonSoaking))
		s := soaking.Status.Steps[0]
		if s.Phase != magosv1.StepSoaking || s.SucceededAt == nil || s.SoakEndsAt == nil || s.SoakEndsAt.Sub(s.SucceededAt.Time) != 20*time.Second {
			t.Errorf("soaking step: %+v, want Soaking for 20s from succeededAt", s)
		}
		w.WaitRollout(t, ns, "web", Completed)
		applies := w.appliesAt(t, ns)
		if len(applies) != 2 || applies[0].key != dev || applies[1].key != prod {
			t.Fatalf("applies %v, want %s then %s", applies, dev, prod)
		}
		// The module's own clock: prod's apply started at least the soak after dev's apply started
		// (dev's apply ended, was mirrored and decided after it started).
		if gap := applies[1].at.Sub(applies[0].at); gap < 20*time.Second {
			t.Errorf("prod applied %v after dev, want at least the 20s soak", gap)
		}
		if notes := w.eventNotes(t, ns, "Rollout", "web"); !slices.ContainsFunc(notes, func(n string) bool {
			return strings.HasPrefix(n, "Soaking: Step dev is soaking until ")
		}) {
			t.Errorf("no Soaking Event in %q", notes)
		}
	})

	t.Run("changeWindows: a grant waits for the next window, and the run starts in it", func(t *testing.T) {
		ns := "window"
		w.Namespace(t, ns)
		w.Workspace(t, apSouth, ns, "app", "window", map[string]string{"env": "prod"})
		app := key(apSouth, ns, "app")
		w.WaitMirrored(t, app)
		// A window opens at every minute and stays open 20s: start the Rollout while it is closed
		// and stays so for a while (the wall clock is read, nothing waits for the system).
		testenv.Eventually(t, time.Minute, func() error {
			if s := time.Now().UTC().Second(); s < 25 || s > 40 {
				return fmt.Errorf("second %d of the minute: waiting for 25 to 40, when the window is closed", s)
			}
			return nil
		})
		ro := hubtest.Rollout(ns, "window", []string{"prod"}, map[string]string{"env": "prod"})
		ro.Spec.ChangeWindows = []magosv1.ChangeWindow{{Schedule: "* * * * *", Duration: metav1.Duration{Duration: 20 * time.Second}}}
		w.CreateHub(t, ro)

		held := w.WaitRollout(t, ns, "window", phase(magosv1.PhaseReconciling, magosv1.ReasonOutsideChangeWindow))
		next := held.Status.NextWindowAt
		if next == nil || next.Second() != 0 || !next.After(time.Now()) {
			t.Fatalf("status.nextWindowAt %v, want the start of the next minute", next)
		}
		if err := noGrants(w.grants, app)(); err != nil {
			t.Errorf("outside the window: %v", err)
		}
		w.WaitRollout(t, ns, "window", Completed)
		applies := w.appliesAt(t, ns)
		if len(applies) != 1 || applies[0].at.Before(next.Time) {
			t.Errorf("applies %v, want one, no earlier than the window's opening at %v", applies, next.Time)
		}
	})

	t.Run("progressDeadline 15s: a silent cluster turns into Progressing=False, and clears when it answers", w.progressDeadline)
}

// planFirst is TestRolloutControls' subtest of spec.planFirst, kept apart for its length. The
// later step's Workspace cannot plan at first: the Rollout must stop before anything applies
// (the module's ledger stays empty) while the first step's plans wait; once it plans, the steps
// apply in order, each apply bound (on the spokes) to the digest the preview listed. A plan that
// changes after the preview is shown beside the one previewed.
func (w *world) planFirst(t *testing.T) {
	ns := "preview"
	w.FailPlans(t, usEast, ns, "last")
	w.Hold(t, apSouth, ns, "app") // the first step's applies go on while "last" plans again
	across, after := w.acrossWorkspaces(t, ns, "preview")
	ro := acrossThenAfter(ns, "preview", func(*magosv1.RolloutStep) {})
	ro.Spec.PlanFirst = true
	w.CreateHub(t, ro)

	stopped := w.WaitRollout(t, ns, "preview", func(ro *magosv1.Rollout) error {
		if err := phase(magosv1.PhaseFailed, magosv1.ReasonPreviewFailed)(ro); err != nil {
			return err
		}
		for _, p := range ro.Status.Steps[0].Preview {
			if p.Result != magosv1.PreviewPlanned {
				return fmt.Errorf("preview of step across: %s is %s, want Planned", p.Workspace, p.Result)
			}
		}
		return nil
	})
	if want := "Preview of step after: 1 Workspace(s) failed, more than its maxFailures (0), so nothing applies: " + after + " (PlanFailed)"; stopped.Status.Message != want {
		t.Errorf("message %q, want %q", stopped.Status.Message, want)
	}
	if a := w.Applies(t, ns); len(a) != 0 {
		t.Fatalf("applied %v although the preview of step after failed", a)
	}
	previewed := map[string]string{}
	for _, p := range stopped.Status.Steps[0].Preview {
		parts := strings.SplitN(p.Workspace, "/", 3)
		ws := w.SpokeWorkspace(t, parts[0], parts[1], parts[2])
		if ws.Status.Phase != magosv1.PhasePlanned || !ws.Status.PlanOnly || ws.Status.PlanDigest != p.Digest || p.Add != 1 {
			t.Errorf("%s is %s (plan only %v) with plan %q, want Planned with the plan the preview lists (%+v)",
				p.Workspace, ws.Status.Phase, ws.Status.PlanOnly, ws.Status.PlanDigest, p)
		}
		previewed[p.Workspace] = p.Digest
	}
	if len(previewed) != len(across) {
		t.Fatalf("preview of step across lists %v, want %v", previewed, across)
	}
	status := w.magosctl(t, "rollout", "status", "preview", "-n", ns)
	for _, want := range []string{
		"step across, cluster " + apSouth + ": 1/1 planned: 1 to add, 0 to change, 0 to destroy",
		"step after, cluster " + usEast + ": 0/1 planned: 0 to add, 0 to change, 0 to destroy; failed: " + after,
	} {
		if !strings.Contains(status, want) {
			t.Errorf("rollout status does not show %q:\n%s", want, status)
		}
	}

	// The plan is fixed and retried from the hub: the preview completes, and the first step
	// applies (ap-south-1's apply is held).
	w.PlanAgain(t, usEast, ns, "last")
	fixed := time.Now()
	w.magosctl(t, "retry", "last", "--cluster", usEast, "-n", ns)
	testenv.Eventually(t, wait, func() error {
		if a := w.Applies(t, ns); !slices.Contains(a, key(apSouth, ns, "app")) {
			return fmt.Errorf("applies %v: ap-south-1's has not started", a)
		}
		return nil
	})
	if ws := w.SpokeWorkspace(t, usEast, ns, "last"); ws.Status.Phase != magosv1.PhasePlanned || ws.Status.PlanDigest == "" {
		t.Errorf("%s is %s/%s when the first step applies, want Planned: the whole fleet plans first", after, ws.Status.Phase, ws.Status.Reason)
	}
	// "last" plans again with other variables: its new plan differs from the one previewed.
	w.variableSet(t, usEast, ns, "last-v2")
	spoke := w.SpokeWorkspace(t, usEast, ns, "last")
	spoke.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "last-v2"}}
	if err := w.f.Client(usEast).Update(w.ctx, spoke); err != nil {
		t.Fatal(err)
	}
	changed := w.WaitRollout(t, ns, "preview", func(ro *magosv1.Rollout) error {
		p := ro.Status.Steps[1].Preview[0]
		if p.Previewed == nil || p.Digest == "" || p.Digest == p.Previewed.Digest {
			return fmt.Errorf("preview of %s: %+v, want its new plan beside the one previewed", after, p)
		}
		return nil
	})
	newPlan := changed.Status.Steps[1].Preview[0].Digest
	if status := w.magosctl(t, "rollout", "status", "preview", "-n", ns); !strings.Contains(status, "step after: the plan of "+after+" changed since the preview: previewed plan ") {
		t.Errorf("rollout status does not show the changed plan:\n%s", status)
	}
	testenv.Eventually(t, wait, func() error {
		if notes := w.eventNotes(t, ns, "Rollout", "preview"); !slices.ContainsFunc(notes, func(n string) bool {
			return strings.HasPrefix(n, magosv1.ReasonPlanChanged+": Step after: the plan of "+after+" changed since the preview")
		}) {
			return fmt.Errorf("no PlanChanged Event in %q", notes)
		}
		return nil
	})

	w.Release(t, apSouth, ns, "app")
	w.WaitRollout(t, ns, "preview", Completed)
	applies := w.appliesAt(t, ns)
	var got []string
	for _, a := range applies {
		got = append(got, a.key)
		if a.at.Before(fixed) {
			t.Errorf("%s applied at %v, before the preview could complete (%v)", a.key, a.at, fixed)
		}
	}
	assertOrder(t, "applies", got, across, []string{key(usEast, ns, "last-v2")})
	for _, k := range across {
		if plans := w.grants.PlansFor(k); !slices.Equal(plans, []string{previewed[k]}) {
			t.Errorf("%s was granted the apply of plans %v, want only the plan previewed, %s", k, plans, previewed[k])
		}
	}
	if plans := w.grants.PlansFor(after); !slices.Equal(plans, []string{newPlan}) {
		t.Errorf("%s was granted the apply of plans %v, want its new plan %s", after, plans, newPlan)
	}
}

// TestRolloutControls' last subtest, kept apart for its length: a silent cluster.
func (w *world) progressDeadline(t *testing.T) {
	ns := "deadline"
	dev, prod := w.devProd(t, ns, false)
	resume := w.Stop(t, euWest) // prod's agent goes silent before the Rollout starts
	ro := devProdRollout(ns)
	ro.Spec.ProgressDeadline = &metav1.Duration{Duration: 15 * time.Second}
	w.CreateHub(t, ro)

	this := map[string]string{"namespace": ns, "name": "web"}
	exceeded := w.WaitRollout(t, ns, "web", func(ro *magosv1.Rollout) error {
		c := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionProgressing)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != magosv1.ReasonProgressDeadlineExceeded {
			return fmt.Errorf("Progressing condition %+v, want False/ProgressDeadlineExceeded", c)
		}
		return nil
	})
	if exceeded.Status.CurrentStepName != "prod" || exceeded.Status.Phase != magosv1.PhaseReconciling {
		t.Errorf("deadline exceeded at step %q, phase %s; want prod, still Reconciling", exceeded.Status.CurrentStepName, exceeded.Status.Phase)
	}
	if got := w.Applies(t, ns); len(got) != 1 || got[0] != dev {
		t.Errorf("applies %v, want only %s", got, dev)
	}
	testenv.Eventually(t, wait, func() error {
		if v := w.metricValue(t, "magos_rollout_progress_deadline_exceeded", this); v != 1 {
			return fmt.Errorf("magos_rollout_progress_deadline_exceeded = %v, want 1", v)
		}
		if notes := w.eventNotes(t, ns, "Rollout", "web"); !slices.ContainsFunc(notes, func(n string) bool {
			return strings.HasPrefix(n, "ProgressDeadlineExceeded: Step prod has not progressed for 15s")
		}) {
			return fmt.Errorf("no ProgressDeadlineExceeded Event in %q", notes)
		}
		return nil
	})

	resume() // the cluster comes back: the step progresses, and the condition clears
	done := w.WaitRollout(t, ns, "web", Completed)
	if c := meta.FindStatusCondition(done.Status.Conditions, magosv1.ConditionProgressing); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Progressing condition after completion: %+v, want True", c)
	}
	w.assertStepOrder(t, ns, []string{dev}, []string{prod})
	if v := w.metricValue(t, "magos_rollout_progress_deadline_exceeded", this); v != 0 {
		t.Errorf("magos_rollout_progress_deadline_exceeded = %v after completion, want 0", v)
	}
}

// magosctl runs magosctl against the hub, as an operator would, and returns its output.
func (w *world) magosctl(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := cli.NewCommand(&out, &out)
	cmd.SetArgs(append([]string{"--kubeconfig", w.f.Kubeconfig("hub")}, args...))
	if err := cmd.ExecuteContext(w.ctx); err != nil {
		t.Fatalf("magosctl %v: %v: %s", args, err, out.String())
	}
	return out.String()
}

// awaitingApproval checks that a Rollout awaits approval of n plans of its first step, and that
// its message contains want.
func awaitingApproval(n int, want string) func(*magosv1.Rollout) error {
	return func(ro *magosv1.Rollout) error {
		if err := phase(magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval)(ro); err != nil {
			return err
		}
		if got := len(ro.Status.Steps[0].Plans); got != n || !strings.Contains(ro.Status.Message, want) {
			return fmt.Errorf("awaiting approval of %d plan(s) (%s), want %d and a message with %q", got, ro.Status.Message, n, want)
		}
		return nil
	}
}

func ptrIntOrString(v string) *intstr.IntOrString {
	x := intstr.Parse(v)
	return &x
}
