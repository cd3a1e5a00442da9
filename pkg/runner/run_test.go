package runner_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// module is a root module that needs no provider download: one terraform_data whose input is a
// variable, an output echoing it, and a check block.
const module = `
variable "input" {
  type    = string
  default = "one"
}

resource "terraform_data" "this" {
  input = var.input
}

output "input" {
  value = terraform_data.this.output
}

check "input_is_set" {
  assert {
    condition     = var.input != ""
    error_message = "input is empty"
  }
}
`

// testContext carries a logger that writes to the test's log.
func testContext(t *testing.T) context.Context {
	return log.IntoContext(context.Background(), testr.New(t))
}

// tofu returns the tofu binary the tests run, failing the test when it cannot be had.
func tofu(t testing.TB) string {
	t.Helper()
	p, err := localcluster.Tofu()
	if err != nil || p == "" {
		t.Fatalf("tofu binary: %v (path %q)", err, p)
	}
	return p
}

// fixture is a repository with a module, and where a test's runs keep their plan and state.
type fixture struct {
	repo  *gitrepotest.Repo
	sha   string
	dir   string // plan file and local state live here
	tofu  string
	out   *testenv.Buffer
	state string
}

func newFixture(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	repo := gitrepotest.New(t)
	dir := t.TempDir()
	f := &fixture{repo: repo, dir: dir, tofu: tofu(t), out: &testenv.Buffer{}, state: filepath.Join(dir, "state", "terraform.tfstate")}
	f.sha = repo.Commit(t, "module", files)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tool output:\n%s", f.out.String())
		}
	})
	return f
}

// spec is a plan of the fixture's latest commit with local state.
func (f *fixture) spec(op runner.Operation) runner.Spec {
	return runner.Spec{
		Operation:  op,
		RunID:      "run-1",
		Namespace:  "team-a",
		Name:       "network",
		RepoURL:    f.repo.URL(),
		Revision:   f.sha,
		Path:       ".",
		Binary:     runner.BinaryTofu,
		BinaryPath: f.tofu,
		PlanFile:   filepath.Join(f.dir, "plans", "run-1.tfplan"),
		Backend:    runner.Backend{LocalPath: f.state},
	}
}

func (f *fixture) options(env ...string) runner.Options {
	return runner.Options{Stdout: f.out, Stderr: f.out, Env: append(os.Environ(), env...)}
}

// run runs spec and fails the test unless the outcome is want.
func (f *fixture) run(t *testing.T, spec runner.Spec, want runner.Outcome, env ...string) runner.Result {
	t.Helper()
	res := runner.Run(testContext(t), spec, f.options(env...))
	if res.Outcome != want {
		t.Fatalf("%s: outcome %s (%s); want %s", spec.Operation, res.Outcome, res.Message, want)
	}
	return res
}

