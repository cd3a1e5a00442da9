package decision

import (
	"math/rand"
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// TestDecideSeedPatterns walks each promotion shape of the rollout-strategies guide from a
// fresh change on every Workspace to completion, and checks the order in which Workspaces
// are granted.
func TestDecideSeedPatterns(t *testing.T) {
	tests := []struct {
		name     string
		clusters []string
		ws       []Workspace
		rollout  *magosv1.Rollout
		batches  [][]Key
	}{
		{
			name:     "dev then staging then prod",
			clusters: []string{"dev-1", "prod-1"},
			ws: []Workspace{
				newWS("prod-1", "api-prod", "env", "prod"),
				newWS("dev-1", "api-dev", "env", "dev"),
				newWS("dev-1", "api-staging", "env", "staging"),
			},
			rollout: envSteps(),
			batches: [][]Key{{k("dev-1", "api-dev")}, {k("dev-1", "api-staging")}, {k("prod-1", "api-prod")}},
		},
		{
			name:     "multi-region prod, one region per cluster",
			clusters: []string{"us-east-1", "eu-west-1", "ap-south-1"},
			ws: []Workspace{
				newWS("ap-south-1", "cdn", "env", "prod", "region", "ap-south-1"),
				newWS("eu-west-1", "cdn", "env", "prod", "region", "eu-west-1"),
				newWS("us-east-1", "cdn", "env", "prod", "region", "us-east-1"),
			},
			rollout: rolloutOf(
				stepSpec("us-east-1", "env", "prod", "region", "us-east-1"),
				stepSpec("eu-west-1", "env", "prod", "region", "eu-west-1"),
				stepSpec("ap-south-1", "env", "prod", "region", "ap-south-1"),
			),
			batches: [][]Key{{k("us-east-1", "cdn")}, {k("eu-west-1", "cdn")}, {k("ap-south-1", "cdn")}},
		},
		{
			name:     "cohorts in parallel across clusters",
			clusters: []string{"us-east-1", "eu-west-1", "ap-south-1"},
			ws: []Workspace{
				newWS("us-east-1", "db-dev", "env", "dev", "region", "us-east-1"),
				newWS("eu-west-1", "db-dev", "env", "dev", "region", "eu-west-1"),
				newWS("ap-south-1", "db-dev", "env", "dev", "region", "ap-south-1"),
				newWS("us-east-1", "db-staging", "env", "staging", "region", "us-east-1"),
				newWS("eu-west-1", "db-staging", "env", "staging", "region", "eu-west-1"),
				newWS("ap-south-1", "db-staging", "env", "staging", "region", "ap-south-1"),
				newWS("us-east-1", "db-prod", "env", "prod", "region", "us-east-1"),
				newWS("eu-west-1", "db-prod", "env", "prod", "region", "eu-west-1"),
				newWS("ap-south-1", "db-prod", "env", "prod", "region", "ap-south-1"),
			},
			rollout: envSteps(),
			batches: [][]Key{
				{k("ap-south-1", "db-dev"), k("eu-west-1", "db-dev"), k("us-east-1", "db-dev")},
				{k("ap-south-1", "db-staging"), k("eu-west-1", "db-staging"), k("us-east-1", "db-staging")},
				{k("ap-south-1", "db-prod"), k("eu-west-1", "db-prod"), k("us-east-1", "db-prod")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fleet{t: t, ws: tt.ws, clusters: clusters(tt.clusters...), rollout: tt.rollout}
			// Step by step: each decision grants exactly the current step, and no other
			// Workspace starts before the step is Applied.
			for i, want := range tt.batches {
				d := f.decide()
				assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, i)
				assertKeys(t, "grants", keysOf(d.Grants), want)
				for _, g := range d.Grants {
					if g.Run != f.get(g.Key).RunID {
						t.Fatalf("grant %v does not name the run %s", g, f.get(g.Key).RunID)
					}
				}
				if again := Decide(f.input()); again.HasWrites() {
					t.Fatalf("deciding again before anything ran writes %v %v", again.Grants, again.Revokes)
				}
				assertKeys(t, "started", f.start(), want)
				if d := f.decide(); len(d.Grants) != 0 || d.CurrentStep != i || d.Steps[i].Running != int32(len(want)) {
					t.Fatalf("while step %d runs: grants %v, step %d, running %d", i, d.Grants, d.CurrentStep, d.Steps[i].Running)
				}
				f.finish()
			}
			d := f.decide()
			assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, len(tt.batches))
			if d.Message != "All steps completed successfully" || d.CurrentStepName != "" {
				t.Fatalf("completed: message %q, step name %q", d.Message, d.CurrentStepName)
			}
			if d.Applied != int32(len(tt.ws)) || d.Total != int32(len(tt.ws)) {
				t.Fatalf("applied %d/%d, want %d", d.Applied, d.Total, len(tt.ws))
			}
			// The spent grants of the last step stay (they start nothing): completion writes nothing.
			if d.HasWrites() {
				t.Fatalf("completion writes %v %v, want nothing (spent grants are left)", d.Grants, d.Revokes)
			}
			if d := f.decide(); d.HasWrites() {
				t.Fatalf("completed rollout still writes %v %v", d.Grants, d.Revokes)
			}
			for _, s := range d.Steps {
				if s.Phase != magosv1.StepCompleted {
					t.Fatalf("step %s is %s after completion", s.Name, s.Phase)
				}
			}
			// The whole walk again from the start gives the same batches.
			f2 := &fleet{t: t, ws: tt.ws, clusters: clusters(tt.clusters...), rollout: tt.rollout}
			batches, last := f2.walk()
			if !reflect.DeepEqual(batches, tt.batches) {
				t.Fatalf("walk batches = %v, want %v", batches, tt.batches)
			}
			assertStatus(t, last, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, len(tt.batches))
		})
	}
}

