package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// declaredPhases returns the values of the constants of type Phase declared in the package's
// source, and the values of the Phase type's kubebuilder Enum marker.
func declaredPhases(t *testing.T) (consts, enum []string) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	enumMarker := regexp.MustCompile(`\+kubebuilder:validation:Enum=(\S+)`)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.Name == "Phase" && gd.Doc != nil {
						if m := enumMarker.FindStringSubmatch(gd.Doc.Text()); m != nil {
							enum = strings.Split(m[1], ";")
						}
					}
				case *ast.ValueSpec:
					if id, ok := s.Type.(*ast.Ident); !ok || id.Name != "Phase" || gd.Tok != token.CONST {
						continue
					}
					for _, v := range s.Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Fatalf("%s: a Phase constant that is no string literal", fset.Position(v.Pos()))
						}
						val, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						consts = append(consts, val)
					}
				}
			}
		}
	}
	if len(consts) == 0 || len(enum) == 0 {
		t.Fatalf("found %d Phase constants and %d Enum values: the test no longer finds them", len(consts), len(enum))
	}
	return consts, enum
}

// TestEveryPhaseHasARow fails for a phase constant (or a value of the CRD's enum) without a
// row in the table, and for a row of no phase.
func TestEveryPhaseHasARow(t *testing.T) {
	consts, enum := declaredPhases(t)
	for _, p := range consts {
		if _, ok := phaseInfos[Phase(p)]; !ok {
			t.Errorf("phase constant %q has no row in phaseInfos", p)
		}
	}
	for _, p := range enum {
		if _, ok := phaseInfos[Phase(p)]; !ok {
			t.Errorf("phase %q of the Enum marker has no row in phaseInfos", p)
		}
	}
	for p := range phaseInfos {
		if !slices.Contains(consts, string(p)) {
			t.Errorf("phaseInfos has a row for %q, no phase constant", p)
		}
	}
	for k := range reasonInfos {
		if _, ok := phaseInfos[k.phase]; !ok {
			t.Errorf("reasonInfos refines %q, no phase of phaseInfos", k.phase)
		}
	}
	for p := range wantInfos {
		if !slices.Contains(consts, string(p)) {
			t.Errorf("wantInfos has a row for %q, no phase constant", p)
		}
	}
	for _, p := range consts {
		if _, ok := wantInfos[Phase(p)]; !ok {
			t.Errorf("phase constant %q has no row in this test's wantInfos", p)
		}
	}
}

// Column letters of wantInfos: R Running, I InFlight, S Settled, E Ended, D Succeeded (done), X RunFailed,
// F Failed, G AwaitsGrant, P Progressing, L Deleting (leaving the cluster), V Leaving; then Ready.
type want struct {
	flags string
	ready metav1.ConditionStatus
}

func (w want) info() PhaseInfo {
	has := func(c string) bool { return strings.Contains(w.flags, c) }
	return PhaseInfo{
		Running: has("R"), InFlight: has("I"), Settled: has("S"), Ended: has("E"), Succeeded: has("D"), RunFailed: has("X"),
		Failed: has("F"), AwaitsGrant: has("G"), Progressing: has("P"), Deleting: has("L"), Leaving: has("V"),
		Ready: w.ready,
	}
}

const (
	tru = metav1.ConditionTrue
	fal = metav1.ConditionFalse
	unk = metav1.ConditionUnknown
)

// wantInfos is the table as the code that compared phases before it had it decided, one row
// per phase constant: the agent (Running, Settled, RunFailed, the Workspace's Ready condition),
// the decision (InFlight, Failed, Grantable, DestroyPending, Leaving) and the hub (the Rollout's
// and Project's Ready condition, an active Rollout: Reconciling). The one row on which the old Ready mappings differed is
// Deleting: the agent's False, kept (the hub's Unknown only ever showed on a Project for the
// moment between its Deleting status and its finalizer's removal).
var wantInfos = map[Phase]want{
	PhasePending:          {"G", unk},
	PhaseReconciling:      {"P", unk},
	PhaseReady:            {"", tru},
	PhaseIdle:             {"", unk},
	PhasePlanning:         {"RI", unk},
	PhasePlanned:          {"IS", tru},
	PhaseApplying:         {"RI", unk},
	PhaseVerifying:        {"RI", unk}, // added with verification: a run's checks, in flight
	PhaseApplied:          {"SED", tru},
	PhaseFailed:           {"SEXF", fal},
	PhaseValidationFailed: {"SEXF", fal},
	PhaseDeleting:         {"LV", fal},
}

