package policy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Group and Kind of Kyverno's ValidatingPolicy.
const (
	Group = "policies.kyverno.io"
	Kind  = "ValidatingPolicy"
)

// ModeJSON is the evaluation mode of policies over JSON payloads such as plans.
const ModeJSON = "JSON"

// FromValidatingPolicy reads a Kyverno ValidatingPolicy (policies.kyverno.io/v1; v1alpha1 and
// v1beta1 have the same shape) in JSON evaluation mode: spec.validations[] (expression, message,
// messageExpression), spec.variables[] (name, expression) and spec.matchConditions[] (name,
// expression). A policy without spec.evaluation.mode is taken as JSON mode, as upstream Magos
// did; any other mode is an error, as is a policy without validations. Fields that only matter
// to admission (matchConstraints, validationActions, auditAnnotations, ...) are ignored.
//
// A caller that cannot read a selected policy should still fail the plan (fail closed), for
// example by passing Policy{Name: name, Error: err.Error()} to the runner.
func FromValidatingPolicy(u *unstructured.Unstructured) (Policy, error) {
	gvk := u.GroupVersionKind()
	if gvk.Group != Group || gvk.Kind != Kind {
		return Policy{}, fmt.Errorf("reading %s %q: want a %s/%s", gvk.Kind, u.GetName(), Group, Kind)
	}
	name := u.GetName()
	mode, _, err := unstructured.NestedString(u.Object, "spec", "evaluation", "mode")
	if err != nil {
		return Policy{}, fmt.Errorf("reading policy %s: spec.evaluation.mode: %w", name, err)
	}
	if mode != "" && mode != ModeJSON {
		return Policy{}, fmt.Errorf("reading policy %s: evaluation mode %q cannot check plans: want %q", name, mode, ModeJSON)
	}
	p := Policy{Name: name}
	if err := eachItem(u, "variables", func(i int, item map[string]any) error {
		v := Variable{Name: str(item, "name"), Expression: str(item, "expression")}
		if v.Name == "" || v.Expression == "" {
			return fmt.Errorf("spec.variables[%d]: want a name and an expression", i)
		}
		p.Variables = append(p.Variables, v)
		return nil
	}); err != nil {
		return Policy{}, fmt.Errorf("reading policy %s: %w", name, err)
	}
	if err := eachItem(u, "matchConditions", func(i int, item map[string]any) error {
		c := MatchCondition{Name: str(item, "name"), Expression: str(item, "expression")}
		if c.Expression == "" {
			return fmt.Errorf("spec.matchConditions[%d]: want an expression", i)
		}
		p.MatchConditions = append(p.MatchConditions, c)
		return nil
	}); err != nil {
		return Policy{}, fmt.Errorf("reading policy %s: %w", name, err)
	}
	if err := eachItem(u, "validations", func(i int, item map[string]any) error {
		v := Validation{Expression: str(item, "expression"), Message: str(item, "message"), MessageExpression: str(item, "messageExpression")}
		if v.Expression == "" {
			return fmt.Errorf("spec.validations[%d]: want an expression", i)
		}
		p.Validations = append(p.Validations, v)
		return nil
	}); err != nil {
		return Policy{}, fmt.Errorf("reading policy %s: %w", name, err)
	}
	if len(p.Validations) == 0 {
		return Policy{}, fmt.Errorf("reading policy %s: spec.validations is empty: want at least one validation", name)
	}
	return p, nil
}

func eachItem(u *unstructured.Unstructured, field string, fn func(int, map[string]any) error) error {
	items, _, err := unstructured.NestedSlice(u.Object, "spec", field)
	if err != nil {
		return fmt.Errorf("spec.%s: %w", field, err)
	}
	for i, raw := range items {
		item, ok := raw.(map[string]any)
		if !ok {
			return fmt.Errorf("spec.%s[%d]: want an object, got %T", field, i, raw)
		}
		if err := fn(i, item); err != nil {
			return err
		}
	}
	return nil
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}