// TestDecideFailureFreezesAndRecovery checks that a failure in the current step halts the
// rollout before the next step gets any grant, and that a retry resumes it.
func TestDecideFailureFreezesAndRecovery(t *testing.T) {
	for _, failed := range []magosv1.Phase{magosv1.PhaseFailed, magosv1.PhaseValidationFailed} {
		t.Run(string(failed), func(t *testing.T) {
			f := &fleet{t: t, clusters: clusters("us-east-1", "eu-west-1"), rollout: envSteps(),
				fail: map[Key]magosv1.Phase{k("eu-west-1", "dev-b"): failed},
				ws: []Workspace{
					newWS("us-east-1", "dev-a", "env", "dev"),
					newWS("eu-west-1", "dev-b", "env", "dev"),
					newWS("us-east-1", "staging", "env", "staging"),
					newWS("eu-west-1", "prod", "env", "prod"),
				}}
			d := f.decide()
			assertKeys(t, "grants", keysOf(d.Grants), []Key{k("eu-west-1", "dev-b"), k("us-east-1", "dev-a")})
			f.start()
			f.finish()

			for round := 0; round < 5; round++ {
				d = f.decide()
				assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0)
				if len(d.Grants) != 0 {
					t.Fatalf("round %d: halted rollout grants %v", round, d.Grants)
				}
				f.start()
				f.finish()
			}
			want := "One or more workspaces failed in step dev: eu-west-1/payments/dev-b (PlanFailed)"
			if d.Message != want {
				t.Fatalf("message %q, want %q", d.Message, want)
			}
			if d.Steps[0].Phase != magosv1.StepFailed || d.Steps[0].Failed != 1 || d.Steps[0].Applied != 1 ||
				d.Steps[1].Phase != magosv1.StepPending || d.Steps[2].Phase != magosv1.StepPending {
				t.Fatalf("steps %+v", d.Steps)
			}
			for _, g := range f.grants {
				if g.Key.Name == "staging" || g.Key.Name == "prod" {
					t.Fatalf("a later step was granted while the rollout was halted: %v", g)
				}
			}

			// The fix: the Workspace gets a new run (RetryPlan, a spec change, a request).
			f.reset(k("eu-west-1", "dev-b"), magosv1.ReasonRetryPlan)
			d = f.decide()
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
			assertKeys(t, "grants", keysOf(d.Grants), []Key{k("eu-west-1", "dev-b")})
			batches, last := f.walk()
			assertKeys(t, "first batch after recovery", batches[0], []Key{k("us-east-1", "staging")})
			assertKeys(t, "second batch after recovery", batches[1], []Key{k("eu-west-1", "prod")})
			assertStatus(t, last, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
		})
	}
}

// TestDecideHaltRevokesUnstartedGrants checks what a halted step keeps: runs in flight keep
// their grant, Workspaces that have not started lose theirs, and spent grants (of a failed run,
// or naming a run the Workspace left) are left where they are: they start nothing.
func TestDecideHaltRevokesUnstartedGrants(t *testing.T) {
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: envSteps(), Clusters: clusters("c1"),
		Workspaces: []Workspace{
			newWS("c1", "dev-failed", "env", "dev").with(inPhase(magosv1.PhaseFailed, magosv1.ReasonApplyFailed), grantedNow),
			newWS("c1", "dev-planning", "env", "dev").with(inPhase(magosv1.PhasePlanning, magosv1.ReasonPlanning), grantedNow),
			newWS("c1", "dev-pending", "env", "dev").with(grantedNow),
			newWS("c1", "dev-waiting", "env", "dev"),
			newWS("c1", "staging", "env", "staging").with(grantedNow),
			newWS("c1", "staging-old", "env", "staging").with(grantedRun("old")),
			newWS("c1", "prod", "env", "prod"),
		}}
	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0)
	if len(d.Grants) != 0 {
		t.Fatalf("grants %v", d.Grants)
	}
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "dev-pending"), k("c1", "staging")})
	if want := "One or more workspaces failed in step dev: c1/payments/dev-failed (ApplyFailed)"; d.Message != want {
		t.Fatalf("message %q, want %q", d.Message, want)
	}
}

// TestDecideStepFailedMessage checks that the message lists at most five failed Workspaces,
// sorted, and counts the rest.
func TestDecideStepFailedMessage(t *testing.T) {
	var ws []Workspace
	for _, n := range []string{"g", "b", "e", "a", "f", "c", "d"} {
		ws = append(ws, newWS("c1", n, "env", "dev").with(inPhase(magosv1.PhaseValidationFailed, "")))
	}
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: envSteps(), Clusters: clusters("c1"),
		Workspaces: append(ws, newWS("c1", "s", "env", "staging"), newWS("c1", "p", "env", "prod"))})
	want := "One or more workspaces failed in step dev: c1/payments/a (ValidationFailed), c1/payments/b (ValidationFailed), " +
		"c1/payments/c (ValidationFailed), c1/payments/d (ValidationFailed), c1/payments/e (ValidationFailed), and 2 more"
	if d.Message != want {
		t.Fatalf("message\n%q, want\n%q", d.Message, want)
	}
}

// TestDecideNoWorkspacesFound checks that a step matching nothing (a typo) fails the rollout
// up front, grants nothing, and keeps runs in flight.
func TestDecideNoWorkspacesFound(t *testing.T) {
	typo := rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("staging", "env", "staging"), stepSpec("prod", "env", "prdo"))
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: typo, Clusters: clusters("c1"),
		Workspaces: []Workspace{
			newWS("c1", "dev", "env", "dev").with(grantedNow),
			newWS("c1", "dev-running", "env", "dev").with(inPhase(magosv1.PhaseApplying, magosv1.ReasonApplying), grantedNow),
			newWS("c1", "staging", "env", "staging"),
			newWS("c1", "prod", "env", "prod"),
		}}
	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, 2)
	want := "No workspaces found matching selector for step prod; halting to prevent skipping environments"
	if d.Message != want || d.CurrentStepName != "prod" {
		t.Fatalf("message %q step %q", d.Message, d.CurrentStepName)
	}
	if len(d.Grants) != 0 {
		t.Fatalf("grants %v", d.Grants)
	}
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "dev")})
	if d.Steps[2].Phase != magosv1.StepFailed || d.Steps[2].Matched != 0 || d.Steps[0].Phase != magosv1.StepPending {
		t.Fatalf("steps %+v", d.Steps)
	}

	t.Run("first empty step wins", func(t *testing.T) {
		in := in
		in.Rollout = rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("qa", "env", "qa"), stepSpec("prod", "env", "prdo"))
		d := Decide(in)
		assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, 1)
	})
	t.Run("fixing the selector resumes", func(t *testing.T) {
		in := in
		in.Rollout = envSteps()
		d := Decide(in)
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
		if len(d.Grants) != 0 || len(d.Revokes) != 0 {
			t.Fatalf("dev is already granted: grants %v revokes %v", d.Grants, d.Revokes)
		}
	})
}

