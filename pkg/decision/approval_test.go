package decision

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// approvalFleet is dev (c1/a), then prod (c2/b, c3/c) requiring approval, then after (c1/z).
func approvalFleet(t *testing.T, mutate func(*magosv1.RolloutStep)) *fleet {
	prod := stepSpec("prod", "env", "prod")
	prod.RequireApproval = true
	if mutate != nil {
		mutate(&prod)
	}
	return &fleet{t: t, clusters: clusters("c1", "c2", "c3"), plans: map[Key]string{},
		ws: []Workspace{
			newWS("c1", "a", "env", "dev"), newWS("c2", "b", "env", "prod"), newWS("c3", "c", "env", "prod"),
			newWS("c1", "z", "env", "after"),
		},
		rollout: rolloutOf(stepSpec("dev", "env", "dev"), prod, stepSpec("after", "env", "after"))}
}

// approve writes the approval of the plans a decision lists for step prod, as magosctl does.
func (f *fleet) approve(d Decision, by string) {
	a := magosv1.StepApproval{Step: "prod", ApprovedBy: by, ApprovedAt: metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))}
	for _, p := range d.Steps[1].Plans {
		a.Plans = append(a.Plans, magosv1.ApprovedPlan{Workspace: p.Workspace, Revision: p.Revision, Digest: p.Digest})
	}
	f.rollout.Spec.Approvals = []magosv1.StepApproval{a}
}

// appliedKeys are the Workspaces applied so far, in order.
func (f *fleet) appliedKeys() []Key {
	var out []Key
	for _, a := range f.applies {
		out = append(out, a.key)
	}
	return out
}

// TestDecideRequireApproval walks a step that requires approval: its Workspaces plan under
// plan-only grants and wait; nothing of it or of a later step applies before an approval that
// names every plan; then each applies exactly its approved plan, and the Rollout goes on.
func TestDecideRequireApproval(t *testing.T) {
	b, c, z := k("c2", "b"), k("c3", "c"), k("c1", "z")
	f := approvalFleet(t, nil)
	_, d := f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 1)
	if s := d.Steps[1]; s.Phase != magosv1.StepAwaitingApproval || len(s.Plans) != 2 || s.Running != 0 || s.Approval != nil {
		t.Fatalf("step prod: %+v, want AwaitingApproval with 2 plans, none running", s)
	}
	if p := d.Steps[1].Plans[0]; p.Workspace != b.String() || p.Digest != "plan-b@rev-1" || p.Revision != "rev-1" || p.Run == "" {
		t.Errorf("plan %+v, want b's plan plan-b@rev-1 of rev-1", p)
	}
	if !strings.Contains(d.Message, "magosctl rollout approve payments-platform --step prod") {
		t.Errorf("message %q does not say how to approve", d.Message)
	}
	assertKeys(t, "applies before the approval", f.appliedKeys(), []Key{k("c1", "a")})
	for _, g := range f.grants {
		if (g.Key == b || g.Key == c) && (!g.PlanOnly || g.Plan != "") {
			t.Errorf("grant %+v to a Workspace of prod before approval: want a plan-only grant", g)
		}
		if g.Key == z {
			t.Errorf("grant %+v to step after before prod was approved", g)
		}
	}

	f.approve(d, "alice")
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	assertKeys(t, "applies", f.appliedKeys(), []Key{k("c1", "a"), b, c, z})
	for _, g := range f.grants {
		if (g.Key == b || g.Key == c) && !g.PlanOnly && g.Plan != "plan-"+g.Key.Name+"@rev-1" {
			t.Errorf("apply grant %+v: want it bound to the approved plan", g)
		}
	}
}

