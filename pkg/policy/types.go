// Package policy evaluates plan policies: Kyverno ValidatingPolicy objects (policies.kyverno.io,
// JSON evaluation mode) whose CEL expressions run, in-process, over the plan JSON (`tofu show
// -json`), bound to the variable `object`. Evaluation fails closed: a policy that does not
// compile, errors, returns something other than a bool, or runs over its cost or time budget is
// a violation, never a pass.
//
// The types here are the runner protocol's (runner.Policy, runner.Validation, ... are aliases
// of them), so policies travel in the run spec as they are.
package policy

// Policy is one ValidatingPolicy, reduced to what the runner evaluates.
type Policy struct {
	// Name of the policy object.
	Name string `json:"name"`
	// Variables are named CEL expressions, evaluated in order before the validations; each may
	// use `object` and the variables before it, as `variables.<name>`.
	Variables []Variable `json:"variables,omitempty"`
	// MatchConditions must all be true for the policy to apply to the plan; when one is false
	// the policy is skipped (an error is a violation).
	MatchConditions []MatchCondition `json:"matchConditions,omitempty"`
	// Validations are CEL expressions over the plan JSON (the variable `object`); each must
	// be true.
	Validations []Validation `json:"validations"`
	// Error, when set, says why the policy object could not be read; such a policy is always
	// a violation with this reason (fail closed).
	Error string `json:"error,omitempty"`
}

// Variable is a named CEL expression (spec.variables[] of a ValidatingPolicy).
type Variable struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

// MatchCondition is a CEL expression that decides whether a policy applies
// (spec.matchConditions[] of a ValidatingPolicy).
type MatchCondition struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

// Validation is one CEL rule.
type Validation struct {
	Expression string `json:"expression"`
	Message    string `json:"message,omitempty"`
	// MessageExpression is a CEL expression returning the message of a violation; it wins over
	// Message when it evaluates to a non-empty string.
	MessageExpression string `json:"messageExpression,omitempty"`
}

// Violation is one failed policy rule.
type Violation struct {
	Policy  string `json:"policy"`
	Message string `json:"message"`
}