// TestDecideCrossProjectIsolation checks that Workspaces of other Projects (by projectRef or
// by namespace) are never granted, revoked or counted, whatever their labels.
func TestDecideCrossProjectIsolation(t *testing.T) {
	others := []Workspace{
		newWS("c1", "other-dev", "env", "dev").with(inProject("other", testNamespace)),
		newWS("c1", "other-prod", "env", "prod").with(inProject("other", testNamespace), grantedRun("x")),
		newWS("c1", "elsewhere-dev", "env", "dev").with(inProject(testProject, "elsewhere")),
		newWS("c1", "elsewhere-staging", "env", "staging").with(inProject(testProject, "elsewhere"), grantedRun("y")),
		newWS("gone", "unregistered-dev", "env", "dev").with(grantedRun("z")),
	}
	mine := []Workspace{
		newWS("c1", "dev", "env", "dev"),
		newWS("c1", "staging", "env", "staging").with(grantedNow),
		newWS("c1", "prod", "env", "prod"),
	}
	for _, rollout := range []*magosv1.Rollout{nil, envSteps()} {
		name := "parallel"
		if rollout != nil {
			name = "rollout"
		}
		t.Run(name, func(t *testing.T) {
			in := Input{Namespace: testNamespace, Project: testProject, Rollout: rollout, Clusters: clusters("c1"),
				Workspaces: append(slices.Clone(others), mine...)}
			d := Decide(in)
			assertKeys(t, "members", d.Members, []Key{k("c1", "dev"), k("c1", "prod"), k("c1", "staging")})
			for _, c := range append(slices.Clone(d.Grants), d.Revokes...) {
				if c.Key.Namespace != testNamespace || c.Key.Name == "other-dev" || c.Key.Name == "other-prod" || c.Key.Cluster == "gone" {
					t.Fatalf("decision touches a Workspace of another Project: %v", c)
				}
			}
			if d.Total != 3 {
				t.Fatalf("total %d, want 3", d.Total)
			}
			if rollout != nil {
				if d.Steps[0].Matched != 1 {
					t.Fatalf("step dev matched %d, want 1", d.Steps[0].Matched)
				}
				assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "dev")})
				assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "staging")})
			}
		})
	}
	t.Run("no members at all", func(t *testing.T) {
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: envSteps(), Clusters: clusters("c1"), Workspaces: others})
		assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, 0)
		if d.HasWrites() || len(d.Members) != 0 {
			t.Fatalf("writes %v %v members %v", d.Grants, d.Revokes, d.Members)
		}
	})
}

// TestDecideOverlappingSelectors checks that a Workspace matched by two steps counts in both
// and is granted once per run, never flapping between grant and revocation.
func TestDecideOverlappingSelectors(t *testing.T) {
	ro := rolloutOf(
		magosv1.RolloutStep{Name: "early", Selector: magosv1.LabelSelector{MatchExpressions: []magosv1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "staging"}},
		}}},
		stepSpec("staging", "env", "staging"),
		stepSpec("all", "tier", "app"),
	)
	f := &fleet{t: t, clusters: clusters("c1", "c2"), rollout: ro, ws: []Workspace{
		newWS("c1", "dev", "env", "dev", "tier", "app"),
		newWS("c2", "staging", "env", "staging", "tier", "app"),
		newWS("c2", "prod", "env", "prod", "tier", "app"),
	}}
	d := f.decide()
	if d.Steps[0].Matched != 2 || d.Steps[1].Matched != 1 || d.Steps[2].Matched != 3 || d.Total != 3 {
		t.Fatalf("matched %+v total %d", d.Steps, d.Total)
	}
	assertKeys(t, "first grants", keysOf(d.Grants), []Key{k("c1", "dev"), k("c2", "staging")})

	// Deciding twice after every write never writes again, at every stage of the walk.
	for round := 0; round < 20; round++ {
		if d := Decide(f.input()); d.HasWrites() {
			t.Fatalf("round %d: a second decision writes %v %v", round, d.Grants, d.Revokes)
		}
		f.start()
		f.finish()
		d = f.decide()
		if d.Reason == magosv1.ReasonRolloutCompleted && !d.HasWrites() {
			break
		}
	}
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	seen := map[Change]bool{}
	for _, g := range f.grants {
		if seen[g] {
			t.Fatalf("run %s of %s granted twice (flapping)", g.Run, g.Key)
		}
		seen[g] = true
	}
	if len(f.grants) != 3 {
		t.Fatalf("grants %v, want one per Workspace", f.grants)
	}
}

// TestDecideRewind checks that a new Workspace, a spec change, a new revision or a
// reconcile-request in an earlier step makes that step current again, while runs in flight in
// later steps keep their grant and unstarted ones lose it.
func TestDecideRewind(t *testing.T) {
	base := func() []Workspace {
		return []Workspace{
			newWS("c1", "dev", "env", "dev").with(appliedOK),
			newWS("c1", "staging-a", "env", "staging").with(inPhase(magosv1.PhasePlanning, magosv1.ReasonPlanning), grantedAt("rev-1")),
			newWS("c2", "staging-b", "env", "staging").with(grantedAt("rev-1")),
			newWS("c2", "prod", "env", "prod"),
		}
	}
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: envSteps(), Clusters: clusters("c1", "c2")}
	in.Workspaces = base()
	if d := Decide(in); d.CurrentStep != 1 || d.HasWrites() {
		t.Fatalf("before: step %d writes %v %v", d.CurrentStep, d.Grants, d.Revokes)
	}
	tests := []struct {
		name   string
		change func([]Workspace) []Workspace
		grants []Key
	}{
		{"new Workspace in an earlier step", func(ws []Workspace) []Workspace {
			return append(ws, newWS("c2", "dev-new", "env", "dev"))
		}, []Key{k("c2", "dev-new")}},
		{"spec change in an earlier step", func(ws []Workspace) []Workspace {
			ws[0].Generation = 2 // the spoke has not reset yet: Applied for generation 1
			return ws
		}, nil},
		{"new revision detected in an earlier step", func(ws []Workspace) []Workspace {
			ws[0].DetectedRevision = "rev-2"
			return ws
		}, nil},
		{"reconcile requested in an earlier step", func(ws []Workspace) []Workspace {
			ws[0].ReconcileRequested = true
			return ws
		}, nil},
		{"spoke reset the earlier Workspace", func(ws []Workspace) []Workspace {
			ws[0].Generation, ws[0].Phase, ws[0].RunID = 2, magosv1.PhasePending, "run-2-dev"
			return ws
		}, []Key{k("c1", "dev")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := in
			in.Workspaces = tt.change(base())
			d := Decide(in)
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
			assertKeys(t, "grants", keysOf(d.Grants), tt.grants)
			// staging-a is planning: it keeps its grant; staging-b has not started: revoked.
			assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c2", "staging-b")})
			if d.Steps[0].Phase != magosv1.StepProgressing || d.Steps[1].Phase != magosv1.StepPending {
				t.Fatalf("steps %+v", d.Steps)
			}
		})
	}
}