// TestDecideApprovalVoidedByAChangedPlan: a plan that changes after the approval voids it: the
// plans still covered apply, the changed one waits, and the step asks for approval again.
func TestDecideApprovalVoidedByAChangedPlan(t *testing.T) {
	b, c := k("c2", "b"), k("c3", "c")
	f := approvalFleet(t, nil)
	_, d := f.walk()
	f.approve(d, "alice")
	// c's spec changes before the hub acts on the approval: its run starts over, and its next
	// plan differs.
	f.reset(c, magosv1.ReasonConfigurationChanged)
	f.plans[c] = "plan-c-changed"
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 1)
	assertKeys(t, "applies", f.appliedKeys(), []Key{k("c1", "a"), b})
	want := "the approval by alice at 2026-12-03T10:00:00Z no longer holds: the plan of c3/payments/c is now plan-c-changed, it approved plan-c@rev-1"
	if d.ApprovalVoided != want || !strings.HasSuffix(d.Message, want) {
		t.Errorf("voided %q, message %q; want %q", d.ApprovalVoided, d.Message, want)
	}
	if s := d.Steps[1]; len(s.Plans) != 1 || s.Plans[0].Digest != "plan-c-changed" || s.Approval != nil {
		t.Errorf("step prod %+v: want c's new plan awaiting approval, no approval holding", s)
	}
	f.approve(d, "bob")
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	assertKeys(t, "applies", f.appliedKeys(), []Key{k("c1", "a"), b, c, k("c1", "z")})
}

// TestDecideApprovalMustNameEveryPlan: an approval that misses a plan, or names another digest
// or commit, grants nothing.
func TestDecideApprovalMustNameEveryPlan(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*magosv1.StepApproval)
		why    string
	}{
		{"a plan left out", func(a *magosv1.StepApproval) { a.Plans = a.Plans[:1] }, "it does not name the plan of c3/payments/c"},
		{"another digest", func(a *magosv1.StepApproval) { a.Plans[1].Digest = "plan-other" }, "the plan of c3/payments/c is now plan-c@rev-1, it approved plan-other"},
		{"another commit", func(a *magosv1.StepApproval) { a.Plans[0].Revision = "rev-0" }, "the plan of c2/payments/b is of commit rev-1, it approved commit rev-0"},
		{"another step", func(a *magosv1.StepApproval) { a.Step = "dev" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := approvalFleet(t, nil)
			_, d := f.walk()
			f.approve(d, "alice")
			tt.mutate(&f.rollout.Spec.Approvals[0])
			grants := len(f.grants)
			_, d = f.walk()
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 1)
			if len(f.grants) != grants {
				t.Errorf("granted %v under an approval that does not hold", f.grants[grants:])
			}
			if tt.why != "" && !strings.HasSuffix(d.ApprovalVoided, tt.why) {
				t.Errorf("voided %q, want it to end %q", d.ApprovalVoided, tt.why)
			}
		})
	}
}

// TestDecideApprovalWithMaxConcurrency: plans waiting for approval take no place, so a step of
// one at a time plans every Workspace, then applies them one at a time once approved.
func TestDecideApprovalWithMaxConcurrency(t *testing.T) {
	f := approvalFleet(t, func(s *magosv1.RolloutStep) { s.MaxConcurrency = intOrPercent("1") })
	batches, d := f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 1)
	f.approve(d, "alice")
	more, d := f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	for _, b := range append(batches, more...) {
		if len(b) > 1 && b[0].Cluster != "c1" {
			t.Errorf("batch %v grants more than one Workspace of prod at once", b)
		}
	}
}

// TestDecideParkedPlanAppliesWithoutApproval: once a step no longer requires approval, plans
// that waited for one apply (not bound to a digest), as they do in parallel mode.
func TestDecideParkedPlanAppliesWithoutApproval(t *testing.T) {
	f := approvalFleet(t, nil)
	f.walk()
	f.rollout.Spec.Strategy.Steps[1].RequireApproval = false
	_, d := f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)

	f = approvalFleet(t, nil)
	f.walk()
	f.rollout = nil
	if _, d = f.walk(); len(f.applies) != 4 {
		t.Errorf("parallel mode applied %v, want all four", f.appliedKeys())
	}
}

