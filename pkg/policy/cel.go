package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Default budgets of one expression. The cost limit is the budget the Kubernetes API server
// gives a whole ValidatingAdmissionPolicy call; a plan of ten thousand resource changes scanned a
// few times by comprehensions costs well under a tenth of it.
const (
	// DefaultCostLimit is the most CEL cost units one expression may spend.
	DefaultCostLimit uint64 = 10_000_000
	// DefaultExpressionTimeout is the most wall time one expression may take.
	DefaultExpressionTimeout = 5 * time.Second
)

// Options are the budgets of a Set; zero fields take the defaults.
type Options struct {
	// CostLimit is the most CEL cost units one expression may spend (DefaultCostLimit).
	CostLimit uint64
	// ExpressionTimeout is the most wall time one expression may take
	// (DefaultExpressionTimeout).
	ExpressionTimeout time.Duration
}

// Names the expressions see.
const (
	objectVar    = "object"
	variablesVar = "variables"
)

var (
	envOnce sync.Once
	baseEnv *cel.Env
	envErr  error
)

// env is the CEL environment of every expression: the standard library, Kubernetes' CEL
// extensions that cel-go ships (strings, lists, sets, math, encoders, bind, optionals, two-
// variable comprehensions), `object` (the plan JSON) and `variables`.
func env() (*cel.Env, error) {
	envOnce.Do(func() {
		baseEnv, envErr = cel.NewEnv(
			cel.Variable(objectVar, cel.DynType),
			cel.Variable(variablesVar, cel.MapType(cel.StringType, cel.DynType)),
			cel.CrossTypeNumericComparisons(true),
			cel.OptionalTypes(),
			cel.DefaultUTCTimeZone(true),
			ext.Strings(),
			ext.Lists(),
			ext.Sets(),
			ext.Math(),
			ext.Encoders(),
			ext.Bindings(),
			ext.TwoVarComprehensions(),
		)
	})
	return baseEnv, envErr
}

// Set is a compiled set of policies, ready to evaluate plans. It is safe for concurrent use.
type Set struct {
	policies []compiledPolicy
	timeout  time.Duration
}

type compiledPolicy struct {
	name string
	// err, when set, makes the whole policy one violation (it could not be compiled or read).
	err             error
	variables       []namedProgram
	matchConditions []namedProgram
	validations     []compiledValidation
}

type namedProgram struct {
	name string
	prg  cel.Program
}

type compiledValidation struct {
	expression string
	message    string
	prg        cel.Program
	messagePrg cel.Program
}

// Compile compiles policies with the default budgets. It never fails: a policy that does not
// compile is kept, and every evaluation reports it as a violation saying why (fail closed).
func Compile(policies []Policy) *Set {
	return CompileWithOptions(policies, Options{})
}

// CompileWithOptions is Compile with other budgets.
func CompileWithOptions(policies []Policy, opts Options) *Set {
	if opts.CostLimit == 0 {
		opts.CostLimit = DefaultCostLimit
	}
	if opts.ExpressionTimeout <= 0 {
		opts.ExpressionTimeout = DefaultExpressionTimeout
	}
	s := &Set{policies: make([]compiledPolicy, 0, len(policies)), timeout: opts.ExpressionTimeout}
	for _, p := range policies {
		s.policies = append(s.policies, compilePolicy(p, opts.CostLimit))
	}
	return s
}

func compilePolicy(p Policy, costLimit uint64) compiledPolicy {
	c := compiledPolicy{name: p.Name}
	if p.Error != "" {
		c.err = errors.New(p.Error)
		return c
	}
	if len(p.Validations) == 0 {
		c.err = errors.New("it has no validations")
		return c
	}
	e, err := env()
	if err != nil {
		c.err = fmt.Errorf("creating the CEL environment: %w", err)
		return c
	}
	for _, v := range p.Variables {
		prg, err := compile(e, v.Expression, nil, costLimit)
		if err != nil {
			c.err = fmt.Errorf("variable %q: %w", v.Name, err)
			return c
		}
		c.variables = append(c.variables, namedProgram{name: v.Name, prg: prg})
	}
	for i, m := range p.MatchConditions {
		prg, err := compile(e, m.Expression, cel.BoolType, costLimit)
		if err != nil {
			c.err = fmt.Errorf("match condition %s: %w", nameOr(m.Name, i), err)
			return c
		}
		c.matchConditions = append(c.matchConditions, namedProgram{name: nameOr(m.Name, i), prg: prg})
	}
	for i, v := range p.Validations {
		prg, err := compile(e, v.Expression, cel.BoolType, costLimit)
		if err != nil {
			c.err = fmt.Errorf("validation %d (%q): %w", i, v.Expression, err)
			return c
		}
		cv := compiledValidation{expression: v.Expression, message: v.Message, prg: prg}
		if v.MessageExpression != "" {
			if cv.messagePrg, err = compile(e, v.MessageExpression, cel.StringType, costLimit); err != nil {
				c.err = fmt.Errorf("validation %d: messageExpression %q: %w", i, v.MessageExpression, err)
				return c
			}
		}
		c.validations = append(c.validations, cv)
	}
	return c
}