// TestDecideGrantNamesCurrentRun checks that a grant for an older run is replaced by one for
// the current run, and that a correct grant is not written again.
func TestDecideGrantNamesCurrentRun(t *testing.T) {
	tests := []struct {
		name  string
		grant Grant
		write bool
	}{
		{"no grant", Grant{}, true},
		{"grant for an old run", Grant{Allowed: true, Run: "run-0", By: keys.GrantedByRollout}, true},
		{"grant without a run", Grant{Allowed: true}, true},
		{"run without execution-allowed", Grant{Run: "run-1-c1-dev"}, true},
		{"grant for the current run", Grant{Allowed: true, Run: "run-1-c1-dev", By: keys.GrantedByRollout}, false},
		{"grant for the current run by the project", Grant{Allowed: true, Run: "run-1-c1-dev", By: keys.GrantedByProject}, false},
	}
	for _, tt := range tests {
		for _, mode := range []struct {
			name    string
			rollout *magosv1.Rollout
		}{{"parallel", nil}, {"rollout", envSteps()}} {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				w := newWS("c1", "dev", "env", "dev")
				w.Grant = tt.grant
				ws := []Workspace{w, newWS("c1", "staging", "env", "staging"), newWS("c1", "prod", "env", "prod")}
				d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: mode.rollout, Clusters: clusters("c1"), Workspaces: ws})
				var got []Change
				for _, g := range d.Grants {
					if g.Key.Name == "dev" {
						got = append(got, g)
					}
				}
				if !tt.write {
					if len(got) != 0 {
						t.Fatalf("grants %v, want none", got)
					}
					return
				}
				if len(got) != 1 || got[0].Run != "run-1-c1-dev" {
					t.Fatalf("grants %v, want one for run-1-c1-dev", got)
				}
			})
		}
	}
}

// TestDecideClusterRemoved checks that the Workspaces of a cluster that is no longer
// registered drop out, which fails a step they alone made up.
func TestDecideClusterRemoved(t *testing.T) {
	ro := rolloutOf(
		stepSpec("us-east-1", "region", "us-east-1"),
		stepSpec("eu-west-1", "region", "eu-west-1"),
		stepSpec("ap-south-1", "region", "ap-south-1"),
	)
	ws := []Workspace{
		newWS("us-east-1", "cdn", "region", "us-east-1").with(appliedOK),
		newWS("eu-west-1", "cdn", "region", "eu-west-1").with(inPhase(magosv1.PhasePlanning, magosv1.ReasonPlanning), grantedNow),
		newWS("ap-south-1", "cdn", "region", "ap-south-1"),
	}
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("us-east-1", "ap-south-1"), Workspaces: ws})
	assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, 1)
	assertKeys(t, "members", d.Members, []Key{k("ap-south-1", "cdn"), k("us-east-1", "cdn")})
	if !slices.Equal(d.Clusters, []string{"ap-south-1", "us-east-1"}) || d.HasWrites() {
		t.Fatalf("clusters %v writes %v %v", d.Clusters, d.Grants, d.Revokes)
	}
}

// TestDecideClusterRemovedMidStep: a cluster removed from the hub's configuration while its
// step runs makes the Rollout wait on that step; it never shrinks the step and never lets the
// next one start. Edits of the Rollout's spec that leave the step (a pause and resume, an
// approval, planFirst) do not end the wait; registering the cluster again, or acknowledging its
// removal in the annotation magosproject.io/acknowledge-removed-clusters, does.
func TestDecideClusterRemovedMidStep(t *testing.T) {
	ro := rolloutOf(stepSpec("prod", "env", "prod"), stepSpec("canary", "env", "canary"))
	ro.Generation, ro.Status.ObservedGeneration = 1, 1
	ro.Status.Steps = []magosv1.StepStatus{
		{Name: "prod", Phase: magosv1.StepProgressing, Matched: 2, Clusters: []string{"c1", "c2"}},
		{Name: "canary", Phase: magosv1.StepPending, Matched: 1, Clusters: []string{"c1"}},
	}
	ws := []Workspace{
		newWS("c1", "a", "env", "prod").with(appliedOK),
		newWS("c2", "b", "env", "prod").with(inPhase(magosv1.PhasePlanning, magosv1.ReasonPlanning)),
		newWS("c1", "c", "env", "canary"),
	}
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"), Workspaces: ws}
	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 0)
	want := "Waiting for cluster c2: removed from the hub's configuration while the step ran (register it again, or list it in the Rollout's annotation magosproject.io/acknowledge-removed-clusters to go on without it) (step prod: 1/1 applied)"
	if d.Message != want || len(d.Grants) != 0 || !slices.Equal(d.WaitingFor, []string{"c2"}) {
		t.Fatalf("message %q grants %v waiting for %v, want %q, no grants, waiting for c2", d.Message, d.Grants, d.WaitingFor, want)
	}
	if !slices.Equal(d.Steps[0].Clusters, []string{"c1", "c2"}) {
		t.Fatalf("step clusters %v: the removed cluster is forgotten", d.Steps[0].Clusters)
	}
	// The next decision still remembers it (the status now says so).
	ro.Status.Steps = d.Steps
	if d := Decide(in); d.Reason != magosv1.ReasonWaitingForClusters {
		t.Fatalf("second decision %s: %s", d.Reason, d.Message)
	}
	// Other edits of the spec leave the step waiting: paused and resumed, planFirst toggled.
	for gen, edit := range []func(){
		func() { ro.Spec.Paused = true },
		func() { ro.Spec.Paused = false },
		func() { ro.Spec.PlanFirst = true },
		func() { ro.Spec.PlanFirst = false },
	} {
		edit()
		ro.Generation = int64(gen + 2)
		d = Decide(in)
		// (Under planFirst the later step may plan for the preview; nothing applies.)
		if d.Reason != magosv1.ReasonWaitingForClusters && d.Reason != magosv1.ReasonPaused ||
			slices.ContainsFunc(d.Grants, func(c Change) bool { return !c.PlanOnly }) {
			t.Fatalf("after spec edit %d (generation %d): %s %q grants %v: the removed cluster was forgotten", gen, ro.Generation, d.Reason, d.Message, d.Grants)
		}
		ro.Status.Steps, ro.Status.ObservedGeneration = d.Steps, ro.Generation
	}
	// An operator acknowledges the removal: the step goes on without the cluster.
	ro.Annotations = map[string]string{keys.AcknowledgeRemovedClusters: "c9, c2"}
	d = Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
	assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "c")})
	// A completed step does not wait for a cluster removed after it.
	ro.Annotations = nil
	ro.Status.Steps[0].Phase = magosv1.StepCompleted
	if d := Decide(in); d.CurrentStep != 1 {
		t.Fatalf("current step %d (%s), want 1", d.CurrentStep, d.Message)
	}
}