// stateOf reads a local state file: resource inputs by address, and outputs.
func stateOf(t *testing.T, path string) (inputs map[string]any, outputs map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading state: %v", err)
	}
	var s struct {
		Outputs   map[string]struct{ Value any } `json:"outputs"`
		Resources []struct {
			Type, Name string
			Instances  []struct {
				Attributes map[string]any `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("decoding state: %v", err)
	}
	inputs, outputs = map[string]any{}, map[string]any{}
	for _, r := range s.Resources {
		for _, in := range r.Instances {
			// terraform_data keeps its input as a dynamic value: {"type": ..., "value": ...}.
			input := in.Attributes["input"]
			if dyn, ok := input.(map[string]any); ok {
				input = dyn["value"]
			}
			inputs[r.Type+"."+r.Name] = input
		}
	}
	for k, v := range s.Outputs {
		outputs[k] = v.Value
	}
	return inputs, outputs
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestRunPlanApplyDestroyLocalState(t *testing.T) {
	f := newFixture(t, map[string]string{"infra/main.tf": module})
	spec := f.spec(runner.OperationPlan)
	spec.Path = "infra"
	spec.Version = "1.10.6"

	plan := f.run(t, spec, runner.OutcomeSucceeded)
	if plan.Add != 1 || plan.Change != 0 || plan.Destroy != 0 || !plan.HasChanges || plan.Revision != f.sha {
		t.Fatalf("plan = %+v; want add 1, has changes, revision %s", plan, f.sha)
	}
	if plan.Message != "Plan: 1 to add, 0 to change, 0 to destroy." {
		t.Errorf("plan message = %q", plan.Message)
	}
	if !fileExists(spec.PlanFile) {
		t.Fatalf("plan file %s missing after plan", spec.PlanFile)
	}
	// The machine's TF_CLI_CONFIG_FILE names a missing file; the run uses its own.
	if out := f.out.String(); strings.Contains(out, "CLI configuration") {
		t.Errorf("tool warned about its CLI configuration:\n%s", out)
	}

	spec.Operation = runner.OperationApply
	apply := f.run(t, spec, runner.OutcomeSucceeded)
	if apply.Revision != f.sha || fileExists(spec.PlanFile) {
		t.Fatalf("apply = %+v, plan file exists %v; want revision %s and the plan file gone", apply, fileExists(spec.PlanFile), f.sha)
	}
	if inputs, _ := stateOf(t, f.state); inputs["terraform_data.this"] != "one" {
		t.Fatalf("state inputs = %v; want terraform_data.this = one", inputs)
	}

	if res := runner.Run(testContext(t), spec, f.options()); res.Outcome != runner.OutcomeFailed || !strings.Contains(res.Message, "saved plan") {
		t.Fatalf("second apply of a spent plan = %+v; want Failed naming the missing saved plan", res)
	}

	spec.Operation = runner.OperationPlan
	again := f.run(t, spec, runner.OutcomeSucceeded)
	if again.HasChanges || again.Add+again.Change+again.Destroy != 0 || again.Message != "No changes." {
		t.Fatalf("second plan = %+v; want no changes (state kept)", again)
	}

	spec.Operation = runner.OperationDestroy
	f.run(t, spec, runner.OutcomeSucceeded)
	if inputs, _ := stateOf(t, f.state); len(inputs) != 0 {
		t.Fatalf("state after destroy has resources %v; want none", inputs)
	}
}

func TestRunKubernetesBackendKeepsState(t *testing.T) {
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"spoke"}})
	spoke := fleet.Spokes["spoke"]
	ctx := context.Background()
	if err := spoke.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	f := newFixture(t, map[string]string{"main.tf": module})
	spec := f.spec(runner.OperationPlan)
	spec.Backend = runner.Backend{Kubernetes: &runner.KubernetesBackend{Namespace: "team-a", SecretSuffix: "network", ConfigPath: spoke.Kubeconfig}}

	if res := f.run(t, spec, runner.OutcomeSucceeded); res.Add != 1 {
		t.Fatalf("first plan = %+v; want add 1", res)
	}
	spec.Operation = runner.OperationApply
	// The outputs are read back from the state in the Secret.
	if res := f.run(t, spec, runner.OutcomeSucceeded); len(res.Outputs) != 1 || string(res.Outputs["input"]) != `"one"` {
		t.Fatalf("apply = %+v; want the output input = \"one\"", res)
	}

	secret := &corev1.Secret{}
	if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "tfstate-default-network"}, secret); err != nil {
		t.Fatalf("state Secret tfstate-default-network: %v", err)
	}

	// A new commit changes the resource: the next plan (a fresh clone, a fresh data folder)
	// must find the state and update, not create again.
	f.sha = f.repo.Commit(t, "change input", map[string]string{"main.tf": strings.Replace(module, `default = "one"`, `default = "two"`, 1)})
	spec = f.spec(runner.OperationPlan)
	spec.RunID = "run-2"
	spec.Backend = runner.Backend{Kubernetes: &runner.KubernetesBackend{Namespace: "team-a", SecretSuffix: "network", ConfigPath: spoke.Kubeconfig}}
	res := f.run(t, spec, runner.OutcomeSucceeded)
	if res.Change != 1 || res.Add != 0 || res.Destroy != 0 || res.Revision != f.sha {
		t.Fatalf("plan after the change = %+v; want change 1, add 0 at %s", res, f.sha)
	}
}

func TestRunModuleBackendIsRespected(t *testing.T) {
	own := filepath.Join(t.TempDir(), "own.tfstate")
	backend := "terraform {\n  backend \"local\" {\n    path = \"" + own + "\"\n  }\n}\n"
	f := newFixture(t, map[string]string{"main.tf": module, "backend.tf": backend})
	spec := f.spec(runner.OperationPlan)
	// A backend the runner would write if it ignored the module's: it cannot work.
	spec.Backend = runner.Backend{Kubernetes: &runner.KubernetesBackend{Namespace: "team-a", SecretSuffix: "x", ConfigPath: "/nonexistent/kubeconfig"}}
	f.run(t, spec, runner.OutcomeSucceeded)
	spec.Operation = runner.OperationApply
	f.run(t, spec, runner.OutcomeSucceeded)
	if inputs, _ := stateOf(t, own); inputs["terraform_data.this"] != "one" {
		t.Fatalf("module's own state = %v; want terraform_data.this", inputs)
	}
}

func TestRunVariables(t *testing.T) {
	const vars = `
variable "from_env" { type = string }
variable "from_hcl" { type = map(number) }
variable "from_file" { type = string }
variable "overridden" { type = string }
output "from_env" { value = var.from_env }
output "from_hcl" { value = var.from_hcl }
output "from_file" { value = var.from_file }
output "overridden" { value = var.overridden }
resource "terraform_data" "this" { input = "${var.from_env}-${var.from_file}" }
`
	f := newFixture(t, map[string]string{
		"modules/app/main.tf": vars,
		"config/prod.tfvars":  "from_file = \"file\"\noverridden = \"by-file\"\n",
	})
	spec := f.spec(runner.OperationPlan)
	spec.Path = "modules/app"
	spec.TfvarsPath = "config/prod.tfvars"
	env := []string{
		"TF_VAR_from_env=env",
		runner.EnvHCLVariablePrefix + `from_hcl={ a = 1, b = 2 }`,
		"TF_VAR_overridden=by-env",
	}
	f.run(t, spec, runner.OutcomeSucceeded, env...)
	spec.Operation = runner.OperationApply
	f.run(t, spec, runner.OutcomeSucceeded)
	inputs, outputs := stateOf(t, f.state)
	want := map[string]any{
		"from_env":   "env",
		"from_hcl":   map[string]any{"a": float64(1), "b": float64(2)},
		"from_file":  "file",
		"overridden": "by-file",
	}
	for k, v := range want {
		if got, _ := json.Marshal(outputs[k]); string(got) != mustJSON(v) {
			t.Errorf("output %s = %s; want %s", k, got, mustJSON(v))
		}
	}
	if inputs["terraform_data.this"] != "env-file" {
		t.Errorf("terraform_data.this input = %v; want env-file", inputs["terraform_data.this"])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRunPolicies(t *testing.T) {
	f := newFixture(t, map[string]string{"main.tf": module})
	noCreates := runner.Policy{Name: "no-creates", Validations: []runner.Validation{{
		Expression: `object.resource_changes.all(rc, !("create" in rc.change.actions))`,
		Message:    "creating resources is not allowed",
	}}}
	tests := []struct {
		name     string
		policies []runner.Policy
		outcome  runner.Outcome
		want     []runner.Violation
	}{
		{
			name: "passing policy",
			policies: []runner.Policy{{Name: "ok", Validations: []runner.Validation{{
				Expression: `object.resource_changes.all(rc, rc.type == "terraform_data")`,
			}}}},
			outcome: runner.OutcomeSucceeded,
		},
		{
			name:     "violation",
			policies: []runner.Policy{noCreates},
			outcome:  runner.OutcomePolicyViolation,
			want:     []runner.Violation{{Policy: "no-creates", Message: "creating resources is not allowed"}},
		},
		{
			name:     "broken policy fails closed",
			policies: []runner.Policy{{Name: "broken", Validations: []runner.Validation{{Expression: `object.resource_changes.all(rc, `}}}},
			outcome:  runner.OutcomePolicyViolation,
			want:     []runner.Violation{{Policy: "broken", Message: "policy could not be evaluated"}},
		},
		{
			name:     "unreadable policy fails closed",
			policies: []runner.Policy{{Name: "kube-mode", Error: `evaluation mode "Kubernetes" cannot check plans`}},
			outcome:  runner.OutcomePolicyViolation,
			want:     []runner.Violation{{Policy: "kube-mode", Message: "policy could not be evaluated"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := f.spec(runner.OperationPlan)
			spec.Policies = tt.policies
			res := f.run(t, spec, tt.outcome)
			if res.Add != 1 {
				t.Errorf("add = %d; want 1 (counts are reported with violations too)", res.Add)
			}
			if fileExists(spec.PlanFile) != (tt.outcome == runner.OutcomeSucceeded) {
				t.Fatalf("plan file exists = %v after outcome %s; want it only after success", fileExists(spec.PlanFile), res.Outcome)
			}
			if tt.outcome == runner.OutcomeSucceeded {
				return
			}
			if want := "Plan violated 1 policy rule(s)"; res.Message != want {
				t.Errorf("message = %q; want %q", res.Message, want)
			}
			if len(res.Violations) != len(tt.want) {
				t.Fatalf("violations = %+v; want %+v", res.Violations, tt.want)
			}
			for i, v := range res.Violations {
				if v.Policy != tt.want[i].Policy || !strings.HasPrefix(v.Message, tt.want[i].Message) {
					t.Errorf("violation %d = %+v; want policy %s, message starting %q", i, v, tt.want[i].Policy, tt.want[i].Message)
				}
			}
			// The rejected plan cannot be applied.
			spec.Operation = runner.OperationApply
			if res := runner.Run(testContext(t), spec, f.options()); res.Outcome != runner.OutcomeFailed {
				t.Fatalf("apply after a rejected plan = %+v; want Failed", res)
			}
		})
	}
}

// TestRunDestroyUnderPolicies: a destroy under policies is planned and checked like a plan. A
// policy that forbids deleting refuses it and destroys nothing (the state keeps its resource);
// a policy it passes lets exactly the checked plan destroy.
func TestRunDestroyUnderPolicies(t *testing.T) {
	f := newFixture(t, map[string]string{"main.tf": module})
	spec := f.spec(runner.OperationPlan)
	f.run(t, spec, runner.OutcomeSucceeded)
	spec.Operation = runner.OperationApply
	f.run(t, spec, runner.OutcomeSucceeded)

	spec.Operation = runner.OperationDestroy
	spec.Policies = []runner.Policy{{Name: "no-deletes", Validations: []runner.Validation{{
		Expression: `object.resource_changes.all(rc, !("delete" in rc.change.actions))`,
		Message:    "deleting resources is not allowed",
	}}}}
	res := f.run(t, spec, runner.OutcomePolicyViolation)
	if len(res.Violations) != 1 || res.Violations[0].Policy != "no-deletes" || res.Destroy != 1 {
		t.Fatalf("refused destroy = %+v; want one violation of no-deletes and the plan's 1 to destroy", res)
	}
	if inputs, _ := stateOf(t, f.state); inputs["terraform_data.this"] != "one" {
		t.Fatalf("state after a refused destroy = %v; want terraform_data.this kept", inputs)
	}

	spec.Policies = []runner.Policy{{Name: "only-terraform-data", Validations: []runner.Validation{{
		Expression: `object.resource_changes.all(rc, rc.type == "terraform_data")`,
	}}}}
	if res := f.run(t, spec, runner.OutcomeSucceeded); res.Destroy != 1 {
		t.Fatalf("checked destroy = %+v; want 1 destroyed", res)
	}
	if inputs, _ := stateOf(t, f.state); len(inputs) != 0 {
		t.Fatalf("state after the checked destroy has resources %v; want none", inputs)
	}
}

func TestRunFailures(t *testing.T) {
	f := newFixture(t, map[string]string{
		"main.tf":        module,
		"broken/main.tf": "resource \"terraform_data\" \"x\" {\n  input = var.missing\n}\n",
		"plain-file.txt": "x",
	})
	f.sha = f.repo.Symlink(t, "escape/link", "/etc")
	tests := []struct {
		name   string
		change func(*runner.Spec)
		want   string
	}{
		{name: "version mismatch", change: func(s *runner.Spec) { s.Version = "1.5.7" },
			want: "OpenTofu 1.10.6 at " + f.tofu + " cannot run terraform.version 1.5.7"},
		{name: "missing repository", change: func(s *runner.Spec) { s.RepoURL = "file://" + filepath.Join(f.dir, "nope") },
			want: "fetching repository file://" + filepath.Join(f.dir, "nope")},
		{name: "unknown revision", change: func(s *runner.Spec) { s.Revision = strings.Repeat("0123456789", 4) },
			want: "commit 0123456789012345678901234567890123456789 is on no branch or tag"},
		{name: "revision that is not a SHA", change: func(s *runner.Spec) { s.Revision = "main" },
			want: `invalid run spec: revision "main": want a 40-hex commit SHA`},
		{name: "path missing", change: func(s *runner.Spec) { s.Path = "nope" },
			want: `path "nope" not found in the repository`},
		{name: "path is a file", change: func(s *runner.Spec) { s.Path = "plain-file.txt" },
			want: `path "plain-file.txt" is not a folder in the repository at ` + f.sha},
		{name: "path escapes through a symlink", change: func(s *runner.Spec) { s.Path = "escape/link" },
			want: `path "escape/link" leaves the repository through a symbolic link`},
		{name: "path escapes", change: func(s *runner.Spec) { s.Path = "../x" },
			want: `invalid run spec: path "../x": leaves the repository`},
		{name: "tfvars missing", change: func(s *runner.Spec) { s.TfvarsPath = "nope.tfvars" },
			want: `tfvarsPath "nope.tfvars" not found in the repository`},
		{name: "binary missing", change: func(s *runner.Spec) { s.BinaryPath = filepath.Join(f.dir, "no-tofu") },
			want: "running tofu at " + filepath.Join(f.dir, "no-tofu")},
		{name: "tool error ends the message", change: func(s *runner.Spec) { s.Path = "broken" },
			want: "tofu plan failed: Error: Reference to undeclared input variable"},
		{name: "no backend anywhere", change: func(s *runner.Spec) { s.Backend = runner.Backend{} },
			want: "the module configures no backend and the run spec gives none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := f.spec(runner.OperationPlan)
			tt.change(&spec)
			res := runner.Run(testContext(t), spec, f.options())
			if res.Outcome != runner.OutcomeFailed || !strings.Contains(res.Message, tt.want) {
				t.Fatalf("Run = %s %q; want Failed with a message containing %q", res.Outcome, res.Message, tt.want)
			}
			if len(res.Message) > 2*runner.MaxMessageBytes {
				t.Errorf("message of %d bytes; want it short", len(res.Message))
			}
			if fileExists(spec.PlanFile) {
				t.Errorf("plan file %s left behind by a failed plan", spec.PlanFile)
			}
		})
	}
}

func TestMainEntrypoint(t *testing.T) {
	f := newFixture(t, map[string]string{"main.tf": module})
	good := f.spec(runner.OperationPlan)
	bad := good
	bad.Revision = strings.Repeat("ab", 20)
	tests := []struct {
		name     string
		spec     string
		code     int
		outcome  runner.Outcome
		message  string
		revision string
	}{
		{name: "plan succeeds", spec: mustJSON(good), code: runner.ExitSucceeded, outcome: runner.OutcomeSucceeded,
			message: "Plan: 1 to add", revision: f.sha},
		{name: "run fails", spec: mustJSON(bad), code: runner.ExitFailed, outcome: runner.OutcomeFailed, message: "is on no branch or tag"},
		{name: "spec is not JSON", spec: "{", code: runner.ExitInvalidSpec, outcome: runner.OutcomeFailed, message: "MAGOS_RUN_SPEC is not a run spec"},
		{name: "spec is empty", spec: "", code: runner.ExitInvalidSpec, outcome: runner.OutcomeFailed, message: "MAGOS_RUN_SPEC is empty"},
		{name: "spec is invalid", spec: `{"operation":"deploy"}`, code: runner.ExitInvalidSpec, outcome: runner.OutcomeFailed,
			message: `invalid run spec: operation "deploy": want plan, apply or destroy`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resultFile := filepath.Join(t.TempDir(), "termination-log")
			t.Setenv(runner.EnvSpec, tt.spec)
			t.Setenv(runner.EnvResultFile, resultFile)
			code := runner.Main(testContext(t))
			raw, err := os.ReadFile(resultFile)
			if err != nil {
				t.Fatalf("reading the result file: %v", err)
			}
			res, err := runner.DecodeResult(raw)
			if err != nil {
				t.Fatalf("decoding the result file: %v", err)
			}
			if code != tt.code || res.Outcome != tt.outcome || !strings.Contains(res.Message, tt.message) || res.Revision != tt.revision {
				t.Fatalf("Main = %d, result %+v; want %d, %s with a message containing %q, revision %q", code, res, tt.code, tt.outcome, tt.message, tt.revision)
			}
		})
	}
}

// TestRunPlanDigest checks the plan digest with real tofu: the same plan made twice (at
// different times) has the same digest, and a plan that would apply anything else has another.
func TestRunPlanDigest(t *testing.T) {
	const mod = `
variable "v" { type = string }
resource "terraform_data" "this" { input = var.v }
`
	f := newFixture(t, map[string]string{"m/main.tf": mod})
	spec := f.spec(runner.OperationPlan)
	spec.Path = "m"
	first := f.run(t, spec, runner.OutcomeSucceeded, "TF_VAR_v=one")
	if len(first.PlanSHA256) != 64 {
		t.Fatalf("plan digest %q; want 64 hex digits", first.PlanSHA256)
	}
	again := f.run(t, spec, runner.OutcomeSucceeded, "TF_VAR_v=one")
	if again.PlanSHA256 != first.PlanSHA256 {
		t.Errorf("the same plan made twice has digests %s and %s; want them equal", first.PlanSHA256, again.PlanSHA256)
	}
	other := f.run(t, spec, runner.OutcomeSucceeded, "TF_VAR_v=two")
	if other.PlanSHA256 == first.PlanSHA256 {
		t.Errorf("plans of v=one and v=two have the same digest %s; want them different", first.PlanSHA256)
	}
}

// TestRunStalePlan: a saved plan whose state changed after it was made (another plan of the
// same state applied meanwhile) is refused by tofu: the run ends StalePlan, applies nothing, and
// its plan file is gone.
func TestRunStalePlan(t *testing.T) {
	f := newFixture(t, map[string]string{"infra/main.tf": module})
	first := f.spec(runner.OperationPlan)
	first.Path = "infra"
	f.run(t, first, runner.OutcomeSucceeded)

	other := first
	other.PlanFile = filepath.Join(filepath.Dir(first.PlanFile), "other", "plan.tfplan")
	f.run(t, other, runner.OutcomeSucceeded)
	other.Operation = runner.OperationApply
	f.run(t, other, runner.OutcomeSucceeded)
	before, err := os.ReadFile(f.state)
	if err != nil {
		t.Fatal(err)
	}

	first.Operation = runner.OperationApply
	res := f.run(t, first, runner.OutcomeStalePlan)
	if res.Outputs != nil || res.OutputsDropped {
		t.Errorf("stale apply outputs = %v (dropped %v); want none: nothing was applied", res.Outputs, res.OutputsDropped)
	}
	if !strings.Contains(res.Message, "stale") || fileExists(first.PlanFile) {
		t.Errorf("stale apply = %+v, plan file exists %v; want StalePlan saying so and the plan file gone", res, fileExists(first.PlanFile))
	}
	if after, err := os.ReadFile(f.state); err != nil || string(after) != string(before) {
		t.Errorf("state changed by the refused apply (%v): nothing should have been applied", err)
	}
}
