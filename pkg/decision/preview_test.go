package decision

import (
	"slices"
	"strings"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// previewFleet is a Rollout with spec.planFirst: dev (c1/a), then staging (c2/b), then prod
// (c3/c, c4/d). mutate adjusts the prod step.
func previewFleet(t *testing.T, mutate func(*magosv1.RolloutStep)) *fleet {
	prod := stepSpec("prod", "env", "prod")
	if mutate != nil {
		mutate(&prod)
	}
	ro := rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("staging", "env", "staging"), prod)
	ro.Spec.PlanFirst = true
	return &fleet{t: t, clusters: clusters("c1", "c2", "c3", "c4"), plans: map[Key]string{},
		changes: map[Key]magosv1.ResourceChanges{k("c4", "d"): {Add: 2, Change: 1, Destroy: 1}},
		ws: []Workspace{
			newWS("c1", "a", "env", "dev"), newWS("c2", "b", "env", "staging"),
			newWS("c3", "c", "env", "prod"), newWS("c4", "d", "env", "prod"),
		},
		rollout: ro}
}

// grantsBeforeFirstApply returns the grants written before the first grant that allows an
// apply, and that grant's index (len(f.grants) when there is none).
func (f *fleet) grantsBeforeFirstApply() ([]Change, int) {
	i := slices.IndexFunc(f.grants, func(g Change) bool { return !g.PlanOnly })
	if i < 0 {
		i = len(f.grants)
	}
	return f.grants[:i], i
}

// approveStep approves the plans a decision lists for its step i.
func (f *fleet) approveStep(d Decision, i int) {
	a := magosv1.StepApproval{Step: d.Steps[i].Name, ApprovedBy: "alice"}
	for _, p := range d.Steps[i].Plans {
		a.Plans = append(a.Plans, magosv1.ApprovedPlan{Workspace: p.Workspace, Revision: p.Revision, Digest: p.Digest})
	}
	f.rollout.Spec.Approvals = []magosv1.StepApproval{a}
}

// TestDecidePlanFirstPreviewsBeforeAnyApply: with planFirst every Workspace of every step plans
// (plan-only grants) before the first step applies; the steps then apply in order, each apply
// bound to the plan previewed, and every step's status shows its plans.
func TestDecidePlanFirstPreviewsBeforeAnyApply(t *testing.T) {
	a, b, c, dd := k("c1", "a"), k("c2", "b"), k("c3", "c"), k("c4", "d")
	f := previewFleet(t, nil)

	d := f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonPreviewing, 0)
	assertKeys(t, "first grants", keysOf(d.Grants), []Key{a, b, c, dd})
	for _, g := range d.Grants {
		if !g.PlanOnly || g.Plan != "" {
			t.Errorf("grant %+v before the preview: want plan-only", g)
		}
	}
	if d.Steps[0].Phase != magosv1.StepPreviewing || !strings.Contains(d.Message, "0/4 Workspace(s) planned") {
		t.Errorf("step dev %s, message %q: want Previewing, 0/4 planned", d.Steps[0].Phase, d.Message)
	}
	if p := d.Steps[2].Preview; len(p) != 2 || p[0].Result != magosv1.PreviewPending || p[1].Workspace != dd.String() {
		t.Errorf("prod preview %+v, want c and d pending", p)
	}

	f.start()
	f.finish()
	d = f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
	assertKeys(t, "grants once previewed", keysOf(d.Grants), []Key{a})
	if g := d.Grants[0]; g.PlanOnly || g.Plan != "plan-a@rev-1" || g.Revision != "rev-1" {
		t.Errorf("apply grant %+v: want bound to plan-a@rev-1 of rev-1", g)
	}
	want := magosv1.PreviewPlan{Workspace: dd.String(), Run: "run-1-c4-d", Revision: "rev-1", Result: magosv1.PreviewPlanned,
		PlanSummary: magosv1.PlanSummary{Digest: "plan-d@rev-1", Add: 2, Change: 1, Destroy: 1}}
	if p := d.Steps[2].Preview; len(p) != 2 || p[1] != want {
		t.Errorf("prod preview %+v, want d's entry %+v", p, want)
	}

	f.walk()
	assertStatus(t, f.decide(), magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	assertKeys(t, "applies", f.appliedKeys(), []Key{a, b, c, dd})
	before, _ := f.grantsBeforeFirstApply()
	assertKeys(t, "plan-only grants before the first apply", keysOf(before), []Key{a, b, c, dd})
	for _, g := range f.grants {
		if !g.PlanOnly && g.Plan != "plan-"+g.Key.Name+"@rev-1" {
			t.Errorf("apply grant %+v not bound to the plan previewed", g)
		}
	}
	if p := f.rollout.Status.Steps[2].Preview[1]; p.Result != magosv1.PreviewApplied || p.Digest != "plan-d@rev-1" || p.Previewed != nil {
		t.Errorf("prod preview of d after the rollout %+v, want Applied with its plan", p)
	}
}

