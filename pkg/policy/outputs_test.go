package policy_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/magosfleet/magos/pkg/policy"
)

// TestEvaluateOutputs evaluates verification expressions over outputs: numbers, strings, maps
// and lists read as their JSON values; a missing output and a non-bool result are errors, never
// a pass; an expression that does not compile is refused up front.
func TestEvaluateOutputs(t *testing.T) {
	outputs := map[string]json.RawMessage{
		"replicas": json.RawMessage(`3`),
		"endpoint": json.RawMessage(`"https://eu.example.com"`),
		"ratio":    json.RawMessage(`0.5`),
		"zones":    json.RawMessage(`["a","b"]`),
		"tags":     json.RawMessage(`{"team":"edge"}`),
		"healthy":  json.RawMessage(`true`),
	}
	for _, tc := range []struct {
		expr    string
		want    bool
		wantErr string
	}{
		{expr: "outputs.replicas >= 3", want: true},
		{expr: "outputs.replicas > 3", want: false},
		{expr: `outputs.endpoint.startsWith("https://")`, want: true},
		{expr: "outputs.ratio < 1", want: true},
		{expr: "size(outputs.zones) == 2 && outputs.tags.team == 'edge'", want: true},
		{expr: "outputs.healthy", want: true},
		{expr: "has(outputs.missing)", want: false},
		{expr: "outputs.missing == 1", wantErr: "no such key"},
		{expr: "outputs.replicas", wantErr: "want a bool"},
		{expr: "outputs.replicas +", wantErr: "compiling"},
		{expr: "'yes'", wantErr: "want bool"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := policy.EvaluateOutputs(context.Background(), tc.expr, outputs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("EvaluateOutputs = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("EvaluateOutputs = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if err := policy.CheckOutputsExpression("outputs.x == "); err == nil {
		t.Fatal("CheckOutputsExpression accepted an expression that does not compile")
	}
	if err := policy.CheckOutputsExpression("objects.x == 1"); err == nil {
		t.Fatal("CheckOutputsExpression accepted an undeclared variable")
	}
}
