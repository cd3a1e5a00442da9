package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/policy"
)

// Options configures Run: what the process running it provides, as opposed to the Spec.
type Options struct {
	// Binaries maps a binary name (tofu, terraform) to its path. A Spec's binaryPath wins;
	// without either the runner looks at MAGOS_TOFU / MAGOS_TERRAFORM in Env, then PATH.
	Binaries map[string]string
	// WorkDir is where each run makes its temporary folder (default os.TempDir()).
	WorkDir string
	// Stdout and Stderr receive the tool's output (default: discarded). The plan JSON and the
	// outputs' JSON (`output -json`) are never written to them.
	Stdout, Stderr io.Writer
	// Auth are the git credentials.
	Auth gitrepo.Auth
	// Env is the environment of the run (default os.Environ()): TF_VAR_<name> and other
	// variables reach the tool, MAGOS_HCL_VAR_<name> become HCL variables, and
	// MAGOS_PROVIDER_MIRROR and MAGOS_PROVIDER_NETWORK_MIRROR say where providers come from
	// (a TF_CLI_CONFIG_FILE naming a file overrides them: see cliConfig). Git credentials and
	// the runner's own settings are not passed on to the tool.
	Env []string
}

// Run executes one run: check out spec.Revision into a fresh folder, select and check the
// binary, write the HCL variables and (when the module has none) the backend, init (providers
// from the run's provider mirrors only, when it names any, checked against the module's lock
// file), and plan (with policies), apply the saved plan, or destroy. It never panics on bad
// input and always returns a Result; a failure's message says what failed, ending with the
// tool's last error lines (never the environment).
//
// Plan removes any previous plan file first and removes the new one when policies reject it,
// so a rejected plan can never be applied. Apply removes the plan file once it ran; when it
// succeeded, the module's non-sensitive outputs are read into Result.Outputs (`output -json`,
// whose output never reaches the run's log), and outputs that cannot be read leave Outputs nil
// and say so in the message without failing the apply. The run's
// folder is removed at the end; the plan file and the local state (Backend.LocalPath) live
// outside it.
func Run(ctx context.Context, spec Spec, opts Options) Result {
	if spec.Binary == "" {
		spec.Binary = BinaryTofu
	}
	logger := log.FromContext(ctx).WithValues("namespace", spec.Namespace, "workspace", spec.Name,
		"runID", spec.RunID, "operation", spec.Operation)
	ctx = log.IntoContext(ctx, logger)
	res := Result{Operation: spec.Operation, RunID: spec.RunID}
	if err := spec.Validate(); err != nil {
		res.Outcome, res.Message = OutcomeFailed, "invalid run spec: "+err.Error()
		return res
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	dir, err := os.MkdirTemp(opts.WorkDir, "magos-run-")
	if err != nil {
		res.Outcome, res.Message = OutcomeFailed, fmt.Sprintf("creating the run folder: %v", err)
		return res
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			logger.Error(err, "Removing the run folder", "dir", dir)
		}
	}()
	r := &run{spec: spec, opts: opts, dir: dir, log: logger}
	res = r.execute(ctx, res)
	logger.Info("Run finished", "outcome", res.Outcome, "revision", res.Revision,
		"add", res.Add, "change", res.Change, "destroy", res.Destroy, "driftReverts", res.DriftReverts, "violations", len(res.Violations),
		"outputs", len(res.Outputs))
	return res
}

// run is one Run in progress.
type run struct {
	spec Spec
	opts Options
	dir  string // the run's temporary folder
	log  logr.Logger
	// providers are the provider sources the runner's CLI configuration names (cliConfig).
	providers providerSources
}

