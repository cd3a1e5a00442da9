package grant

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/magosfleet/magos/pkg/keys"
)

// absent marks an annotation the Workspace does not carry.
const absent = "<absent>"

// annotations builds a Workspace's annotations from values, leaving out the absent ones.
func annotations(kv ...string) map[string]string {
	a := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] != absent {
			a[kv[i]] = kv[i+1]
		}
	}
	return a
}

// holds lists the names of the predicates in preds that hold.
func holds(preds map[string]bool) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(preds)) {
		if preds[name] {
			out = append(out, name)
		}
	}
	return strings.Join(out, " ")
}

// TestRunDefinition is the definition of which run a grant allows: every combination of
// execution-allowed (absent, "false", "true"), granted-run (absent, empty, the current run,
// another run) and current run (none, r1). want lists the predicates that hold.
func TestRunDefinition(t *testing.T) {
	tests := []struct {
		allowed, run, current string
		want                  string
	}{
		{absent, absent, "", ""},
		{absent, absent, "r1", ""},
		{absent, "", "", "Fenced StaleFor"},
		{absent, "", "r1", "Fenced StaleFor"},
		{absent, "r1", "", "Exists Fenced NamesOtherRun StaleFor"},
		{absent, "r1", "r1", "Exists Fenced"},
		{absent, "r2", "", "Exists Fenced NamesOtherRun StaleFor"},
		{absent, "r2", "r1", "Exists Fenced NamesOtherRun StaleFor"},

		{"false", absent, "", ""},
		{"false", absent, "r1", ""},
		{"false", "", "", "Fenced StaleFor"},
		{"false", "", "r1", "Fenced StaleFor"},
		{"false", "r1", "", "Exists Fenced NamesOtherRun StaleFor"},
		{"false", "r1", "r1", "Exists Fenced"},
		{"false", "r2", "", "Exists Fenced NamesOtherRun StaleFor"},
		{"false", "r2", "r1", "Exists Fenced NamesOtherRun StaleFor"},

		// Upstream's unfenced grant allows no run by AllowsRun.
		{"true", absent, "", "Exists Unfenced"},
		{"true", absent, "r1", "Exists Unfenced"},
		// An empty granted-run fences the grant, to no run: no run is allowed without an ID, by
		// the hub and the agent alike.
		{"true", "", "", "Exists Fenced StaleFor"},
		{"true", "", "r1", "Exists Fenced StaleFor"},
		{"true", "r1", "", "Exists Fenced NamesOtherRun StaleFor"},
		{"true", "r1", "r1", "AllowsPlan AllowsRun Exists Fenced"},
		{"true", "r2", "", "Exists Fenced NamesOtherRun StaleFor"},
		{"true", "r2", "r1", "Exists Fenced NamesOtherRun StaleFor"},
	}
	for _, tt := range tests {
		t.Run(tt.allowed+","+tt.run+","+tt.current, func(t *testing.T) {
			g := Parse(annotations(keys.ExecutionAllowed, tt.allowed, keys.GrantedRun, tt.run, keys.GrantedBy, keys.GrantedByRollout))
			got := holds(map[string]bool{
				"Fenced":        g.Fenced(),
				"Unfenced":      g.Unfenced(),
				"Exists":        g.Exists(),
				"AllowsRun":     g.AllowsRun(tt.current),
				"AllowsPlan":    g.AllowsPlan(tt.current),
				"StaleFor":      g.StaleFor(tt.current),
				"NamesOtherRun": g.NamesOtherRun(tt.current),
			})
			if got != tt.want {
				t.Fatalf("holds %q, want %q", got, tt.want)
			}
		})
	}
}