// TestDecidePlanFirstNewCommit: a commit that arrives after a completed rollout is previewed
// fleet-wide again before dev applies it.
func TestDecidePlanFirstNewCommit(t *testing.T) {
	f := previewFleet(t, nil)
	f.walk()
	applied := len(f.applies)
	granted := len(f.grants)
	f.now = randomEpoch
	f.poll(k("c3", "c"), "rev-2", randomEpoch) // prod's agent polls first
	d := f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonPreviewing, 0)
	for _, w := range f.ws {
		f.poll(w.Key, "rev-2", randomEpoch.Add(time.Second))
	}
	f.walk()
	assertKeys(t, "applies of rev-2", f.appliedKeys()[applied:], []Key{k("c1", "a"), k("c2", "b"), k("c3", "c"), k("c4", "d")})
	rev2 := f.grants[granted:]
	firstApply := slices.IndexFunc(rev2, func(g Change) bool { return !g.PlanOnly })
	if firstApply != 4 {
		t.Errorf("grants of rev-2 %v: want four plan-only grants before the first apply", rev2)
	}
	for _, g := range rev2 {
		if g.Revision != "rev-2" {
			t.Errorf("grant %+v: want rev-2", g)
		}
	}
}

// TestDecidePlanFirstFailureOnAnOlderCommitIsNoPreview: a prod Workspace whose run failed on
// rev-1 (prod tolerates one failure) has not previewed rev-2: no step applies rev-2 until it
// planned rev-2. (Before, its old failure counted as its preview, and dev applied rev-2 first.)
func TestDecidePlanFirstFailureOnAnOlderCommitIsNoPreview(t *testing.T) {
	f := previewFleet(t, func(s *magosv1.RolloutStep) { s.MaxFailures = intOrPercent("1") })
	f.walk()
	c := f.get(k("c3", "c"))
	c.Phase, c.Reason = magosv1.PhaseFailed, "ApplyFailed" // failed on rev-1, tolerated
	applied := len(f.applies)
	for _, w := range f.ws {
		if w.Key != c.Key {
			f.poll(w.Key, "rev-2", randomEpoch)
		}
	}
	f.now = randomEpoch
	for range 5 {
		f.decide()
		f.start()
		f.finish()
	}
	if len(f.applies) > applied {
		t.Fatalf("applied %v of rev-2 while c3/c, failed on rev-1, had not planned rev-2", f.applies[applied:])
	}
	d := f.decide()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonPreviewing, 0)
	if !strings.Contains(d.Message, c.Key.String()) {
		t.Errorf("message %q does not name the Workspace the preview waits for", d.Message)
	}
	// Its agent sees rev-2: it plans it (the failure is retried), and the Rollout goes on.
	f.poll(c.Key, "rev-2", randomEpoch.Add(time.Minute))
	f.walk()
	assertKeys(t, "applies of rev-2", f.appliedKeys()[applied:], []Key{k("c1", "a"), k("c2", "b"), k("c3", "c"), k("c4", "d")})
}