// TestDecideDeletingWorkspaces: a Workspace being deleted leaves its step (it never blocks it
// forever); one whose destroy failed halts its step like any failed run.
func TestDecideDeletingWorkspaces(t *testing.T) {
	ro := rolloutOf(stepSpec("prod", "env", "prod"), stepSpec("canary", "env", "canary"))
	base := func(p magosv1.Phase, reason string) []Workspace {
		return []Workspace{
			newWS("c1", "a", "env", "prod").with(appliedOK),
			newWS("c1", "b", "env", "prod").with(inPhase(p, reason)),
			newWS("c1", "c", "env", "canary"),
		}
	}
	for _, reason := range []string{magosv1.ReasonDeleting, magosv1.ReasonDestroying} {
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"), Workspaces: base(magosv1.PhaseDeleting, reason)})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "c")})
	}
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"), Workspaces: base(magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed)})
	assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 0)
	if want := "One or more workspaces failed in step prod: c1/payments/b (DestroyFailed)"; d.Message != want {
		t.Fatalf("message %q, want %q", d.Message, want)
	}
}

// destroyPending makes the Workspace a deleted one whose destroy run waits for its grant
// (Deleting/DestroyPending), last applied at commit rev-0.
func destroyPending(w *Workspace) {
	w.Phase, w.Reason = magosv1.PhaseDeleting, magosv1.ReasonDestroyPending
	w.ObservedGeneration = w.Generation
	w.ObservedRevision = "rev-0"
	w.RunID = "destroy-" + w.Key.Cluster + "-" + w.Key.Name
}

// TestDecideDestroyPending: a deleted Workspace whose destroy waits for its grant stays a
// member of its steps: its destroy run is granted (naming no commit) when its step progresses,
// so destroys go in step order; it waits in a later step and while the Rollout is paused, and
// in parallel mode it is granted at once.
func TestDecideDestroyPending(t *testing.T) {
	ro := rolloutOf(stepSpec("prod", "env", "prod"), stepSpec("canary", "env", "canary"))
	fleet := []Workspace{
		newWS("c1", "a", "env", "prod").with(appliedOK),
		newWS("c1", "b", "env", "prod").with(destroyPending),
		newWS("c1", "c", "env", "canary").with(destroyPending),
		newWS("c1", "d", "env", "prod"),
	}
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"), Workspaces: fleet}

	// In the current step: granted its destroy run, without a commit; the later step waits.
	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
	want := []Change{
		{Key: k("c1", "b"), Run: "destroy-c1-b"},
		{Key: k("c1", "d"), Run: "run-1-c1-d", Revision: "rev-1"},
	}
	if !slices.Equal(d.Grants, want) {
		t.Fatalf("grants %v, want %v", d.Grants, want)
	}
	if d.Total != 4 || d.Steps[0].Matched != 3 || d.Steps[0].Applied != 1 {
		t.Fatalf("total %d, step prod %d/%d applied: the destroy must count as a member, not Done", d.Total, d.Steps[0].Applied, d.Steps[0].Matched)
	}
	// Granted already: nothing to write again.
	if d2 := Decide(Input{Namespace: in.Namespace, Project: in.Project, Rollout: ro, Clusters: in.Clusters, Workspaces: applyWrites(fleet, d, keys.GrantedByRollout)}); d2.HasWrites() {
		t.Fatalf("deciding again writes %v %v", d2.Grants, d2.Revokes)
	}

	// Once b's destroy runs and d is applied, prod is done and canary's destroy is granted.
	step2 := slices.Clone(fleet)
	step2[1] = step2[1].with(inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroying))
	step2[3] = step2[3].with(appliedOK)
	d = Decide(Input{Namespace: in.Namespace, Project: in.Project, Rollout: ro, Clusters: in.Clusters, Workspaces: step2})
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
	if want := []Change{{Key: k("c1", "c"), Run: "destroy-c1-c"}}; !slices.Equal(d.Grants, want) {
		t.Fatalf("grants %v, want %v", d.Grants, want)
	}

	// Paused: nothing is granted, and a grant not yet used is revoked.
	paused := ro.DeepCopy()
	paused.Spec.Paused = true
	held := slices.Clone(fleet)
	held[1] = held[1].with(grantedNow)
	d = Decide(Input{Namespace: in.Namespace, Project: in.Project, Rollout: paused, Clusters: in.Clusters, Workspaces: held})
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonPaused, 0)
	if len(d.Grants) != 0 {
		t.Fatalf("paused, grants %v", d.Grants)
	}
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "b")})

	// Parallel mode: every waiting destroy is granted at once.
	d = Decide(Input{Namespace: in.Namespace, Project: in.Project, Clusters: in.Clusters, Workspaces: fleet})
	want = []Change{
		{Key: k("c1", "b"), Run: "destroy-c1-b"},
		{Key: k("c1", "c"), Run: "destroy-c1-c"},
		{Key: k("c1", "d"), Run: "run-1-c1-d"},
	}
	if !slices.Equal(d.Grants, want) {
		t.Fatalf("parallel grants %v, want %v", d.Grants, want)
	}
}

