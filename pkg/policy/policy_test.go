package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/magosfleet/magos/pkg/policy"
)

// plan is a trimmed `tofu show -json` of a plan that creates one resource, deletes one and
// replaces one.
const plan = `{
  "format_version": "1.2",
  "terraform_version": "1.10.6",
  "variables": {"env": {"value": "prod"}},
  "resource_changes": [
    {"address": "terraform_data.new", "type": "terraform_data", "change": {"actions": ["create"], "after": {"input": "a"}}},
    {"address": "terraform_data.old", "type": "terraform_data", "change": {"actions": ["delete"], "before": {"input": "b"}}},
    {"address": "terraform_data.db", "type": "terraform_data", "change": {"actions": ["delete", "create"]}}
  ],
  "planned_values": {"outputs": {"replicas": {"value": 3}, "ratio": {"value": 0.5}}}
}`

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name   string
		policy policy.Policy
		plan   string
		want   []string // violation messages, in order; empty for a pass
	}{
		{
			name:   "pass",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `object.format_version == "1.2"`}}},
		},
		{
			name: "fail with message",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{
				{Expression: `object.variables.env.value == "dev"`, Message: "only dev plans"},
			}},
			want: []string{"only dev plans"},
		},
		{
			name:   "fail without message names the expression",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `size(object.resource_changes) < 2`}}},
			want:   []string{"failed expression: size(object.resource_changes) < 2"},
		},
		{
			name: "message expression wins over message",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{
				Expression:        `size(object.resource_changes) < 2`,
				Message:           "too many",
				MessageExpression: `"plan changes " + string(size(object.resource_changes)) + " resources"`,
			}}},
			want: []string{"plan changes 3 resources"},
		},
		{
			name: "broken message expression falls back to message",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{
				Expression: `false`, Message: "static", MessageExpression: `object.nope`,
			}}},
			want: []string{"static"},
		},
		{
			name:   "compile error fails closed",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `object.resource_changes.all(rc, `}}},
			want:   []string{"policy could not be evaluated: validation 0 (\"object.resource_changes.all(rc, \"): compiling: ERROR"},
		},
		{
			name:   "runtime error (missing key) fails closed",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `object.no_such_key == "x"`, Message: "unused"}}},
			want:   []string{`policy could not be evaluated: expression "object.no_such_key == \"x\"": no such key: no_such_key`},
		},
		{
			name:   "non-bool result (dyn) fails closed",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `object.format_version`}}},
			want:   []string{`policy could not be evaluated: expression "object.format_version": returned string, want a bool`},
		},
		{
			name:   "non-bool result (static) fails closed",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `1 + 1`}}},
			want:   []string{`policy could not be evaluated: validation 0 ("1 + 1"): returns int: want bool`},
		},
		{
			name: "variables, each seeing the ones before",
			policy: policy.Policy{Name: "p",
				Variables: []policy.Variable{
					{Name: "changes", Expression: `object.resource_changes`},
					{Name: "creates", Expression: `variables.changes.filter(rc, "create" in rc.change.actions)`},
				},
				Validations: []policy.Validation{
					{Expression: `size(variables.creates) == 2`, Message: "want 2 creates"},
					{Expression: `size(variables.creates) == 0`, Message: "no creates allowed"},
				}},
			want: []string{"no creates allowed"},
		},
		{
			name: "variable that errors fails closed",
			policy: policy.Policy{Name: "p",
				Variables:   []policy.Variable{{Name: "bad", Expression: `object.missing.deeper`}},
				Validations: []policy.Validation{{Expression: `true`}}},
			want: []string{`policy could not be evaluated: variable "bad": no such key: missing`},
		},
		{
			name: "forbid deletes",
			policy: policy.Policy{Name: "no-deletes", Validations: []policy.Validation{{
				Expression:        `object.resource_changes.all(rc, !("delete" in rc.change.actions))`,
				MessageExpression: `"plan deletes " + object.resource_changes.filter(rc, "delete" in rc.change.actions).map(rc, rc.address).join(", ")`,
			}}},
			want: []string{"plan deletes terraform_data.old, terraform_data.db"},
		},
		{
			name: "JSON integers are ints, other numbers doubles",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{
				{Expression: `object.planned_values.outputs.replicas.value == 3 && type(object.planned_values.outputs.replicas.value) == int`},
				{Expression: `object.planned_values.outputs.ratio.value < 1`},
			}},
		},
		{
			name: "match condition false skips the policy",
			policy: policy.Policy{Name: "p",
				MatchConditions: []policy.MatchCondition{{Name: "dev-only", Expression: `object.variables.env.value == "dev"`}},
				Validations:     []policy.Validation{{Expression: `false`, Message: "never"}}},
		},
		{
			name: "match condition error fails closed",
			policy: policy.Policy{Name: "p",
				MatchConditions: []policy.MatchCondition{{Name: "m", Expression: `object.nope == 1`}},
				Validations:     []policy.Validation{{Expression: `true`}}},
			want: []string{`policy could not be evaluated: match condition "m": no such key: nope`},
		},
		{
			name:   "unreadable policy fails closed",
			policy: policy.Policy{Name: "p", Error: "evaluation mode \"Kubernetes\" cannot check plans"},
			want:   []string{`policy could not be evaluated: evaluation mode "Kubernetes" cannot check plans`},
		},
		{
			name:   "policy without validations fails closed",
			policy: policy.Policy{Name: "p"},
			want:   []string{"policy could not be evaluated: it has no validations"},
		},
		{
			name:   "plan that is not JSON fails closed",
			policy: policy.Policy{Name: "p", Validations: []policy.Validation{{Expression: `true`}}},
			plan:   `{"format_version":`,
			want:   []string{"policy could not be evaluated: reading the plan JSON: unexpected EOF"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := plan
			if tt.plan != "" {
				in = tt.plan
			}
			got := policy.Compile([]policy.Policy{tt.policy}).Evaluate(context.Background(), []byte(in))
			if len(got) != len(tt.want) {
				t.Fatalf("Evaluate = %+v; want %d violation(s) %q", got, len(tt.want), tt.want)
			}
			for i, v := range got {
				if v.Policy != tt.policy.Name || !strings.HasPrefix(v.Message, tt.want[i]) {
					t.Errorf("violation %d = %+v; want policy %q and a message starting %q", i, v, tt.policy.Name, tt.want[i])
				}
			}
		})
	}
}