// TestDecidePlanFirstWaitsForTheWholeFleet: a later step's Workspace that cannot plan (its
// cluster is down), or a cluster whose Workspaces the hub does not know, holds every apply.
func TestDecidePlanFirstWaitsForTheWholeFleet(t *testing.T) {
	tests := []struct {
		name    string
		cluster Cluster
		reason  string
		message string
	}{
		{"unavailable", Cluster{Name: "c4", Available: false, Synced: true}, magosv1.ReasonPreviewing,
			"Previewing the change before step dev applies: 3/4 Workspace(s) planned; waiting for c4/payments/d"},
		// Every step may select in c4: dev itself waits for it.
		{"not synced", Cluster{Name: "c4", Available: true, Synced: false}, magosv1.ReasonWaitingForClusters,
			"Waiting for cluster c4: not synced (step dev: 0/1 applied)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := previewFleet(t, nil)
			f.clusters["c4"] = tt.cluster
			_, d := f.walk()
			assertStatus(t, d, magosv1.PhaseReconciling, tt.reason, 0)
			if len(f.applies) > 0 {
				t.Errorf("applied %v before c4/d planned", f.appliedKeys())
			}
			if d.Message != tt.message {
				t.Errorf("message %q, want %q", d.Message, tt.message)
			}
			f.clusters["c4"] = clusters("c4")["c4"]
			f.walk()
			assertKeys(t, "applies once c4 is back", f.appliedKeys(), []Key{k("c1", "a"), k("c2", "b"), k("c3", "c"), k("c4", "d")})
		})
	}
}

// TestDecidePlanFirstPreviewFailed: a plan of a later step that breaks a policy stops the
// Rollout before dev applies; once it plans cleanly the rollout goes on. Within the step's
// maxFailures it only shows in the preview.
func TestDecidePlanFirstPreviewFailed(t *testing.T) {
	c := k("c3", "c")
	f := previewFleet(t, nil)
	f.fail = map[Key]magosv1.Phase{c: magosv1.PhaseValidationFailed}
	_, d := f.walk()
	assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonPreviewFailed, 0)
	if len(f.applies) > 0 {
		t.Errorf("applied %v although the preview of prod failed", f.appliedKeys())
	}
	if want := "Preview of step prod: 1 Workspace(s) failed, more than its maxFailures (0), so nothing applies: c3/payments/c (PlanFailed)"; d.Message != want {
		t.Errorf("message %q, want %q", d.Message, want)
	}
	if d.Steps[2].Phase != magosv1.StepFailed || d.Steps[2].Preview[0].Result != magosv1.PreviewPolicyViolation {
		t.Errorf("step prod %+v: want Failed, c's preview a policy violation", d.Steps[2])
	}
	f.reset(c, magosv1.ReasonManualReconcileRequested) // retried once fixed
	f.walk()
	assertKeys(t, "applies after the retry", f.appliedKeys(), []Key{k("c1", "a"), k("c2", "b"), c, k("c4", "d")})

	f = previewFleet(t, func(s *magosv1.RolloutStep) { s.MaxFailures = intOrPercent("1") })
	f.fail = map[Key]magosv1.Phase{c: magosv1.PhaseValidationFailed}
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	assertKeys(t, "applies within maxFailures", f.appliedKeys(), []Key{k("c1", "a"), k("c2", "b"), k("c4", "d")})
}