// TestDecideWaitingForClusters checks that a Rollout waits on the Workspaces of a cluster
// whose agent is silent: it neither advances past them nor fails the step.
func TestDecideWaitingForClusters(t *testing.T) {
	ro := rolloutOf(
		stepSpec("us-east-1", "region", "us-east-1"),
		stepSpec("eu-west-1", "region", "eu-west-1"),
		stepSpec("ap-south-1", "region", "ap-south-1"),
	)
	cl := clusters("us-east-1", "eu-west-1", "ap-south-1")
	cl["eu-west-1"] = Cluster{Name: "eu-west-1", Synced: true, Reason: "agent not heartbeating"}
	tests := []struct {
		name    string
		euWest  Workspace
		step    int
		applied int32
	}{
		{"pending in the silent cluster", newWS("eu-west-1", "cdn", "region", "eu-west-1"), 1, 1},
		{"applied in the silent cluster does not count", newWS("eu-west-1", "cdn", "region", "eu-west-1").with(appliedOK, grantedNow), 1, 1},
		{"failed in the silent cluster: last report says failed", newWS("eu-west-1", "cdn", "region", "eu-west-1").with(inPhase(magosv1.PhaseFailed, "ApplyFailed")), 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := []Workspace{
				newWS("us-east-1", "cdn", "region", "us-east-1").with(appliedOK),
				tt.euWest,
				newWS("ap-south-1", "cdn", "region", "ap-south-1"),
			}
			d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws})
			if tt.euWest.Failed() {
				assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonStepFailed, 1)
				return
			}
			assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, tt.step)
			want := "Waiting for cluster eu-west-1: agent not heartbeating (step eu-west-1: 0/1 applied)"
			if d.Message != want {
				t.Fatalf("message %q, want %q", d.Message, want)
			}
			if len(d.Grants) != 0 || d.Applied != tt.applied || d.Steps[1].Phase != magosv1.StepWaiting || d.Steps[2].Phase != magosv1.StepPending {
				t.Fatalf("grants %v applied %d steps %+v", d.Grants, d.Applied, d.Steps)
			}
		})
	}
	t.Run("other members of the step still run", func(t *testing.T) {
		ws := []Workspace{
			newWS("us-east-1", "a", "env", "prod"),
			newWS("eu-west-1", "b", "env", "prod"),
			newWS("ap-south-1", "c", "env", "prod"),
		}
		cl := clusters("us-east-1", "eu-west-1", "ap-south-1")
		cl["eu-west-1"] = Cluster{Name: "eu-west-1", Synced: true}
		cl["ap-south-1"] = Cluster{Name: "ap-south-1", Synced: true, Reason: "AgentSilent"}
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: rolloutOf(stepSpec("prod", "env", "prod")), Clusters: cl, Workspaces: ws})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 0)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("us-east-1", "a")})
		want := "Waiting for cluster ap-south-1: AgentSilent; cluster eu-west-1: unavailable (step prod: 0/3 applied)"
		if d.Message != want {
			t.Fatalf("message %q, want %q", d.Message, want)
		}
	})
	t.Run("a silent cluster in a later step does not matter", func(t *testing.T) {
		ws := []Workspace{
			newWS("us-east-1", "cdn", "region", "us-east-1"),
			newWS("eu-west-1", "cdn", "region", "eu-west-1"),
			newWS("ap-south-1", "cdn", "region", "ap-south-1"),
		}
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("us-east-1", "cdn")})
	})
}

// TestDecideClusterSelector checks that a step's clusterSelector narrows it to the
// Workspaces of clusters whose registered labels match.
func TestDecideClusterSelector(t *testing.T) {
	cl := clusters("canary-1", "fleet-1", "fleet-2")
	for n, c := range cl {
		c.Labels = map[string]string{"tier": "fleet"}
		if n == "canary-1" {
			c.Labels["tier"] = "canary"
		}
		cl[n] = c
	}
	canary := magosv1.MatchLabels(map[string]string{"tier": "canary"})
	ro := rolloutOf(
		magosv1.RolloutStep{Name: "canary", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"}), ClusterSelector: &canary},
		stepSpec("everywhere", "env", "prod"),
	)
	f := &fleet{t: t, clusters: cl, rollout: ro, ws: []Workspace{
		newWS("fleet-2", "app", "env", "prod"),
		newWS("canary-1", "app", "env", "prod"),
		newWS("fleet-1", "app", "env", "prod"),
		newWS("canary-1", "dev", "env", "dev"),
	}}
	d := Decide(f.input())
	if d.Steps[0].Matched != 1 || !slices.Equal(d.Steps[0].Clusters, []string{"canary-1"}) ||
		d.Steps[1].Matched != 3 || !slices.Equal(d.Steps[1].Clusters, []string{"canary-1", "fleet-1", "fleet-2"}) {
		t.Fatalf("steps %+v", d.Steps)
	}
	batches, last := f.walk()
	want := [][]Key{{k("canary-1", "app")}, {k("fleet-1", "app"), k("fleet-2", "app")}}
	if !reflect.DeepEqual(batches, want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
	assertStatus(t, last, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 2)
	if last.Total != 3 || len(last.Members) != 4 {
		t.Fatalf("total %d members %d: the dev Workspace is a member no step selects", last.Total, len(last.Members))
	}
}

// TestDecideInvalidSelector checks that a selector that does not parse fails the rollout,
// naming the step, without grants.
func TestDecideInvalidSelector(t *testing.T) {
	bad := magosv1.LabelSelector{MatchExpressions: []magosv1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn}}}
	ws := []Workspace{
		newWS("c1", "dev", "env", "dev").with(grantedNow),
		newWS("c1", "staging", "env", "staging"),
		newWS("c1", "prod", "env", "prod").with(inPhase(magosv1.PhaseApplying, magosv1.ReasonApplying), grantedNow),
	}
	tests := []struct {
		name string
		step magosv1.RolloutStep
		msg  string
	}{
		{"selector", magosv1.RolloutStep{Name: "staging", Selector: bad}, "Invalid selector in step staging: "},
		{"clusterSelector", magosv1.RolloutStep{Name: "staging", Selector: magosv1.MatchLabels(map[string]string{"env": "staging"}), ClusterSelector: &bad}, "Invalid clusterSelector in step staging: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ro := rolloutOf(stepSpec("dev", "env", "dev"), tt.step, stepSpec("prod", "env", "prod"))
			d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"), Workspaces: ws})
			assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonInvalidSelector, 1)
			if len(d.Message) <= len(tt.msg) || d.Message[:len(tt.msg)] != tt.msg {
				t.Fatalf("message %q, want prefix %q", d.Message, tt.msg)
			}
			if len(d.Grants) != 0 {
				t.Fatalf("grants %v", d.Grants)
			}
			assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "dev")})
			if d.Steps[1].Phase != magosv1.StepFailed || d.Steps[0].Matched != 1 {
				t.Fatalf("steps %+v", d.Steps)
			}
		})
	}
}

