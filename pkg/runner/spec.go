// Package runner is what executes one run of a Workspace: clone the repository at the exact
// commit, init, plan (plan JSON, then policies) or apply the saved plan, or destroy, and report
// the result. The same code runs in a Kubernetes Job (production) and as a child process of
// the agent (development and tests): see Main.
//
// The controller hands the runner a Spec (JSON, in the MAGOS_RUN_SPEC environment variable)
// and reads back a Result (JSON) from the result file, which in a Job is the container's
// termination message (/dev/termination-log). Secrets never travel in the Spec: they reach the
// runner as environment variables (valueFrom in a Job, resolved by the agent for a local run).
package runner

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/magosfleet/magos/pkg/policy"
)

// Environment variables of the runner protocol.
const (
	// EnvSpec holds the Spec as JSON.
	EnvSpec = "MAGOS_RUN_SPEC"
	// EnvResultFile is where the Result is written (default /dev/termination-log).
	EnvResultFile = "MAGOS_RESULT_FILE"
	// EnvHCLVariablePrefix prefixes input variables whose value is an HCL expression:
	// MAGOS_HCL_VAR_<name>=<expression>. Plain string variables use Terraform's own TF_VAR_<name>.
	EnvHCLVariablePrefix = "MAGOS_HCL_VAR_"
	// Git credentials, as upstream names them.
	EnvGitUsername      = "GIT_USERNAME"
	EnvGitPassword      = "GIT_PASSWORD"
	EnvGitSSHPrivateKey = "GIT_SSH_PRIVATE_KEY"
	// EnvGitSSHKnownHosts holds known_hosts lines; when set, SSH host keys are verified.
	EnvGitSSHKnownHosts = "GIT_SSH_KNOWN_HOSTS"
)

// DefaultResultFile is the Kubernetes termination message path.
const DefaultResultFile = "/dev/termination-log"

// MaxResultBytes is the most a termination message can hold; Result.Encode stays within it.
const MaxResultBytes = 4096

// Operation is what a run does.
type Operation string

// Operations.
const (
	OperationPlan    Operation = "plan"
	OperationApply   Operation = "apply"
	OperationDestroy Operation = "destroy"
	// OperationVerify is the check of a step's verification that runs after an apply, under
	// the apply's run ID: the user's container (or, from the LocalLauncher, command), not the
	// runner. Its Result comes from how the check exited.
	OperationVerify Operation = "verify"
)

// Spec is the input of one run.
type Spec struct {
	// Operation is plan, apply or destroy.
	Operation Operation `json:"operation"`
	// RunID is the Workspace's status.currentRunID; plan and apply of one run share it.
	RunID string `json:"runID"`
	// Namespace and Name of the Workspace (for messages and the state key).
	Namespace string `json:"namespace"`
	Name      string `json:"name"`

	// RepoURL is the git repository.
	RepoURL string `json:"repoURL"`
	// Revision is the commit SHA to check out (the controller resolves refs before a run).
	Revision string `json:"revision"`
	// Path of the root module in the repository.
	Path string `json:"path"`
	// TfvarsPath is a .tfvars file relative to the repository root ("" for none).
	TfvarsPath string `json:"tfvarsPath,omitempty"`

	// Binary is tofu or terraform; Version the exact version wanted ("" for any).
	Binary  string `json:"binary"`
	Version string `json:"version,omitempty"`
	// BinaryPath overrides where the binary is looked up (default: PATH).
	BinaryPath string `json:"binaryPath,omitempty"`

	// PlanFile is where plan writes the saved plan and apply reads it.
	PlanFile string `json:"planFile"`

	// Backend is the state backend used when the module configures none.
	Backend Backend `json:"backend"`

	// NoStateLock plans without taking the state lock: a drift check, which never writes state
	// and must not hold up a run that starts meanwhile.
	NoStateLock bool `json:"noStateLock,omitempty"`

	// Policies are evaluated against the plan JSON; any violation fails the plan. A policy
	// that cannot be evaluated is a violation (fail closed). A destroy under policies is
	// planned first (plan -destroy), its plan checked the same way, and only that plan applied.
	Policies []Policy `json:"policies,omitempty"`
}

// Backend is the state backend the runner configures when the module has none of its own.
type Backend struct {
	// Kubernetes stores state in a Secret of the Workspace's namespace (the default).
	Kubernetes *KubernetesBackend `json:"kubernetes,omitempty"`
	// LocalPath stores state in a local file (tests and development only).
	LocalPath string `json:"localPath,omitempty"`
}

// KubernetesBackend configures OpenTofu/Terraform's kubernetes backend.
type KubernetesBackend struct {
	// Namespace holds the state Secret.
	Namespace string `json:"namespace"`
	// SecretSuffix names the Secret (tfstate-default-<suffix>).
	SecretSuffix string `json:"secretSuffix"`
	// ConfigPath is a kubeconfig; empty uses the in-cluster config.
	ConfigPath string `json:"configPath,omitempty"`
}