// TestDecidePlanFirstStalePlan: a prod plan replaced after the preview (its run started over)
// plans again; the step's preview shows the plan previewed beside the new one, and the apply is
// bound to the new plan. With requireApproval, the approval of the previewed plans no longer
// holds and the step asks again.
func TestDecidePlanFirstStalePlan(t *testing.T) {
	a, b, c, dd := k("c1", "a"), k("c2", "b"), k("c3", "c"), k("c4", "d")
	for _, approval := range []bool{false, true} {
		name := "without approval"
		if approval {
			name = "with approval"
		}
		t.Run(name, func(t *testing.T) {
			f := previewFleet(t, func(s *magosv1.RolloutStep) { s.RequireApproval = approval })
			// Stop before prod applies: previews, then dev and staging.
			for range 3 {
				f.decide()
				f.start()
				f.finish()
			}
			assertKeys(t, "applies", f.appliedKeys(), []Key{a, b})
			if approval {
				_, d := f.walk()
				assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 2)
				f.approveStep(d, 2) // the plans previewed
			}
			f.reset(dd, magosv1.ReasonConfigurationChanged) // the plan went stale
			f.plans[dd] = "plan-d-again"
			f.changes[dd] = magosv1.ResourceChanges{Add: 3}
			d := f.decide()
			previewed := &magosv1.PlanSummary{Digest: "plan-d@rev-1", Add: 2, Change: 1, Destroy: 1}
			if p := d.Steps[2].Preview[1]; p.Result != magosv1.PreviewPending || p.Previewed == nil || *p.Previewed != *previewed {
				t.Errorf("d's preview while it plans again: %+v, want Pending with the plan previewed", p)
			}
			if approval {
				_, d = f.walk()
				assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 2)
				if !strings.Contains(d.Message, "the plan of c4/payments/d is now plan-d-again, it approved plan-d@rev-1") {
					t.Errorf("message %q does not say the approval no longer holds for d", d.Message)
				}
				assertKeys(t, "applies under the voided approval", f.appliedKeys(), []Key{a, b})
				f.approveStep(d, 2)
			}
			f.walk()
			assertKeys(t, "applies", f.appliedKeys(), []Key{a, b, c, dd})
			p := f.rollout.Status.Steps[2].Preview[1]
			if p.Digest != "plan-d-again" || p.Add != 3 || p.Previewed == nil || *p.Previewed != *previewed {
				t.Errorf("d's preview after its apply: %+v, want plan-d-again beside the plan previewed", p)
			}
			last := f.grants[len(f.grants)-1]
			if last.Key != dd || last.Plan != "plan-d-again" {
				t.Errorf("last grant %+v, want d's apply bound to plan-d-again", last)
			}
		})
	}
}

// TestDecidePlanFirstApprovalAfterPreview: a step that requires approval awaits it only once the
// whole fleet is previewed; the approval then applies the plans previewed.
func TestDecidePlanFirstApprovalAfterPreview(t *testing.T) {
	f := previewFleet(t, nil)
	f.rollout.Spec.Strategy.Steps[1].RequireApproval = true
	f.clusters["c4"] = Cluster{Name: "c4", Synced: true}
	_, d := f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonPreviewing, 0)
	f.clusters["c4"] = clusters("c4")["c4"]
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 1)
	assertKeys(t, "applies", f.appliedKeys(), []Key{k("c1", "a")})
	f.approveStep(d, 1)
	_, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
}

// TestDecidePlanFirstMaxConcurrency: a later step previews within its maxConcurrency.
func TestDecidePlanFirstMaxConcurrency(t *testing.T) {
	f := previewFleet(t, func(s *magosv1.RolloutStep) { s.MaxConcurrency = intOrPercent("1") })
	batches, _ := f.walk()
	for _, b := range batches {
		n := 0
		for _, key := range b {
			if key.Cluster == "c3" || key.Cluster == "c4" {
				n++
			}
		}
		if n > 1 {
			t.Errorf("batch %v grants both prod Workspaces at once", b)
		}
	}
	assertKeys(t, "applies", f.appliedKeys(), []Key{k("c1", "a"), k("c2", "b"), k("c3", "c"), k("c4", "d")})
}