// TestDecidePaused checks that a paused rollout grants nothing, lets runs in flight finish,
// revokes grants of Workspaces that have not started, and still reports its steps.
func TestDecidePaused(t *testing.T) {
	ro := envSteps()
	ro.Spec.Paused = true
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"),
		Workspaces: []Workspace{
			newWS("c1", "dev", "env", "dev").with(appliedOK),
			newWS("c1", "staging-a", "env", "staging").with(inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded), grantedNow),
			newWS("c1", "staging-b", "env", "staging").with(grantedNow),
			newWS("c1", "staging-c", "env", "staging"),
			newWS("c1", "prod", "env", "prod"),
		}}
	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonPaused, 1)
	if d.Message != "Rollout is paused at step staging (0/3 applied)" {
		t.Fatalf("message %q", d.Message)
	}
	if len(d.Grants) != 0 {
		t.Fatalf("grants %v", d.Grants)
	}
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "staging-b")})
	want := []magosv1.StepStatus{
		{Name: "dev", Phase: magosv1.StepCompleted, Matched: 1, Applied: 1, Clusters: []string{"c1"}},
		{Name: "staging", Phase: magosv1.StepWaiting, Matched: 3, Running: 1, Clusters: []string{"c1"}},
		{Name: "prod", Phase: magosv1.StepPending, Matched: 1, Clusters: []string{"c1"}},
	}
	if !reflect.DeepEqual(d.Steps, want) {
		t.Fatalf("steps\n%+v, want\n%+v", d.Steps, want)
	}

	ro2 := envSteps()
	in.Rollout = ro2
	in.Workspaces = applyWrites(in.Workspaces, d, keys.GrantedByRollout)
	d = Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
	assertKeys(t, "grants after resume", keysOf(d.Grants), []Key{k("c1", "staging-b"), k("c1", "staging-c")})
}

// TestDecideParallel checks the Project's DefaultParallel mode.
func TestDecideParallel(t *testing.T) {
	cl := clusters("c1", "c2")
	cl["c2"] = Cluster{Name: "c2", Synced: true}
	in := Input{Namespace: testNamespace, Project: testProject, Clusters: cl, Workspaces: []Workspace{
		newWS("c2", "silent", "env", "dev"),
		newWS("c1", "pending"),
		newWS("c1", "granted").with(grantedNow),
		newWS("c1", "stale").with(grantedRun("old")),
		newWS("c1", "no-run").with(func(w *Workspace) { w.RunID = "" }),
		newWS("c1", "applied").with(appliedOK, grantedRun("old")),
		newWS("c1", "planning").with(inPhase(magosv1.PhasePlanning, magosv1.ReasonPlanning), grantedNow),
		newWS("c1", "failed").with(inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed)),
	}}
	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseReady, magosv1.ReasonDefaultParallel, 0)
	if d.Message != "Project is orchestrating workspaces in parallel" || d.CurrentStepName != "" || d.Steps != nil {
		t.Fatalf("message %q step %q steps %v", d.Message, d.CurrentStepName, d.Steps)
	}
	assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "pending"), k("c1", "stale")})
	if len(d.Revokes) != 0 {
		t.Fatalf("parallel mode revokes %v", d.Revokes)
	}
	if d.Applied != 1 || d.Total != 8 || !slices.Equal(d.Clusters, []string{"c1", "c2"}) {
		t.Fatalf("applied %d/%d clusters %v", d.Applied, d.Total, d.Clusters)
	}
	if again := Decide(Input{Namespace: in.Namespace, Project: in.Project, Clusters: cl, Workspaces: applyWrites(in.Workspaces, d, keys.GrantedByProject)}); again.HasWrites() {
		t.Fatalf("second decision writes %v", again.Grants)
	}
}

// TestDecideRolloutTakesOver checks that grants left by parallel mode on Workspaces the
// current step does not select are revoked when a Rollout appears.
func TestDecideRolloutTakesOver(t *testing.T) {
	in := Input{Namespace: testNamespace, Project: testProject, Clusters: clusters("c1", "c2"), Workspaces: []Workspace{
		newWS("c1", "dev", "env", "dev"),
		newWS("c1", "staging", "env", "staging"),
		newWS("c2", "prod", "env", "prod"),
		newWS("c2", "unselected", "env", "qa"),
		newWS("c2", "prod-running", "env", "prod").with(inPhase(magosv1.PhaseApplying, magosv1.ReasonApplying)),
	}}
	in.Workspaces[4] = in.Workspaces[4].with(grantedNow)
	d := Decide(in)
	assertKeys(t, "parallel grants", keysOf(d.Grants), []Key{k("c1", "dev"), k("c1", "staging"), k("c2", "prod"), k("c2", "unselected")})
	in.Workspaces = applyWrites(in.Workspaces, d, keys.GrantedByProject)

	in.Rollout = envSteps()
	d = Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
	if len(d.Grants) != 0 {
		t.Fatalf("dev already holds a grant for its run: grants %v", d.Grants)
	}
	assertKeys(t, "revokes", keysOf(d.Revokes), []Key{k("c1", "staging"), k("c2", "prod"), k("c2", "unselected")})
	if d.Total != 4 {
		t.Fatalf("total %d, want the 4 Workspaces the steps select", d.Total)
	}
}

// TestDecideDoneRequiresCurrentReport checks when a Workspace counts as Applied for a step.
func TestDecideDoneRequiresCurrentReport(t *testing.T) {
	tests := []struct {
		name              string
		ws                Workspace
		available         bool
		appliedForCurrent bool
		done              bool
	}{
		{"applied for the current generation", newWS("c1", "w").with(appliedOK), true, true, true},
		{"applied for an older generation", newWS("c1", "w").with(appliedOK, func(w *Workspace) { w.Generation = 2 }), true, false, false},
		{"observed generation ahead", newWS("c1", "w").with(appliedOK, func(w *Workspace) { w.ObservedGeneration = 2 }), true, false, false},
		{"detected revision pending", newWS("c1", "w").with(appliedOK, func(w *Workspace) { w.DetectedRevision = "rev-2" }), true, false, false},
		{"detected revision already applied", newWS("c1", "w").with(appliedOK, func(w *Workspace) { w.DetectedRevision = "rev-1" }), true, true, true},
		{"reconcile requested", newWS("c1", "w").with(appliedOK, func(w *Workspace) { w.ReconcileRequested = true }), true, false, false},
		{"cluster unavailable", newWS("c1", "w").with(appliedOK), false, true, false},
		{"pending", newWS("c1", "w"), true, false, false},
		{"planned", newWS("c1", "w").with(inPhase(magosv1.PhasePlanned, "")), true, false, false},
		{"no status yet", newWS("c1", "w").with(inPhase("", "")), true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := clusters("c1")
			cl["c1"] = Cluster{Name: "c1", Synced: true, Available: tt.available}
			d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: rolloutOf(stepSpec("all")),
				Clusters: cl, Workspaces: []Workspace{tt.ws}})
			if got := d.Steps[0].Applied == 1; got != tt.done {
				t.Fatalf("done = %v, want %v (%s)", got, tt.done, d.Message)
			}
			if tt.done {
				assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 1)
			} else if d.Phase == magosv1.PhaseApplied {
				t.Fatalf("rollout completed on a stale report")
			}
			if tt.ws.AppliedForCurrent() != tt.appliedForCurrent {
				t.Fatalf("AppliedForCurrent = %v", tt.ws.AppliedForCurrent())
			}
		})
	}
}