func (r *run) execute(ctx context.Context, res Result) Result {
	fail := func(err error) Result {
		res.Outcome, res.Message = OutcomeFailed, err.Error()
		return res
	}
	spec := r.spec
	clone := filepath.Join(r.dir, "src")
	r.log.V(1).Info("Checking out", "revision", spec.Revision)
	if err := gitrepo.Checkout(ctx, gitrepo.CheckoutOptions{URL: spec.RepoURL, Revision: spec.Revision, Dir: clone, Auth: r.opts.Auth}); err != nil {
		return fail(err)
	}
	res.Revision = strings.ToLower(spec.Revision)
	workDir, err := inside(clone, spec.Path, "path")
	if err != nil {
		return fail(err)
	}
	if fi, err := os.Stat(workDir); err != nil || !fi.IsDir() {
		return fail(fmt.Errorf("path %q is not a folder in the repository at %s", spec.Path, res.Revision))
	}
	var varFile string
	if spec.TfvarsPath != "" {
		if varFile, err = inside(clone, spec.TfvarsPath, "tfvarsPath"); err != nil {
			return fail(err)
		}
		if fi, err := os.Stat(varFile); err != nil || !fi.Mode().IsRegular() {
			return fail(fmt.Errorf("tfvarsPath %q is not a file in the repository at %s", spec.TfvarsPath, res.Revision))
		}
	}

	env, err := r.toolEnv()
	if err != nil {
		return fail(err)
	}
	path, err := findBinary(spec, r.opts, r.opts.Env)
	if err != nil {
		return fail(err)
	}
	t := &tool{name: spec.Binary, path: path, dir: workDir, env: env, out: r.opts.Stdout, err: r.opts.Stderr}
	version, err := t.checkVersion(ctx, spec.Version)
	if err != nil {
		return fail(err)
	}
	r.log.V(1).Info("Selected binary", "binary", spec.Binary, "path", path, "version", version)

	if spec.Operation == OperationApply {
		if _, err := os.Stat(spec.PlanFile); err != nil {
			return fail(fmt.Errorf("saved plan %s not found: a plan of this run must succeed before apply", spec.PlanFile))
		}
	} else if err := writeHCLVariables(workDir, r.opts.Env); err != nil {
		return fail(err)
	}
	own, err := moduleBackend(workDir)
	if err != nil {
		return fail(err)
	}
	if own != "" {
		r.log.Info("The module configures its own state backend; using it", "backend", own)
	} else if err := writeBackend(workDir, spec.Backend); err != nil {
		return fail(err)
	}
	// Never -upgrade: init installs what the module's lock file (LockFile) records, checked
	// against its checksums.
	if err := t.run(ctx, "init", "-input=false", "-no-color"); err != nil {
		return fail(r.initFailure(err))
	}

	switch spec.Operation {
	case OperationPlan:
		return r.plan(ctx, t, varFile, res)
	case OperationApply:
		err := t.run(ctx, "apply", "-input=false", "-no-color", spec.PlanFile)
		// Applied or not, the plan is spent: the state it was made against has moved on or
		// the next attempt plans again.
		r.removePlan()
		if err != nil && stalePlan(err) {
			res.Outcome, res.Message = OutcomeStalePlan, "the saved plan is stale: the state changed since it was planned; nothing was applied"
			return res
		}
		if err != nil {
			return fail(err)
		}
		res.Outcome, res.Message = OutcomeSucceeded, "Apply complete."
		// The apply stands whatever happens next: outputs that cannot be read leave Outputs
		// nil, and the message says why, for a verification that needs them.
		outputs, err := r.readOutputs(ctx, t)
		if err != nil {
			r.log.Error(err, "Reading the outputs after the apply")
			res.Message += " The outputs could not be read: " + err.Error()
			return res
		}
		res.Outputs = outputs
		return res
	default: // OperationDestroy
		if len(spec.Policies) > 0 {
			return r.checkedDestroy(ctx, t, varFile, res)
		}
		args := []string{"destroy", "-input=false", "-no-color", "-auto-approve"}
		if varFile != "" {
			args = append(args, "-var-file="+varFile)
		}
		if err := t.run(ctx, args...); err != nil {
			return fail(err)
		}
		res.Outcome, res.Message = OutcomeSucceeded, "Destroy complete."
		return res
	}
}

// checkedDestroy destroys under policies: it plans the destroy, checks the plan against the
// policies as a plan is checked, and applies exactly that plan only when none is violated. A
// violated policy destroys nothing (OutcomePolicyViolation, with the plan's counts).
func (r *run) checkedDestroy(ctx context.Context, t *tool, varFile string, res Result) Result {
	fail := func(err error) Result {
		res.Outcome, res.Message = OutcomeFailed, err.Error()
		return res
	}
	planFile := filepath.Join(r.dir, "destroy.tfplan")
	planJSON, _, err := r.planInto(ctx, t, planFile, varFile, false, &res, "-destroy")
	if err != nil {
		return fail(err)
	}
	if v := policy.Compile(r.spec.Policies).Evaluate(ctx, planJSON); len(v) > 0 {
		res.Outcome, res.Violations = OutcomePolicyViolation, v
		res.Message = fmt.Sprintf("Destroy plan violated %d policy rule(s): nothing was destroyed", len(v))
		return res
	}
	if err := t.run(ctx, "apply", "-input=false", "-no-color", planFile); err != nil {
		return fail(err)
	}
	res.Outcome, res.Message = OutcomeSucceeded, "Destroy complete."
	return res
}