// TestPreviewOf: what a Workspace's entry in its step's preview says, and when it keeps the
// plan first previewed.
func TestPreviewOf(t *testing.T) {
	plan := func(digest string, add int32) magosv1.PlanSummary {
		return magosv1.PlanSummary{Digest: digest, Add: add}
	}
	planned := Workspace{Key: k("c1", "a"), RunID: "r2", Phase: magosv1.PhasePlanned, CurrentRevision: "rev-1", PlanDigest: "p2",
		Changes: magosv1.ResourceChanges{Add: 2}}
	tests := []struct {
		name     string
		ws       Workspace
		done     bool
		old      *magosv1.PreviewPlan
		result   string
		summary  magosv1.PlanSummary
		previewd *magosv1.PlanSummary
	}{
		{name: "pending", ws: Workspace{RunID: "r2", Phase: magosv1.PhasePending}, result: magosv1.PreviewPending},
		{name: "planning", ws: Workspace{RunID: "r2", Phase: magosv1.PhasePlanning, CurrentRevision: "rev-1"}, result: magosv1.PreviewPending},
		{name: "planned", ws: planned, result: magosv1.PreviewPlanned, summary: plan("p2", 2)},
		{name: "planned, of another commit", ws: planned.with(func(w *Workspace) { w.CurrentRevision = "rev-0" }), result: magosv1.PreviewPending},
		{name: "applying", ws: planned.with(inPhase(magosv1.PhaseApplying, "")), result: magosv1.PreviewPlanned, summary: plan("p2", 2)},
		{name: "applied", ws: planned.with(inPhase(magosv1.PhaseApplied, ""), func(w *Workspace) { w.ObservedRevision = "rev-1" }), done: true,
			result: magosv1.PreviewApplied, summary: plan("p2", 2)},
		{name: "policy violation", ws: Workspace{Phase: magosv1.PhaseValidationFailed, CurrentRevision: "rev-1", PolicyViolations: 3,
			Changes: magosv1.ResourceChanges{Destroy: 1}}, result: magosv1.PreviewPolicyViolation, summary: magosv1.PlanSummary{Destroy: 1}},
		{name: "failed", ws: Workspace{Phase: magosv1.PhaseFailed, CurrentRevision: "rev-1"}, result: magosv1.PreviewFailed},
		{name: "same plan as previewed", ws: planned, old: &magosv1.PreviewPlan{Revision: "rev-1", PlanSummary: plan("p2", 2)},
			result: magosv1.PreviewPlanned, summary: plan("p2", 2)},
		{name: "another plan than previewed", ws: planned, old: &magosv1.PreviewPlan{Revision: "rev-1", PlanSummary: plan("p1", 1)},
			result: magosv1.PreviewPlanned, summary: plan("p2", 2), previewd: &magosv1.PlanSummary{Digest: "p1", Add: 1}},
		{name: "planning again", ws: Workspace{RunID: "r3", Phase: magosv1.PhasePending},
			old: &magosv1.PreviewPlan{Revision: "rev-1", PlanSummary: plan("p1", 1)}, result: magosv1.PreviewPending,
			previewd: &magosv1.PlanSummary{Digest: "p1", Add: 1}},
		{name: "the first preview is kept", ws: planned,
			old:    &magosv1.PreviewPlan{Revision: "rev-1", PlanSummary: plan("p9", 9), Previewed: &magosv1.PlanSummary{Digest: "p1", Add: 1}},
			result: magosv1.PreviewPlanned, summary: plan("p2", 2), previewd: &magosv1.PlanSummary{Digest: "p1", Add: 1}},
		{name: "back to the plan previewed", ws: planned,
			old:    &magosv1.PreviewPlan{Revision: "rev-1", Previewed: &magosv1.PlanSummary{Digest: "p2", Add: 2}},
			result: magosv1.PreviewPlanned, summary: plan("p2", 2)},
		{name: "a new commit starts afresh", ws: planned.with(func(w *Workspace) { w.CurrentRevision = "rev-2" }),
			old: &magosv1.PreviewPlan{Revision: "rev-1", PlanSummary: plan("p1", 1)}, result: magosv1.PreviewPlanned, summary: plan("p2", 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.ws
			m := member{ws: &w, done: tt.done, revision: "rev-1", available: true}
			if tt.name == "a new commit starts afresh" {
				m.revision = "rev-2"
			}
			p := previewOf(&m, tt.old)
			if p.Result != tt.result || p.PlanSummary != tt.summary || (p.Previewed == nil) != (tt.previewd == nil) ||
				p.Previewed != nil && *p.Previewed != *tt.previewd {
				t.Errorf("preview %+v (previewed %v), want %s %+v previewed %v", p, p.Previewed, tt.result, tt.summary, tt.previewd)
			}
			if tt.name == "policy violation" && p.PolicyViolations != 3 {
				t.Errorf("policy violations %d, want 3", p.PolicyViolations)
			}
		})
	}
}