// TestDecideNoSteps checks a Rollout without steps: Ready, no writes.
func TestDecideNoSteps(t *testing.T) {
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: rolloutOf(), Clusters: clusters("c1"),
		Workspaces: []Workspace{newWS("c1", "a"), newWS("c1", "b").with(grantedRun("old"))}})
	assertStatus(t, d, magosv1.PhaseReady, magosv1.ReasonNoSteps, 0)
	if d.Message != "No steps defined in strategy" || d.HasWrites() || len(d.Members) != 2 || d.Total != 0 {
		t.Fatalf("decision %+v", d)
	}
}

// TestDecideStepStatuses checks the per-step counts and the totals.
func TestDecideStepStatuses(t *testing.T) {
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: envSteps(), Clusters: clusters("c1", "c2", "c3"),
		Workspaces: []Workspace{
			newWS("c1", "dev-1", "env", "dev").with(appliedOK),
			newWS("c2", "dev-2", "env", "dev").with(appliedOK),
			newWS("c3", "staging-1", "env", "staging").with(appliedOK),
			newWS("c1", "staging-2", "env", "staging").with(inPhase(magosv1.PhaseApplying, "")),
			newWS("c2", "staging-3", "env", "staging"),
			newWS("c3", "prod-1", "env", "prod").with(inPhase(magosv1.PhaseFailed, "")),
			newWS("c3", "prod-2", "env", "prod").with(appliedOK),
		}}
	d := Decide(in)
	want := []magosv1.StepStatus{
		{Name: "dev", Phase: magosv1.StepCompleted, Matched: 2, Applied: 2, Clusters: []string{"c1", "c2"}},
		{Name: "staging", Phase: magosv1.StepProgressing, Matched: 3, Applied: 1, Running: 1, Clusters: []string{"c1", "c2", "c3"}},
		{Name: "prod", Phase: magosv1.StepPending, Matched: 2, Applied: 1, Failed: 1, Clusters: []string{"c3"}},
	}
	if !reflect.DeepEqual(d.Steps, want) {
		t.Fatalf("steps\n%+v, want\n%+v", d.Steps, want)
	}
	if d.Applied != 4 || d.Total != 7 || d.CurrentStepName != "staging" || d.Message != "Executing step staging (1/3 applied)" {
		t.Fatalf("applied %d/%d step %q message %q", d.Applied, d.Total, d.CurrentStepName, d.Message)
	}
	assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c2", "staging-3")})
}

// TestDecideDeterministic checks that the input order does not change the decision.
func TestDecideDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 200; i++ {
		in := randomInput(rng)
		want := Decide(in)
		shuffled := in
		shuffled.Workspaces = slices.Clone(in.Workspaces)
		rng.Shuffle(len(shuffled.Workspaces), func(a, b int) {
			shuffled.Workspaces[a], shuffled.Workspaces[b] = shuffled.Workspaces[b], shuffled.Workspaces[a]
		})
		if got := Decide(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: decision depends on input order:\n%+v\n%+v", i, got, want)
		}
	}
}

// TestDecideDestroyWaitsForApproval: under a step that requires approval, a destroy is a change
// like an apply: it is not granted until the step's approval names it (the Workspace, the commit
// it destroys and the digest "destroy", listed in the step's plans for magosctl rollout
// approve); an approval that does not name it grants nothing, and a destroy granted under an
// approval loses its grant when the approval no longer names it.
func TestDecideDestroyWaitsForApproval(t *testing.T) {
	prod := stepSpec("prod", "env", "prod")
	prod.RequireApproval = true
	ro := rolloutOf(prod)
	b := newWS("c1", "b", "env", "prod").with(destroyPending)
	b.CurrentRevision = "rev-0"
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"),
		Workspaces: []Workspace{newWS("c1", "a", "env", "prod").with(appliedOK), b}}

	d := Decide(in)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval, 0)
	if len(d.Grants) != 0 {
		t.Fatalf("grants %v before any approval, want none", d.Grants)
	}
	want := []magosv1.PlanStatus{{Workspace: "c1/payments/b", Run: "destroy-c1-b", Revision: "rev-0", Digest: DestroyDigest}}
	if !reflect.DeepEqual(d.Steps[0].Plans, want) {
		t.Fatalf("step plans %+v, want %+v", d.Steps[0].Plans, want)
	}

	// An approval of something else grants nothing.
	ro.Spec.Approvals = []magosv1.StepApproval{{Step: "prod", ApprovedBy: "alice", ApprovedAt: metav1.NewTime(t0),
		Plans: []magosv1.ApprovedPlan{{Workspace: "c1/payments/b", Revision: "rev-0", Digest: "d1"}}}}
	if d := Decide(in); len(d.Grants) != 0 {
		t.Fatalf("grants %v under an approval of another digest, want none", d.Grants)
	}
	// The approval magosctl rollout approve writes: the destroy is granted, bound to no plan.
	ro.Spec.Approvals[0].Plans[0].Digest = DestroyDigest
	d = Decide(in)
	if wantG := []Change{{Key: k("c1", "b"), Run: "destroy-c1-b"}}; !slices.Equal(d.Grants, wantG) {
		t.Fatalf("grants %v under the approval, want %v", d.Grants, wantG)
	}
	in.Workspaces = applyWrites(in.Workspaces, d, keys.GrantedByRollout)
	// The approval withdrawn before the destroy started: the grant goes.
	ro.Spec.Approvals = nil
	d = Decide(in)
	if len(d.Grants) != 0 || !slices.Equal(keysOf(d.Revokes), []Key{k("c1", "b")}) {
		t.Fatalf("after the approval went: grants %v revokes %v, want b's grant revoked", d.Grants, d.Revokes)
	}
}