func TestPhaseInfo(t *testing.T) {
	for p, w := range wantInfos {
		if got := p.Info(); got != w.info() {
			t.Errorf("%s: got %+v, want %+v", p, got, w.info())
		}
		if got := InfoOf(p, "SomeReason"); got != w.info() {
			t.Errorf("%s/SomeReason: got %+v, want %+v (the phase's row)", p, got, w.info())
		}
		if p.Running() != w.info().Running || p.InFlight() != w.info().InFlight ||
			p.RunFailed() != w.info().RunFailed || p.Settled() != w.info().Settled {
			t.Errorf("%s: the Phase methods disagree with its row", p)
		}
	}
	for _, tc := range []struct {
		phase  Phase
		reason string
		want   want
	}{
		{PhaseDeleting, ReasonDeleting, want{"LV", fal}},
		{PhaseDeleting, ReasonDestroying, want{"LV", fal}},
		{PhaseDeleting, ReasonDestroyPending, want{"LG", fal}},
		{PhaseDeleting, ReasonDestroyFailed, want{"LF", fal}},
		{PhaseDeleting, "", want{"LV", fal}},
		{PhaseFailed, ReasonDestroyFailed, want{"SEXF", fal}},
		{PhasePending, ReasonDestroyPending, want{"G", unk}},
		{"", "", want{"", unk}},
		{"NoSuchPhase", ReasonDestroyFailed, want{"", unk}},
	} {
		if got := InfoOf(tc.phase, tc.reason); got != tc.want.info() {
			t.Errorf("%q/%q: got %+v, want %+v", tc.phase, tc.reason, got, tc.want.info())
		}
	}
}

func TestReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		phase  Phase
		reason string
		want   metav1.ConditionStatus
	}{
		{PhaseApplied, ReasonApplySucceeded, tru},
		{PhasePlanned, ReasonPlanSucceeded, tru},
		{PhaseReady, ReasonNoSteps, tru},
		{PhaseFailed, ReasonStepFailed, fal},
		{PhaseValidationFailed, ReasonPolicyViolation, fal},
		{PhaseDeleting, ReasonDestroying, fal},
		{PhaseDeleting, ReasonDestroyFailed, fal},
		{PhasePending, ReasonAwaitingRollout, unk},
		{PhaseReconciling, ReasonLevelProgressing, unk},
		{PhasePlanning, ReasonPlanJobCreated, unk},
		{PhaseApplying, ReasonApplyJobCreated, unk},
		{PhaseFailed, ReasonVerificationFailed, fal},
		{"", "", unk},
	} {
		c := ReadyCondition(tc.phase, tc.reason, "m", 7)
		wantReason := tc.reason
		if wantReason == "" {
			wantReason = string(tc.want)
		}
		if c.Type != ConditionReady || c.Status != tc.want || c.Reason != wantReason || c.Message != "m" || c.ObservedGeneration != 7 {
			t.Errorf("%q/%q: got %+v, want status %s reason %s", tc.phase, tc.reason, c, tc.want, wantReason)
		}
	}
}

// BenchmarkInfoOf measures the phase table's lookup, which the hub's decision makes several
// times per Workspace: a phase with the reason a Workspace carries, and a refined Deleting one.
func BenchmarkInfoOf(b *testing.B) {
	for _, tc := range []struct {
		phase  Phase
		reason string
	}{{PhaseApplied, ReasonApplySucceeded}, {PhaseDeleting, ReasonDestroyPending}} {
		b.Run(string(tc.phase), func(b *testing.B) {
			for b.Loop() {
				_ = InfoOf(tc.phase, tc.reason)
			}
		})
	}
}
