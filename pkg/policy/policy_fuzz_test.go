package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/policy"
)

// Budgets of the fuzzed policies: small, so that each input runs fast, and the same mechanism
// as the defaults (policy.DefaultCostLimit, policy.DefaultExpressionTimeout).
const (
	fuzzCostLimit = 100_000
	fuzzTimeout   = 100 * time.Millisecond
	// fuzzDeadline bounds one Evaluate of the fuzzed policy: four expressions (a variable, a
	// match condition, a validation and its message) of fuzzTimeout each, with room for a
	// loaded machine.
	fuzzDeadline = 4*fuzzTimeout + 2*time.Second
)

// FuzzPolicy: policies and plans come from others (a policy author, a module author); no
// expression and no plan JSON may crash the runner or keep it past its budget. Whatever the
// expressions and the plan, Compile and Evaluate return, within the budget, at most one
// violation for the one validation, naming the policy.
func FuzzPolicy(f *testing.F) {
	f.Add(`object.resource_changes.size()`, `variables.n >= 0`, `'changes: ' + string(variables.n)`, []byte(plan))
	f.Add(`1`, `object.resource_changes.all(rc, !("delete" in rc.change.actions))`, ``, []byte(plan))
	f.Add(`object.x`, `variables.v == null`, `variables.v`, []byte(`{"x": [1, 2.5, "s", null, true, {"y": {}}]}`))
	f.Add(``, `(`, `)`, []byte(`not json`))
	f.Add(`[1,2,3].map(x, x * x)`, nestedLoops, `'late'`, []byte(`{}`))
	f.Add(`"a".repeat(1000000)`, `size(variables.v) > 0`, ``, []byte(`[]`))
	f.Add(`object`, `object.a.b.c == 1`, `string(object)`, []byte(`{"a": {"b": {"c": 1}}} trailing`))
	f.Add(`9223372036854775807 + 1`, `1 / 0 == 1`, `'x'`, []byte(`{"n": 1e400}`))
	f.Fuzz(func(t *testing.T, variable, validation, message string, planJSON []byte) {
		set := policy.CompileWithOptions([]policy.Policy{{
			Name:            "fuzz",
			Variables:       []policy.Variable{{Name: "v", Expression: variable}, {Name: "n", Expression: `1`}},
			MatchConditions: []policy.MatchCondition{{Name: "always", Expression: `variables.n == 1`}},
			Validations:     []policy.Validation{{Expression: validation, MessageExpression: message}},
		}}, policy.Options{CostLimit: fuzzCostLimit, ExpressionTimeout: fuzzTimeout})
		start := time.Now()
		violations := set.Evaluate(context.Background(), planJSON)
		if took := time.Since(start); took > fuzzDeadline {
			t.Errorf("Evaluate took %s, want at most %s", took, fuzzDeadline)
		}
		if len(violations) > 1 {
			t.Errorf("%d violations of one validation: %+v", len(violations), violations)
		}
		for _, v := range violations {
			if v.Policy != "fuzz" || v.Message == "" {
				t.Errorf("violation %+v does not name the policy and say why", v)
			}
		}
	})
}