func nameOr(name string, i int) string {
	if name != "" {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%d", i)
}

// compile compiles one expression; want, when set, is the type it must return (dyn passes and
// is checked at run time).
func compile(e *cel.Env, expression string, want *cel.Type, costLimit uint64) (cel.Program, error) {
	ast, iss := e.Compile(expression)
	if iss.Err() != nil {
		return nil, fmt.Errorf("compiling: %w", iss.Err())
	}
	if want != nil && !ast.OutputType().IsExactType(cel.DynType) && !ast.OutputType().IsExactType(want) {
		return nil, fmt.Errorf("returns %s: want %s", ast.OutputType(), want)
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(1))
	if err != nil {
		return nil, fmt.Errorf("building the program: %w", err)
	}
	return prg, nil
}

// Evaluate checks a plan (the JSON of `tofu show -json`) against every policy and returns the
// violations, in policy order: one per false validation, with its message (or "failed
// expression: <expression>"), and one per policy that could not be evaluated, saying why. No
// violations means the plan passes.
func (s *Set) Evaluate(ctx context.Context, planJSON []byte) []Violation {
	var violations []Violation
	object, err := decodeJSON(planJSON)
	if err != nil {
		for _, p := range s.policies {
			violations = append(violations, unevaluable(p.name, fmt.Errorf("reading the plan JSON: %w", err)))
		}
		return violations
	}
	for _, p := range s.policies {
		violations = append(violations, p.evaluate(ctx, s.timeout, object)...)
	}
	log.FromContext(ctx).V(1).Info("Evaluated plan policies", "policies", len(s.policies), "violations", len(violations))
	return violations
}

func unevaluable(policy string, err error) Violation {
	return Violation{Policy: policy, Message: fmt.Sprintf("policy could not be evaluated: %v", err)}
}

func (p compiledPolicy) evaluate(ctx context.Context, timeout time.Duration, object ref.Val) []Violation {
	r := budget{timeout: timeout}
	if p.err != nil {
		return []Violation{unevaluable(p.name, p.err)}
	}
	vars := make(map[string]any, len(p.variables))
	activation := map[string]any{objectVar: object, variablesVar: vars}
	for _, v := range p.variables {
		val, err := r.run(ctx, v.prg, activation)
		if err != nil {
			return []Violation{unevaluable(p.name, fmt.Errorf("variable %q: %w", v.name, err))}
		}
		vars[v.name] = val
	}
	for _, m := range p.matchConditions {
		ok, err := r.runBool(ctx, m.prg, activation)
		if err != nil {
			return []Violation{unevaluable(p.name, fmt.Errorf("match condition %s: %w", m.name, err))}
		}
		if !ok {
			return nil
		}
	}
	var violations []Violation
	for _, v := range p.validations {
		ok, err := r.runBool(ctx, v.prg, activation)
		switch {
		case err != nil:
			violations = append(violations, unevaluable(p.name, fmt.Errorf("expression %q: %w", v.expression, err)))
		case !ok:
			violations = append(violations, Violation{Policy: p.name, Message: v.failureMessage(ctx, r, activation)})
		}
	}
	return violations
}

// failureMessage is messageExpression's result when it gives a non-empty string, else message,
// else "failed expression: <expression>" (Kubernetes' wording).
func (v compiledValidation) failureMessage(ctx context.Context, r budget, activation map[string]any) string {
	if v.messagePrg != nil {
		if val, err := r.run(ctx, v.messagePrg, activation); err == nil {
			if s, ok := val.Value().(string); ok && s != "" {
				return s
			}
		}
	}
	if v.message != "" {
		return v.message
	}
	return "failed expression: " + v.expression
}

// budget runs programs within a time limit each.
type budget struct {
	timeout time.Duration
}

func (r budget) run(ctx context.Context, prg cel.Program, activation map[string]any) (ref.Val, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	val, _, err := prg.ContextEval(ctx, activation)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("evaluation stopped after %s: %w", r.timeout, err)
		}
		return nil, err
	}
	return val, nil
}

func (r budget) runBool(ctx context.Context, prg cel.Program, activation map[string]any) (bool, error) {
	val, err := r.run(ctx, prg, activation)
	if err != nil {
		return false, err
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, fmt.Errorf("returned %s, want a bool", val.Type().TypeName())
	}
	return bool(b), nil
}

// decodeJSON parses JSON into CEL values, integers as int (as Kubernetes does) and other numbers
// as double. It converts the whole document once, so expressions do not convert values again at
// every access.
func decodeJSON(raw []byte) (ref.Val, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON document")
	}
	return toCEL(v), nil
}

func toCEL(v any) ref.Val {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[ref.Val]ref.Val, len(x))
		for k, e := range x {
			m[types.String(k)] = toCEL(e)
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, m)
	case []any:
		l := make([]ref.Val, len(x))
		for i, e := range x {
			l[i] = toCEL(e)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, l)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return types.Int(i)
		}
		f, _ := x.Float64()
		return types.Double(f)
	case string:
		return types.String(x)
	case bool:
		return types.Bool(x)
	default:
		return types.NullValue
	}
}
