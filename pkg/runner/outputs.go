package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// readOutputs runs `<binary> output -json` in the module's folder after a successful apply and
// returns the module's non-sensitive outputs (parseOutputs). The tool's stdout is captured,
// never written to the run's log: it holds every output's value, the sensitive ones included.
func (r *run) readOutputs(ctx context.Context, t *tool) (map[string]json.RawMessage, error) {
	out, err := t.output(ctx, "output", "-json", "-no-color")
	if err != nil {
		return nil, err
	}
	outputs, err := parseOutputs(out)
	if err != nil {
		return nil, fmt.Errorf("%s output -json: %w", t.name, err)
	}
	return outputs, nil
}

// parseOutputs reads what `output -json` prints, a JSON object of outputs by name, each
// {"sensitive": bool, "type": ..., "value": ...}, and returns the value (compact JSON) of each
// output that is not sensitive. Sensitive outputs are left out altogether. An error never
// quotes the input: it may hold sensitive values.
func parseOutputs(b []byte) (map[string]json.RawMessage, error) {
	var all map[string]struct {
		Sensitive *bool           `json:"sensitive"`
		Value     json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &all); err != nil || all == nil {
		return nil, fmt.Errorf("did not print a JSON object of outputs")
	}
	outputs := make(map[string]json.RawMessage, len(all))
	for name, o := range all {
		if o.Sensitive == nil {
			// Not saying whether it is sensitive: treat it as sensitive.
			continue
		}
		if *o.Sensitive {
			continue
		}
		var v bytes.Buffer
		if len(o.Value) == 0 {
			v.WriteString("null")
		} else if err := json.Compact(&v, o.Value); err != nil {
			return nil, fmt.Errorf("the value of output %q is not JSON", name)
		}
		outputs[name] = v.Bytes()
	}
	return outputs, nil
}
