package runner_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/magosfleet/magos/pkg/runner"
)

// outputsSecret is the value of outputsModule's sensitive output: it must show nowhere.
const outputsSecret = "hunter2-sensitive-8d1c"

// outputsModule has outputs of every kind of value, one of them sensitive, and needs no
// provider download.
const outputsModule = `
locals {
  secret = "` + outputsSecret + `"
}

resource "terraform_data" "this" {
  input = "web"
}

output "name" {
  value = terraform_data.this.output
}

output "replicas" {
  value = 3
}

output "ratio" {
  value = 0.25
}

output "enabled" {
  value = true
}

output "zones" {
  value = ["a", "b"]
}

output "tags" {
  value = { team = "a", tier = "web" }
}

output "password" {
  value     = local.secret
  sensitive = true
}
`

// TestRunApplyOutputs: a successful apply reports exactly the module's non-sensitive outputs,
// as JSON; the sensitive one shows neither in the Result nor in the run's log, and the log
// does not carry the JSON of the outputs. A plan and a destroy report no outputs.
func TestRunApplyOutputs(t *testing.T) {
	f := newFixture(t, map[string]string{"main.tf": outputsModule})
	spec := f.spec(runner.OperationPlan)
	plan := f.run(t, spec, runner.OutcomeSucceeded)
	if plan.Outputs != nil || plan.OutputsDropped {
		t.Errorf("plan outputs = %v (dropped %v); want none", plan.Outputs, plan.OutputsDropped)
	}

	spec.Operation = runner.OperationApply
	apply := f.run(t, spec, runner.OutcomeSucceeded)
	want := map[string]string{
		"name":     `"web"`,
		"replicas": `3`,
		"ratio":    `0.25`,
		"enabled":  `true`,
		"zones":    `["a","b"]`,
		"tags":     `{"team":"a","tier":"web"}`,
	}
	got := map[string]string{}
	for k, v := range apply.Outputs {
		got[k] = string(v)
	}
	if !maps.Equal(got, want) || apply.OutputsDropped || apply.Message != "Apply complete." {
		t.Fatalf("apply = outputs %v, dropped %v, message %q; want outputs %v, kept, \"Apply complete.\"", got, apply.OutputsDropped, apply.Message, want)
	}
	encoded, err := apply.Encode()
	if err != nil {
		t.Fatalf("encoding the apply's result: %v", err)
	}
	decoded, err := runner.DecodeResult(encoded)
	if err != nil || len(decoded.Outputs) != len(want) || string(decoded.Outputs["tags"]) != want["tags"] {
		t.Fatalf("the result does not survive encoding (%v):\n%s", err, encoded)
	}
	raw, _ := json.Marshal(apply)
	for where, s := range map[string]string{"result": string(raw), "encoded result": string(encoded), "log": f.out.String()} {
		if strings.Contains(s, outputsSecret) || (where != "log" && strings.Contains(s, "password")) {
			t.Errorf("the %s carries the sensitive output:\n%s", where, s)
		}
	}
	// `output -json` prints {"name": {"sensitive": false, "type": ..., "value": ...}}: none of
	// it may reach the log.
	if log := f.out.String(); strings.Contains(log, `"sensitive"`) || strings.Contains(log, `"type"`) {
		t.Errorf("the log carries the JSON of the outputs:\n%s", log)
	}

	spec.Operation = runner.OperationDestroy
	destroy := f.run(t, spec, runner.OutcomeSucceeded)
	if destroy.Outputs != nil || destroy.OutputsDropped {
		t.Errorf("destroy outputs = %v (dropped %v); want none", destroy.Outputs, destroy.OutputsDropped)
	}
}

