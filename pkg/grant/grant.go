// Package grant is the hub-agent contract on a run: the grant a hub writes on a Workspace (its
// mirror, or the spoke Workspace itself), and what that grant allows. The hub decides and
// writes grants, and the agent obeys them, through this package only, so the two read a grant
// the same way.
//
// A grant is a set of annotations (keys.ExecutionAllowed and the keys.Granted* keys). A grant
// the hub writes is fenced: it names the run it allows (keys.GrantedRun), and allows no other.
// A grant without keys.GrantedRun (execution-allowed=true alone) is unfenced: upstream
// single-cluster Magos's grant, which a person or upstream tooling writes. Only a standalone
// agent honours an unfenced grant; what each caller does with one is its own decision, made
// explicit by calling Unfenced.
package grant

import (
	"encoding/json"
	"fmt"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// Keys are the annotations of a grant, which only the hub's controllers write. A revocation
// removes them all.
var Keys = []string{keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy, keys.GrantedRevision, keys.GrantedOperation, keys.GrantedPlan, keys.GrantedVerification}

// Grant is the grant a Workspace carries, as its annotations say. The zero Grant is no grant.
type Grant struct {
	// Allowed is true when magosproject.io/execution-allowed is "true".
	Allowed bool
	// Run is magosproject.io/granted-run: the run the grant allows.
	Run string
	// By is magosproject.io/granted-by.
	By string
	// Revision is magosproject.io/granted-revision: the commit the grant allows.
	Revision string
	// PlanOnly is true when magosproject.io/granted-operation is "plan": the run may plan, and
	// its plan waits for an approval.
	PlanOnly bool
	// Plan is magosproject.io/granted-plan: the plan digest an apply grant is bound to.
	Plan string
	// Verification is magosproject.io/granted-verification: the verification (JSON, see
	// EncodeVerification) the agent runs after the apply this grant allows.
	Verification string

	// emptyRun, emptyRevision and emptyPlan record that granted-run, granted-revision or
	// granted-plan is present with an empty value (Parse sets them): a present key means
	// something its absence does not (Fenced, RevisionFor, BoundPlan). A non-empty value is
	// present by definition, so a Grant written as a literal says the same as its annotations.
	emptyRun, emptyRevision, emptyPlan bool
}

// Parse reads the grant in a Workspace's annotations.
func Parse(annotations map[string]string) Grant {
	g := Grant{
		Allowed:  annotations[keys.ExecutionAllowed] == "true",
		Run:      annotations[keys.GrantedRun],
		By:       annotations[keys.GrantedBy],
		Revision: annotations[keys.GrantedRevision],
		PlanOnly: annotations[keys.GrantedOperation] == keys.GrantedOperationPlan,
		Plan:     annotations[keys.GrantedPlan],

		Verification: annotations[keys.GrantedVerification],
	}
	g.emptyRun = presentEmpty(annotations, keys.GrantedRun)
	g.emptyRevision = presentEmpty(annotations, keys.GrantedRevision)
	g.emptyPlan = presentEmpty(annotations, keys.GrantedPlan)
	return g
}

// Of reads the grant a Workspace carries.
func Of(ws *magosv1.Workspace) Grant { return Parse(ws.GetAnnotations()) }

func presentEmpty(annotations map[string]string, key string) bool {
	v, ok := annotations[key]
	return ok && v == ""
}

// Carried reports whether the annotations hold any of the grant's keys, whatever their values:
// whether a revocation would change them.
func Carried(annotations map[string]string) bool {
	for _, k := range Keys {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// ConsumeUnfenced adds to remove, the annotations to remove each with the value it must still
// have, what consumes an unfenced grant once its run used it: execution-allowed, while it is
// "true". A standalone agent honours an unfenced grant once (Unfenced).
func ConsumeUnfenced(remove map[string]string) { remove[keys.ExecutionAllowed] = "true" }

// Annotations are the annotations that write the grant g; every other key of Keys is to be
// removed (Patch). An allowed grant is written fenced: execution-allowed, granted-run and
// granted-by always (granted-run even when empty, so that the written grant never reads as
// unfenced), granted-revision, granted-operation and granted-plan when they say something. A
// grant that is not allowed writes nothing: it is a revocation.
func (g Grant) Annotations() map[string]string {
	if !g.Allowed {
		return map[string]string{}
	}
	a := map[string]string{keys.ExecutionAllowed: "true", keys.GrantedRun: g.Run, keys.GrantedBy: g.By}
	if g.Revision != "" {
		a[keys.GrantedRevision] = g.Revision
	}
	if g.PlanOnly {
		a[keys.GrantedOperation] = keys.GrantedOperationPlan
	}
	if g.Plan != "" {
		a[keys.GrantedPlan] = g.Plan
	}
	if g.Verification != "" {
		a[keys.GrantedVerification] = g.Verification
	}
	return a
}

// Patch is the annotations of a JSON merge patch that makes a Workspace carry exactly the grant
// g: its Annotations, and null (remove) for every other key of Keys. The Patch of the zero
// Grant is a revocation.
func (g Grant) Patch() map[string]any {
	patch := make(map[string]any, len(Keys))
	for _, k := range Keys {
		patch[k] = nil
	}
	for k, v := range g.Annotations() {
		patch[k] = v
	}
	return patch
}

// Equal reports whether g and h say the same in every value (Allowed, Run, By and SameTerms),
// whether or not an empty key is present: writing h on a Workspace that carries g changes
// nothing the hub or the agent reads by value.
func (g Grant) Equal(h Grant) bool {
	return g.Allowed == h.Allowed && g.Run == h.Run && g.By == h.By && g.SameTerms(h)
}

// SameTerms reports whether g and h allow the same operation of the same commit and plan, with
// the same verification: equal Revision, PlanOnly, Plan and Verification.
func (g Grant) SameTerms(h Grant) bool {
	return g.Revision == h.Revision && g.PlanOnly == h.PlanOnly && g.Plan == h.Plan && g.Verification == h.Verification
}

// Exists reports whether the grant says anything a revocation is due for: execution-allowed
// "true", or a granted-run naming a run.
func (g Grant) Exists() bool { return g.Allowed || g.Run != "" }

// Fenced reports whether granted-run is present (whatever its value): the grant allows the run
// it names and no other.
func (g Grant) Fenced() bool { return g.Run != "" || g.emptyRun }

// Unfenced reports an allowed grant without granted-run: upstream single-cluster Magos's grant,
// which names no run. AllowsRun never allows a run under it; a caller that honours one (a
// standalone agent) says so by calling Unfenced.
func (g Grant) Unfenced() bool { return g.Allowed && !g.Fenced() }

// AllowsRun reports whether the grant allows run: allowed, fenced to run, and run is not empty.
func (g Grant) AllowsRun(run string) bool { return g.Allowed && run != "" && g.Run == run }

// StaleFor reports whether the grant is fenced (granted-run present, even empty) but not to run:
// it names another run, or run is empty (no run is allowed without an ID). The agent ignores
// such a grant; a fenced grant that is not stale is one AllowsRun allows, if allowed.
func (g Grant) StaleFor(run string) bool { return g.Fenced() && (g.Run != run || run == "") }

// NamesOtherRun reports whether granted-run names a run (not empty) other than run: such a
// grant can start nothing more.
func (g Grant) NamesOtherRun(run string) bool { return g.Run != "" && g.Run != run }

// RevisionFor returns the granted-revision of a grant that allows run (AllowsRun), and whether
// the key is present on it (whatever its value: an empty one is present and names no commit).
// Other grants name no commit.
func (g Grant) RevisionFor(run string) (revision string, present bool) {
	if !g.AllowsRun(run) {
		return "", false
	}
	return g.Revision, g.Revision != "" || g.emptyRevision
}

// BoundPlan returns granted-plan and whether the key is present (an empty one is present, and
// binds the grant to no plan digest the agent computes).
func (g Grant) BoundPlan() (plan string, bound bool) { return g.Plan, g.Plan != "" || g.emptyPlan }

// OtherPlan reports whether the grant is bound to a plan (BoundPlan: granted-plan present,
// even empty) other than the plan of this digest. The hub (AllowsApply) and the agent (before
// it applies) both read it, so they agree on which plan a grant allows to apply.
func (g Grant) OtherPlan(digest string) bool {
	plan, bound := g.BoundPlan()
	return bound && plan != digest
}

// ApprovesPlan reports whether the grant names the plan of this digest (granted-plan not empty
// and equal to it).
func (g Grant) ApprovesPlan(digest string) bool { return g.Plan != "" && g.Plan == digest }

// AllowsPlan reports whether the grant allows run to plan: AllowsRun. A plan-only grant allows
// the plan and no apply.
func (g Grant) AllowsPlan(run string) bool { return g.AllowsRun(run) }

// AllowsApply reports whether the grant allows run to apply the plan of this digest: it
// allows the run, more than a plan, and is bound to no other plan (OtherPlan; a granted-plan
// present and empty binds it to no plan a run can have). The agent applies under exactly the
// same reading (its OtherPlan check before an apply).
func (g Grant) AllowsApply(run, digest string) bool {
	return g.AllowsRun(run) && !g.PlanOnly && !g.OtherPlan(digest)
}

// EncodeVerification is the value of granted-verification for a step's verification: its
// JSON, "" for none. The hub writes it and compares grants by it; the agent reads it back with
// DecodeVerification.
func EncodeVerification(v *magosv1.StepVerification) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "" // a struct of strings always marshals
	}
	return string(b)
}

// DecodeVerification reads granted-verification: nil for "".
func DecodeVerification(s string) (*magosv1.StepVerification, error) {
	if s == "" {
		return nil, nil
	}
	v := &magosv1.StepVerification{}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", keys.GrantedVerification, err)
	}
	if v.Expression == "" && v.Job == nil {
		return nil, fmt.Errorf("annotation %s: a verification needs an expression or a job", keys.GrantedVerification)
	}
	return v, nil
}