// reject writes the rejection of the plans a decision lists for step prod, as magosctl does.
func (f *fleet) reject(d Decision, by, reason string) {
	x := magosv1.StepRejection{Step: "prod", RejectedBy: by, Reason: reason, RejectedAt: metav1.NewTime(time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC))}
	for _, p := range d.Steps[1].Plans {
		x.Plans = append(x.Plans, magosv1.ApprovedPlan{Workspace: p.Workspace, Revision: p.Revision, Digest: p.Digest})
	}
	f.rollout.Spec.Rejections = []magosv1.StepRejection{x}
}

// TestDecideRejection: a rejection of exactly the plans a step waits with holds the step back
// and says who rejected them and why, and sets aside an approval that is not newer than it; an
// approval newer than the rejection applies; a rejection that no longer names every plan (a plan
// changed, a plan left out, another step) is void and the step simply awaits approval; once the
// rejection is replaced by an approval the step applies.
func TestDecideRejection(t *testing.T) {
	const why = "Step prod: its 2 plan(s) were rejected by carol at 2026-12-03T11:00:00Z: destroys the queue (a new plan asks for approval again; magosctl rollout approve payments-platform --step prod approves these)"
	tests := []struct {
		name string
		// mutate changes the fleet after the rejection is written; approve writes an approval too.
		mutate  func(f *fleet)
		approve bool
		// rejected: the step is held back by the rejection; applies: the approval applies.
		rejected, applies bool
	}{
		{name: "an approval newer than the rejection", approve: true, applies: true, mutate: func(f *fleet) {
			f.rollout.Spec.Approvals[0].ApprovedAt = metav1.NewTime(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
		}},
		{name: "rejected", rejected: true},
		{name: "rejected beside an older approval", approve: true, rejected: true},
		{name: "a plan changed since", mutate: func(f *fleet) {
			f.reset(k("c3", "c"), magosv1.ReasonConfigurationChanged)
			f.plans[k("c3", "c")] = "plan-c-changed"
		}},
		{name: "a plan left out", mutate: func(f *fleet) {
			f.rollout.Spec.Rejections[0].Plans = f.rollout.Spec.Rejections[0].Plans[:1]
		}},
		{name: "another commit", mutate: func(f *fleet) { f.rollout.Spec.Rejections[0].Plans[0].Revision = "rev-0" }},
		{name: "another step", mutate: func(f *fleet) { f.rollout.Spec.Rejections[0].Step = "dev" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := approvalFleet(t, nil)
			_, d := f.walk()
			if tt.approve {
				f.approve(d, "alice")
			}
			f.reject(d, "carol", "destroys the queue")
			if tt.mutate != nil {
				tt.mutate(f)
			}
			grants := len(f.grants)
			_, d = f.walk()
			if tt.applies {
				assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
				return
			}
			if !tt.rejected {
				assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 1)
				if d.Steps[1].Rejection != nil {
					t.Errorf("step prod lists rejection %+v that no longer names its plans", d.Steps[1].Rejection)
				}
				return
			}
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonApprovalRejected, 1)
			if d.Message != why {
				t.Errorf("message %q\nwant %q", d.Message, why)
			}
			s := d.Steps[1]
			if s.Phase != magosv1.StepAwaitingApproval || len(s.Plans) != 2 || s.Approval != nil || s.Rejection == nil || s.Rejection.RejectedBy != "carol" {
				t.Errorf("step prod %+v: want AwaitingApproval with its 2 plans, rejected by carol, no approval", s)
			}
			for _, g := range f.grants[grants:] {
				if !g.PlanOnly {
					t.Errorf("apply grant %+v under a rejection", g)
				}
			}
			assertKeys(t, "applies", f.appliedKeys(), []Key{k("c1", "a")})

			// The rejection replaced by an approval (as magosctl rollout approve does): it applies.
			f.rollout.Spec.Rejections = nil
			f.approve(d, "alice")
			_, d = f.walk()
			assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
		})
	}
}