// nestedLoops is an expression of 10^7 steps.
const nestedLoops = `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, [1,2,3,4,5,6,7,8,9,10].all(g, a + b + c + d + e + f + g > 0)))))))`

func TestEvaluateBudgets(t *testing.T) {
	tests := []struct {
		name string
		opts policy.Options
		want string
	}{
		{name: "cost limit exceeded fails closed", opts: policy.Options{CostLimit: 10_000}, want: "cost limit exceeded"},
		{name: "timeout fails closed", opts: policy.Options{CostLimit: 1 << 62, ExpressionTimeout: 50 * time.Millisecond}, want: "evaluation stopped after 50ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := policy.CompileWithOptions([]policy.Policy{{Name: "p", Validations: []policy.Validation{{Expression: nestedLoops}}}}, tt.opts)
			got := set.Evaluate(context.Background(), []byte(plan))
			if len(got) != 1 || !strings.HasPrefix(got[0].Message, "policy could not be evaluated") || !strings.Contains(got[0].Message, tt.want) {
				t.Fatalf("Evaluate = %+v; want one violation saying the policy could not be evaluated: %s", got, tt.want)
			}
		})
	}
}

func TestEvaluateSeveralPolicies(t *testing.T) {
	set := policy.Compile([]policy.Policy{
		{Name: "a", Validations: []policy.Validation{{Expression: `true`}, {Expression: `false`, Message: "a1"}}},
		{Name: "b", Validations: []policy.Validation{{Expression: `(`}}},
		{Name: "c", Validations: []policy.Validation{{Expression: `false`, Message: "c1"}, {Expression: `false`, Message: "c2"}}},
	})
	got := set.Evaluate(context.Background(), []byte(plan))
	var summary []string
	for _, v := range got {
		summary = append(summary, v.Policy+":"+strings.SplitN(v.Message, ":", 2)[0])
	}
	want := "a:a1 b:policy could not be evaluated c:c1 c:c2"
	if strings.Join(summary, " ") != want {
		t.Fatalf("violations = %q; want %q", summary, want)
	}
}