// Policy is one ValidatingPolicy (policies.kyverno.io/v1, JSON mode), reduced to what the
// runner evaluates: Name, Variables, MatchConditions, Validations (CEL expressions over the plan
// JSON, the variable `object`; each must be true) and Error. It is defined by pkg/policy, which
// evaluates it.
type Policy = policy.Policy

// Validation is one CEL rule: Expression, Message, MessageExpression.
type Validation = policy.Validation

// Variable is a named CEL expression of a Policy, usable as `variables.<name>`.
type Variable = policy.Variable

// MatchCondition is a CEL expression that decides whether a Policy applies.
type MatchCondition = policy.MatchCondition

// Outcome is how a run ended.
type Outcome string

// Outcomes.
const (
	OutcomeSucceeded       Outcome = "Succeeded"
	OutcomeFailed          Outcome = "Failed"
	OutcomePolicyViolation Outcome = "PolicyViolation"
	// OutcomeStalePlan: the apply refused the saved plan because the state changed since it
	// was planned; nothing was applied, and a new plan is needed.
	OutcomeStalePlan Outcome = "StalePlan"
)

// Result is the output of one run.
type Result struct {
	Operation Operation `json:"operation"`
	RunID     string    `json:"runID"`
	Outcome   Outcome   `json:"outcome"`
	// Revision is the commit SHA that was checked out.
	Revision string `json:"revision,omitempty"`
	// HasChanges is true when the plan changes anything.
	HasChanges bool `json:"hasChanges,omitempty"`
	// Add, Change and Destroy count the plan's resource changes.
	Add     int32 `json:"add,omitempty"`
	Change  int32 `json:"change,omitempty"`
	Destroy int32 `json:"destroy,omitempty"`
	// DriftReverts counts, of those changes, the ones that put back what changed outside the
	// tool: their resource is in the plan's resource_drift (its refresh found it changed).
	DriftReverts int32 `json:"driftReverts,omitempty"`
	// PlanSHA256 is, for a plan, the SHA-256 (hex) of its JSON rendering (`tofu show -json`)
	// without the time it was made: what the apply of the plan file would do. The agent keys it
	// into status.planDigest; it never leaves the spoke.
	PlanSHA256 string `json:"planSHA256,omitempty"`
	// Violations of policies (Outcome PolicyViolation).
	Violations []Violation `json:"violations,omitempty"`
	// Message is a short human-readable summary (the error, for a failure).
	Message string `json:"message,omitempty"`
	// Outputs are, after a successful apply, the module's non-sensitive outputs by name (their
	// JSON values, as `tofu output -json` gives them): what a step's verification checks.
	Outputs map[string]json.RawMessage `json:"outputs,omitempty"`
	// OutputsDropped says the outputs did not fit in MaxResultBytes and were left out.
	OutputsDropped bool `json:"outputsDropped,omitempty"`
}

// Violation is one failed policy rule: Policy (its name) and Message.
type Violation = policy.Violation

// Encode renders the Result as JSON of at most MaxResultBytes. When it does not fit, the
// outputs are left out first (OutputsDropped, and the message says how big the result was with
// them); then violations beyond what fits are dropped (the count stays in the message) and the
// messages shortened.
func (r Result) Encode() ([]byte, error) {
	for {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if len(b) <= MaxResultBytes {
			return b, nil
		}
		switch {
		case len(r.Outputs) > 0:
			r.Outputs, r.OutputsDropped = nil, true
			note := fmt.Sprintf("outputs left out: %d bytes exceed the result's %d bytes", len(b), MaxResultBytes)
			if r.Message == "" {
				r.Message = note
			} else {
				r.Message = fmt.Sprintf("%s (%s)", r.Message, note)
			}
		case len(r.Violations) > 1:
			dropped := len(r.Violations) / 2
			r.Violations = r.Violations[:len(r.Violations)-dropped]
			r.Message = fmt.Sprintf("%s (%d more violations not shown)", r.Message, dropped)
		case len(r.Message) > 512:
			r.Message = r.Message[:500] + " [truncated]"
		case len(r.Violations) == 1 && len(r.Violations[0].Message) > 512:
			r.Violations[0].Message = r.Violations[0].Message[:500] + " [truncated]"
		default:
			return nil, fmt.Errorf("result of %d bytes does not fit a termination message", len(b))
		}
	}
}

// DecodeResult parses a Result written by Encode.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, fmt.Errorf("decoding run result: %w", err)
	}
	if r.Outcome == "" {
		return Result{}, fmt.Errorf("decoding run result: no outcome in %q", b)
	}
	return r, nil
}

// NewRunID mints a run ID: YYYYMMDDTHHMMSS-<8 lowercase hex>, UTC, upstream's format. Plan and
// apply of one run share it, and a grant names it. This is the one place run IDs are minted.
func NewRunID(now time.Time) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}
