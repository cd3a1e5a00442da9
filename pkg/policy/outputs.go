package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// outputsVar is the name a verification expression sees the outputs under.
const outputsVar = "outputs"

var (
	outputsOnce sync.Once
	outputsEnv  *cel.Env
	outputsErr  error
)

// outputsEnvironment is the CEL environment of a step's verification expression: the one of
// the policies (the same libraries) with `outputs` declared.
func outputsEnvironment() (*cel.Env, error) {
	outputsOnce.Do(func() {
		base, err := env()
		if err != nil {
			outputsErr = err
			return
		}
		outputsEnv, outputsErr = base.Extend(cel.Variable(outputsVar, cel.MapType(cel.StringType, cel.DynType)))
	})
	return outputsEnv, outputsErr
}

// CheckOutputsExpression compiles a verification expression (a Rollout step's
// verification.expression) and says why it cannot be used: it does not compile, or it returns
// something other than a bool. The hub calls it before it grants, the agent before it evaluates.
func CheckOutputsExpression(expression string) error {
	checkedMu.Lock()
	err, ok := checked[expression]
	checkedMu.Unlock()
	if ok {
		return err
	}
	_, err = compileOutputs(expression)
	checkedMu.Lock()
	if len(checked) >= maxChecked {
		clear(checked)
	}
	checked[expression] = err
	checkedMu.Unlock()
	return err
}

// checked remembers what CheckOutputsExpression found for the last expressions it compiled
// (the hub checks every step's expression at every decision), at most maxChecked of them.
var (
	checkedMu sync.Mutex
	checked   = map[string]error{}
)

const maxChecked = 1024

func compileOutputs(expression string) (cel.Program, error) {
	e, err := outputsEnvironment()
	if err != nil {
		return nil, err
	}
	return compile(e, expression, cel.BoolType, DefaultCostLimit)
}

// EvaluateOutputs evaluates a verification expression over an apply's outputs (their JSON
// values by name, as the runner reports them): whether it is true, or why it could not be
// evaluated (an output it names that does not exist is an error, so a check never passes on a
// missing output). Its budget is DefaultCostLimit and DefaultExpressionTimeout.
func EvaluateOutputs(ctx context.Context, expression string, outputs map[string]json.RawMessage) (bool, error) {
	prg, err := compileOutputs(expression)
	if err != nil {
		return false, err
	}
	m := make(map[ref.Val]ref.Val, len(outputs))
	for name, raw := range outputs {
		v, err := decodeJSON(raw)
		if err != nil {
			return false, fmt.Errorf("output %s: %w", name, err)
		}
		m[types.String(name)] = v
	}
	activation := map[string]any{outputsVar: types.NewRefValMap(types.DefaultTypeAdapter, m)}
	return budget{timeout: DefaultExpressionTimeout}.runBool(ctx, prg, activation)
}