func TestFromValidatingPolicy(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    string // fmt %+v of the Policy
		wantErr string
	}{
		{
			name: "JSON mode with variables and match conditions",
			yaml: `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: no-deletes, labels: {policy.magosproject.io/category: safety}}
spec:
  evaluation: {mode: JSON}
  validationActions: [Deny]
  matchConditions:
    - {name: is-plan, expression: "has(object.resource_changes)"}
  variables:
    - {name: deletes, expression: "object.resource_changes.filter(rc, 'delete' in rc.change.actions)"}
  validations:
    - {expression: "size(variables.deletes) == 0", message: "no deletes", messageExpression: "'deletes: ' + string(size(variables.deletes))"}
`,
			want: `{Name:no-deletes Variables:[{Name:deletes Expression:object.resource_changes.filter(rc, 'delete' in rc.change.actions)}] MatchConditions:[{Name:is-plan Expression:has(object.resource_changes)}] Validations:[{Expression:size(variables.deletes) == 0 Message:no deletes MessageExpression:'deletes: ' + string(size(variables.deletes))}] Error:}`,
		},
		{
			name: "no mode is JSON mode (upstream-compatible)",
			yaml: `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: p}
spec:
  validations: [{expression: "true"}]
`,
			want: `{Name:p Variables:[] MatchConditions:[] Validations:[{Expression:true Message: MessageExpression:}] Error:}`,
		},
		{
			name: "Kubernetes mode is refused",
			yaml: `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: p}
spec:
  evaluation: {mode: Kubernetes}
  validations: [{expression: "true"}]
`,
			wantErr: `reading policy p: evaluation mode "Kubernetes" cannot check plans: want "JSON"`,
		},
		{
			name:    "no validations",
			yaml:    "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: p}\nspec: {evaluation: {mode: JSON}}\n",
			wantErr: "reading policy p: spec.validations is empty",
		},
		{
			name:    "validation without expression",
			yaml:    "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: p}\nspec: {validations: [{message: m}]}\n",
			wantErr: "reading policy p: spec.validations[0]: want an expression",
		},
		{
			name:    "variable without name",
			yaml:    "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: p}\nspec: {variables: [{expression: x}], validations: [{expression: 'true'}]}\n",
			wantErr: "reading policy p: spec.variables[0]: want a name and an expression",
		},
		{
			name:    "another kind",
			yaml:    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\n",
			wantErr: "want a policies.kyverno.io/ValidatingPolicy",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(tt.yaml), &u.Object); err != nil {
				t.Fatal(err)
			}
			got, err := policy.FromValidatingPolicy(u)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromValidatingPolicy error = %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromValidatingPolicy: %v", err)
			}
			if s := fmt.Sprintf("%+v", got); s != tt.want {
				t.Fatalf("FromValidatingPolicy =\n%s\nwant\n%s", s, tt.want)
			}
		})
	}
}

// BenchmarkEvaluate measures a realistic policy (no deletes, via a variable) over a plan of
// 1000 resource changes.
func BenchmarkEvaluate(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"format_version":"1.2","resource_changes":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"address":"terraform_data.r%d","type":"terraform_data","change":{"actions":["update"],"after":{"input":"%d"}}}`, i, i)
	}
	sb.WriteString(`]}`)
	planJSON := []byte(sb.String())
	set := policy.Compile([]policy.Policy{{
		Name:      "no-deletes",
		Variables: []policy.Variable{{Name: "deletes", Expression: `object.resource_changes.filter(rc, "delete" in rc.change.actions)`}},
		Validations: []policy.Validation{
			{Expression: `size(variables.deletes) == 0`, Message: "no deletes"},
			{Expression: `object.resource_changes.all(rc, rc.type.startsWith("terraform_"))`},
		},
	}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if v := set.Evaluate(ctx, planJSON); len(v) != 0 {
			b.Fatalf("violations: %v", v)
		}
	}
}