// TestPreviewSize: the previews of all steps list at most maxPreviewListed Workspaces together,
// in step order, and each step counts those it leaves out.
func TestPreviewSize(t *testing.T) {
	in := benchInput(600, 10) // 2,400 Workspaces in dev, 1,800 in staging, 1,800 in prod
	in.Rollout.Spec.PlanFirst = true
	d := Decide(in)
	var listed, omitted []int
	for _, s := range d.Steps {
		listed, omitted = append(listed, len(s.Preview)), append(omitted, int(s.PreviewOmitted))
	}
	if !slices.Equal(listed, []int{2400, 1600, 0}) || !slices.Equal(omitted, []int{0, 200, 1800}) {
		t.Errorf("listed %v, omitted %v; want 2400, 1600 and 0 listed, 0, 200 and 1800 left out", listed, omitted)
	}
}

// TestDecidePlanFirstShowsDrift: each Workspace's preview entry shows, apart from its plan of the
// change, its drift at the commit it applied (the drift check's digest and counts), whatever its
// step's drift but ignore, accepted or not; a drift check of an older commit shows nothing. The
// plan says how many of its changes revert drift (driftReverted): the rest is the commit's own.
func TestDecidePlanFirstShowsDrift(t *testing.T) {
	warn, block, ignore := stepSpec("warn", "env", "warn"), stepSpec("block", "env", "block"), stepSpec("ignore", "env", "ignore")
	warn.Drift, block.Drift, ignore.Drift = magosv1.DriftWarn, magosv1.DriftBlock, magosv1.DriftIgnore
	ro := rolloutOf(warn, block, ignore)
	ro.Spec.PlanFirst = true
	ro.Spec.DriftAcceptances = []magosv1.DriftAcceptance{accept(k("c2", "b"), "dd-b")}
	stale := driftStatus(&magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: "rev-0", PlanDigest: "dd-s"})
	planned := func(w *Workspace) {
		w.Phase, w.CurrentRevision, w.PlanDigest, w.PlanOnly = magosv1.PhasePlanned, "rev-1", "p-"+w.Key.Name, true
		w.Changes = magosv1.ResourceChanges{Add: 4}
	}
	ws := []Workspace{
		// Its plan puts back the drift (1 change, 2 destroys) beside the commit's 4 adds.
		newWS("c1", "a", "env", "warn").with(func(w *Workspace) { w.ObservedRevision = "rev-0" }, planned, driftedAt("dd-a"),
			func(w *Workspace) {
				w.Changes = magosv1.ResourceChanges{Add: 4, Change: 1, Destroy: 2, DriftReverted: 3}
			}),
		newWS("c1", "s", "env", "warn").with(func(w *Workspace) { w.ObservedRevision = "rev-1" }, planned, stale),
		newWS("c2", "b", "env", "block").with(driftedAt("dd-b")),
		newWS("c3", "c", "env", "ignore").with(driftedAt("dd-c")),
	}
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Workspaces: ws, Clusters: clusters("c1", "c2", "c3"), Now: randomEpoch})
	drift := func(digest string) *magosv1.PlanSummary {
		return &magosv1.PlanSummary{Digest: digest, Change: 1, Destroy: 2}
	}
	for _, tc := range []struct {
		step, ws int
		plan     magosv1.PlanSummary
		drift    *magosv1.PlanSummary
	}{
		{0, 0, magosv1.PlanSummary{Digest: "p-a", Add: 4, Change: 1, Destroy: 2, DriftReverted: 3}, drift("dd-a")},
		{0, 1, magosv1.PlanSummary{Digest: "p-s", Add: 4}, nil}, // checked rev-0, applied rev-1: stale
		{1, 0, magosv1.PlanSummary{}, drift("dd-b")},            // accepted, shown all the same
		{2, 0, magosv1.PlanSummary{}, nil},                      // ignore
	} {
		p := d.Steps[tc.step].Preview[tc.ws]
		if p.PlanSummary != tc.plan || (p.Drift == nil) != (tc.drift == nil) || p.Drift != nil && *p.Drift != *tc.drift {
			t.Errorf("step %s: preview of %s is plan %+v drift %+v, want plan %+v drift %+v",
				d.Steps[tc.step].Name, p.Workspace, p.PlanSummary, p.Drift, tc.plan, tc.drift)
		}
	}
}