func (r *run) plan(ctx context.Context, t *tool, varFile string, res Result) Result {
	fail := func(err error) Result {
		r.removePlan()
		res.Outcome, res.Message = OutcomeFailed, err.Error()
		return res
	}
	planFile := r.spec.PlanFile
	// Never leave an older plan where apply would find it.
	if err := os.Remove(planFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("removing the previous plan: %w", err))
	}
	if err := os.MkdirAll(filepath.Dir(planFile), 0o700); err != nil {
		return fail(fmt.Errorf("creating the folder of the plan file: %w", err))
	}
	// The frame lets the agent keep the plan text apart from the rest of the log (ReadOutput).
	fmt.Fprintln(r.opts.Stdout, PlanTextBegins)
	planJSON, summary, err := r.planInto(ctx, t, planFile, varFile, true, &res)
	if err != nil {
		return fail(err)
	}
	if res.PlanSHA256, err = planSHA256(planJSON); err != nil {
		return fail(err)
	}
	if len(r.spec.Policies) > 0 {
		if v := policy.Compile(r.spec.Policies).Evaluate(ctx, planJSON); len(v) > 0 {
			r.removePlan()
			res.Outcome, res.Violations = OutcomePolicyViolation, v
			res.Message = fmt.Sprintf("Plan violated %d policy rule(s)", len(v))
			return res
		}
	}
	res.Outcome, res.Message = OutcomeSucceeded, summary.String()
	return res
}

// planInto runs the tool's plan (with extra flags, such as -destroy) into planFile, reads the
// plan back as JSON and records its counts in res. framed: the caller began the plan text's
// frame (PlanTextBegins), which planInto ends as soon as the plan itself has run.
func (r *run) planInto(ctx context.Context, t *tool, planFile, varFile string, framed bool, res *Result, extra ...string) ([]byte, planSummary, error) {
	args := append([]string{"plan"}, extra...)
	args = append(args, "-input=false", "-no-color", "-out="+planFile)
	if r.spec.NoStateLock {
		args = append(args, "-lock=false")
	}
	if varFile != "" {
		args = append(args, "-var-file="+varFile)
	}
	err := t.run(ctx, args...)
	if framed {
		fmt.Fprintln(r.opts.Stdout, PlanTextEnds)
	}
	if err != nil {
		return nil, planSummary{}, err
	}
	planJSON, err := t.output(ctx, "show", "-json", planFile)
	if err != nil {
		return nil, planSummary{}, err
	}
	summary, err := summarizePlan(planJSON)
	if err != nil {
		return nil, planSummary{}, err
	}
	res.Add, res.Change, res.Destroy, res.HasChanges = summary.add, summary.change, summary.destroy, summary.hasChanges
	res.DriftReverts = summary.driftReverts
	return planJSON, summary, nil
}

func (r *run) removePlan() {
	if err := os.Remove(r.spec.PlanFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Error(err, "Removing the plan file", "planFile", r.spec.PlanFile)
	}
}

// withheld are environment variables the tool does not get: the runner's own, and the git
// credentials; the TF_ settings the runner sets itself are replaced.
var withheld = map[string]bool{
	EnvSpec: true, EnvResultFile: true,
	EnvGitUsername: true, EnvGitPassword: true, EnvGitSSHPrivateKey: true, EnvGitSSHKnownHosts: true,
	EnvCLIConfigFile: true, "TF_DATA_DIR": true, "TF_IN_AUTOMATION": true, "TF_INPUT": true,
	// The kubernetes backend keys the state by workspace: always "default".
	"TF_WORKSPACE": true,
}

// toolEnv is the tool's environment: the run's, without what is withheld and the HCL variables
// (they go to a file), plus the runner's settings: automation mode, no input, the CLI
// configuration (cliConfig: where providers come from) and a data folder of its own.
func (r *run) toolEnv() ([]string, error) {
	cliConfig, err := r.cliConfig()
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(r.opts.Env)+4)
	for _, kv := range r.opts.Env {
		name, _, _ := strings.Cut(kv, "=")
		if withheld[name] || strings.HasPrefix(name, EnvHCLVariablePrefix) {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		EnvCLIConfigFile+"="+cliConfig,
		"TF_DATA_DIR="+filepath.Join(r.dir, "data"),
	), nil
}

// inside returns root/rel with symbolic links resolved, and fails when it does not exist or
// leaves root.
func inside(root, rel, field string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("resolving the checkout folder: %w", err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s %q not found in the repository", field, rel)
		}
		return "", fmt.Errorf("%s %q: %w", field, rel, err)
	}
	if r, err := filepath.Rel(realRoot, real); err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return "", fmt.Errorf("%s %q leaves the repository through a symbolic link: want a path inside it", field, rel)
	}
	return real, nil
}

// stalePlan reports whether an apply failed because its saved plan no longer matches the state
// (Terraform and OpenTofu both say "Saved plan is stale"): the state changed after the plan.
func stalePlan(err error) bool {
	return strings.Contains(err.Error(), "Saved plan is stale")
}