// TestRunApplyOutputsUnreadable: when `output -json` fails after the apply, the apply still
// succeeded; the Result has no outputs and its message says they could not be read.
func TestRunApplyOutputsUnreadable(t *testing.T) {
	f := newFixture(t, map[string]string{"main.tf": outputsModule})
	// A tofu that fails `output` and runs everything else.
	wrapper := filepath.Join(t.TempDir(), "tofu")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = output ]; then echo 'Error: the state is on holiday' >&2; exit 1; fi\nexec %q \"$@\"\n", f.tofu)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := f.spec(runner.OperationPlan)
	spec.BinaryPath = wrapper
	f.run(t, spec, runner.OutcomeSucceeded)
	spec.Operation = runner.OperationApply
	res := f.run(t, spec, runner.OutcomeSucceeded)
	if res.Outputs != nil || res.OutputsDropped {
		t.Errorf("outputs = %v (dropped %v); want none", res.Outputs, res.OutputsDropped)
	}
	if want := "Apply complete. The outputs could not be read: tofu output failed: Error: the state is on holiday"; res.Message != want {
		t.Errorf("message = %q; want %q", res.Message, want)
	}
	if inputs, _ := stateOf(t, f.state); inputs["terraform_data.this"] != "web" {
		t.Errorf("state inputs = %v; want the apply's terraform_data.this = web", inputs)
	}
}

// TestResultEncodeOutputs: outputs that fit are kept; outputs that do not are left out before
// anything else is shortened, and the message says how big the result was with them.
func TestResultEncodeOutputs(t *testing.T) {
	big, _ := json.Marshal(strings.Repeat("x", runner.MaxResultBytes))
	small := json.RawMessage(`{"a":[1,2]}`)
	base := runner.Result{Operation: runner.OperationApply, RunID: "run-1", Outcome: runner.OutcomeSucceeded,
		Revision: strings.Repeat("a", 40), Message: "Apply complete."}
	sizeWith := func(r runner.Result) int {
		b, _ := json.Marshal(r)
		return len(b)
	}
	tests := []struct {
		name        string
		change      func(*runner.Result)
		wantOutputs []string
		dropped     bool
		message     string // "" for the result's own, else a prefix
	}{
		{name: "outputs that fit are kept", change: func(r *runner.Result) {
			r.Outputs = map[string]json.RawMessage{"small": small, "n": json.RawMessage(`3`)}
		}, wantOutputs: []string{"small", "n"}},
		{name: "outputs too big are left out", change: func(r *runner.Result) {
			r.Outputs = map[string]json.RawMessage{"small": small, "big": big}
		}, dropped: true, message: "Apply complete. (outputs left out: %d bytes exceed the result's 4096 bytes)"},
		{name: "left out with no message", change: func(r *runner.Result) {
			r.Message = ""
			r.Outputs = map[string]json.RawMessage{"big": big}
		}, dropped: true, message: "outputs left out: %d bytes exceed the result's 4096 bytes"},
		{name: "a long message is still shortened after the outputs", change: func(r *runner.Result) {
			r.Message = strings.Repeat("m", runner.MaxResultBytes)
			r.Outputs = map[string]json.RawMessage{"small": small}
		}, dropped: true, message: strings.Repeat("m", 500) + " [truncated]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.change(&r)
			b, err := r.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if len(b) > runner.MaxResultBytes {
				t.Fatalf("encoded result of %d bytes; want at most %d", len(b), runner.MaxResultBytes)
			}
			got, err := runner.DecodeResult(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.OutputsDropped != tt.dropped || len(got.Outputs) != len(tt.wantOutputs) {
				t.Fatalf("decoded outputs %v, dropped %v; want %v, dropped %v", got.Outputs, got.OutputsDropped, tt.wantOutputs, tt.dropped)
			}
			for _, name := range tt.wantOutputs {
				if string(got.Outputs[name]) != string(r.Outputs[name]) {
					t.Errorf("output %s = %s; want %s", name, got.Outputs[name], r.Outputs[name])
				}
			}
			want := r.Message
			if tt.message != "" {
				want = tt.message
				if strings.Contains(want, "%d") {
					want = fmt.Sprintf(want, sizeWith(r))
				}
			}
			if got.Message != want {
				t.Errorf("message = %q; want %q", got.Message, want)
			}
			if got.Outcome != r.Outcome || got.Revision != r.Revision {
				t.Errorf("decoded %+v; want outcome and revision kept", got)
			}
		})
	}
}