// TestApplyDefinition is the definition of what a grant allows a run with plan d1 to do:
// every combination of granted-operation (absent, "plan", another value) and granted-plan
// (absent, empty, d1, d2), on a grant for the run and on one for another run. want lists the
// predicates that hold.
func TestApplyDefinition(t *testing.T) {
	tests := []struct {
		run, operation, plan string
		want                 string
	}{
		{"r1", absent, absent, "AllowsApply AllowsPlan"},
		// An empty granted-plan binds the grant to no plan a run can have: hub and agent alike.
		{"r1", absent, "", "AllowsPlan BoundPlan OtherPlan"},
		{"r1", absent, "d1", "AllowsApply AllowsPlan ApprovesPlan BoundPlan"},
		{"r1", absent, "d2", "AllowsPlan BoundPlan OtherPlan"},
		{"r1", "plan", absent, "AllowsPlan PlanOnly"},
		{"r1", "plan", "", "AllowsPlan BoundPlan OtherPlan PlanOnly"},
		{"r1", "plan", "d1", "AllowsPlan ApprovesPlan BoundPlan PlanOnly"},
		{"r1", "plan", "d2", "AllowsPlan BoundPlan OtherPlan PlanOnly"},
		{"r1", "apply", absent, "AllowsApply AllowsPlan"},
		{"r1", "apply", "d2", "AllowsPlan BoundPlan OtherPlan"},
		// A grant for another run allows nothing, whatever plan it names.
		{"r2", absent, absent, ""},
		{"r2", absent, "d1", "ApprovesPlan BoundPlan"},
		{"r2", "plan", "d2", "BoundPlan OtherPlan PlanOnly"},
	}
	for _, tt := range tests {
		t.Run(tt.run+","+tt.operation+","+tt.plan, func(t *testing.T) {
			g := Parse(annotations(keys.ExecutionAllowed, "true", keys.GrantedRun, tt.run,
				keys.GrantedOperation, tt.operation, keys.GrantedPlan, tt.plan))
			plan, bound := g.BoundPlan()
			if want := tt.plan; want != absent && plan != want || want == absent && plan != "" {
				t.Fatalf("BoundPlan = %q, want %q", plan, want)
			}
			got := holds(map[string]bool{
				"AllowsPlan":   g.AllowsPlan("r1"),
				"AllowsApply":  g.AllowsApply("r1", "d1"),
				"PlanOnly":     g.PlanOnly,
				"BoundPlan":    bound,
				"OtherPlan":    g.OtherPlan("d1"),
				"ApprovesPlan": g.ApprovesPlan("d1"),
			})
			if got != tt.want {
				t.Fatalf("holds %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("no plan digest", func(t *testing.T) {
		// A run without a plan digest applies only under a grant that names no plan.
		for plan, want := range map[string]bool{absent: true, "": true, "d1": false} {
			g := Parse(annotations(keys.ExecutionAllowed, "true", keys.GrantedRun, "r1", keys.GrantedPlan, plan))
			if got := g.AllowsApply("r1", ""); got != want {
				t.Errorf("granted-plan %q: AllowsApply = %v, want %v", plan, got, want)
			}
		}
	})
}

// TestRevisionFor: a grant names a commit only when it allows the run (AllowsRun).
func TestRevisionFor(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		allowed, run, revision, current string
		want                            string
		present                         bool
	}{
		{"true", "r1", sha, "r1", sha, true},
		{"true", "r1", "", "r1", "", true},
		{"true", "r1", absent, "r1", "", false},
		{"true", "r2", sha, "r1", "", false},
		{"true", absent, sha, "r1", "", false},
		{"false", "r1", sha, "r1", "", false},
		{absent, "r1", sha, "r1", "", false},
		{"true", "", sha, "", "", false}, // no run is allowed without an ID
	}
	for _, tt := range tests {
		g := Parse(annotations(keys.ExecutionAllowed, tt.allowed, keys.GrantedRun, tt.run, keys.GrantedRevision, tt.revision))
		if got, present := g.RevisionFor(tt.current); got != tt.want || present != tt.present {
			t.Errorf("%+v: RevisionFor = %q, %v; want %q, %v", tt, got, present, tt.want, tt.present)
		}
	}
}

// TestWrite: what a grant writes reads back as the same grant, fenced, and the patch removes
// every other grant key.
func TestWrite(t *testing.T) {
	grants := []Grant{
		{Allowed: true, Run: "r1", By: keys.GrantedByRollout},
		{Allowed: true, Run: "r1", By: keys.GrantedByProject, Revision: "abc", PlanOnly: true},
		{Allowed: true, Run: "r1", By: keys.GrantedByRollout, Plan: "d1"},
		{Allowed: true},
	}
	for _, g := range grants {
		a := g.Annotations()
		back := Parse(a)
		if !back.Equal(g) || !back.Fenced() || !Carried(a) {
			t.Errorf("%+v wrote %v, which reads %+v", g, a, back)
		}
		patch := g.Patch()
		for _, k := range Keys {
			v, ok := patch[k]
			if !ok {
				t.Errorf("%+v: the patch leaves %s as it is", g, k)
			}
			if w, written := a[k]; written && v != w || !written && v != nil {
				t.Errorf("%+v: the patch sets %s to %v", g, k, v)
			}
		}
	}
	if a := (Grant{Run: "r1", By: keys.GrantedByRollout}).Annotations(); len(a) != 0 {
		t.Errorf("a grant that is not allowed writes %v", a)
	}
	for k, v := range (Grant{}).Patch() {
		if v != nil {
			t.Errorf("the revocation sets %s to %v", k, v)
		}
	}
}

// TestCarried: any grant key, whatever its value, is a grant to revoke; other keys are not.
func TestCarried(t *testing.T) {
	for _, k := range Keys {
		if !Carried(map[string]string{k: ""}) {
			t.Errorf("%s is not carried", k)
		}
	}
	if Carried(map[string]string{keys.Approved: "true"}) || Carried(nil) {
		t.Error("no grant key is carried")
	}
}

// TestEqual: Equal compares values (an empty key present or absent reads the same), and every
// field counts.
func TestEqual(t *testing.T) {
	g := Grant{Allowed: true, Run: "r1", By: keys.GrantedByRollout, Revision: "abc", PlanOnly: true, Plan: "d1"}
	if !g.Equal(Parse(g.Annotations())) {
		t.Fatal("a grant differs from what it writes")
	}
	if !(Grant{}).Equal(Parse(map[string]string{keys.GrantedRevision: "", keys.GrantedPlan: ""})) {
		t.Error("empty keys differ from absent ones")
	}
	for _, change := range []func(*Grant){
		func(g *Grant) { g.Allowed = false },
		func(g *Grant) { g.Run = "r2" },
		func(g *Grant) { g.By = keys.GrantedByProject },
		func(g *Grant) { g.Revision = "def" },
		func(g *Grant) { g.PlanOnly = false },
		func(g *Grant) { g.Plan = "d2" },
	} {
		h := g
		change(&h)
		if g.Equal(h) {
			t.Errorf("%+v equals %+v", g, h)
		}
	}
}

// TestConsumeUnfenced: consuming an unfenced grant removes execution-allowed while it is "true",
// and nothing else.
func TestConsumeUnfenced(t *testing.T) {
	remove := map[string]string{keys.Approved: "true"}
	ConsumeUnfenced(remove)
	if want := map[string]string{keys.Approved: "true", keys.ExecutionAllowed: "true"}; !maps.Equal(remove, want) {
		t.Fatalf("remove %v, want %v", remove, want)
	}
}
