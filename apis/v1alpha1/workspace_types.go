package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons written on a Workspace, as upstream Magos writes them.
const (
	ReasonAwaitingRollout          = "AwaitingRollout"
	ReasonConfigurationChanged     = "ConfigurationChanged"
	ReasonScheduledReconcile       = "ScheduledReconcile"
	ReasonRetryApply               = "RetryApply"
	ReasonRetryPlan                = "RetryPlan"
	ReasonNewRevisionDetected      = "NewRevisionDetected"
	ReasonManualReconcileRequested = "ManualReconcileRequested"
	ReasonPlanJobCreated           = "PlanJobCreated"
	ReasonPlanning                 = "Planning"
	ReasonPlanFailed               = "PlanFailed"
	ReasonPolicyViolation          = "PolicyViolation"
	ReasonPlanSucceeded            = "PlanSucceeded"
	ReasonApplyJobCreated          = "ApplyJobCreated"
	ReasonApplying                 = "Applying"
	ReasonApplyFailed              = "ApplyFailed"
	ReasonApplySucceeded           = "ApplySucceeded"
	ReasonReconcileError           = "ReconcileError"
	ReasonDeleting                 = "Deleting"
	ReasonDestroying               = "Destroying"
	// ReasonDestroyPending (Magos Fleet, not upstream): a deleted Workspace under a hub has
	// minted its destroy run and waits for the hub's grant of that run before destroying.
	ReasonDestroyPending = "DestroyPending"
	// ReasonPlanStale (Magos Fleet, not upstream): the apply refused the run's saved plan
	// because the state changed since it was planned; nothing was applied, and a new run plans
	// again.
	ReasonPlanStale     = "PlanStale"
	ReasonDestroyFailed = "DestroyFailed"
	// ReasonNoPolicyMatched (Magos Fleet, not upstream), with phase ValidationFailed: the
	// effective policySelector is not empty but selects no ValidatingPolicy (a typo must never
	// run a plan unchecked). The message names the selector and whose it is. Nothing runs.
	ReasonNoPolicyMatched = "NoPolicyMatched"
	// ReasonMandatoryPolicyMissing (Magos Fleet, not upstream), with phase ValidationFailed: a
	// policy of the agent's mandatory set does not exist in the cluster. Nothing runs.
	ReasonMandatoryPolicyMissing = "MandatoryPolicyMissing"
)

// Why a policy is in status.policies.
const (
	// PolicySourceSelector: the effective policySelector (the Workspace's, else its
	// Project's) selected the policy.
	PolicySourceSelector = "Selector"
	// PolicySourceMandatory: the agent's mandatory policy set names the policy; it runs for
	// every Workspace of the cluster, whatever the selector.
	PolicySourceMandatory = "Mandatory"
)

// MaxEvaluatedPolicies is the most policies one plan is checked against (status.policies).
const MaxEvaluatedPolicies = 128

// Run triggers recorded in status.currentRunTrigger.
const (
	TriggerUnknown       = "unknown"
	TriggerInitial       = "initial"
	TriggerConfiguration = "configuration"
	TriggerManual        = "manual"
	TriggerScheduled     = "scheduled"
	TriggerRevision      = "revision"
	TriggerRetry         = "retry"
	// TriggerDeletion (Magos Fleet, not upstream): the destroy run of a deleted Workspace with
	// spec.destroyOnDelete.
	TriggerDeletion = "deletion"
	// TriggerDrift (Magos Fleet, not upstream): a drift check (spec.driftDetection), recorded in
	// status.runs; it plans the applied commit and never applies.
	TriggerDrift = "drift"
)

// Binaries a Workspace can run.
const (
	BinaryOpenTofu  = "tofu"
	BinaryTerraform = "terraform"
)

// DefaultServiceAccountName is the ServiceAccount plan and apply Jobs run as by default.
const DefaultServiceAccountName = "magos-job"

// ProjectReference names the Project a Workspace belongs to. On a spoke it names the hub
// Project of that name in the hub namespace of the same name as the Workspace's namespace.
type ProjectReference struct {
	// Name of the Project.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// JobOverrides tunes the plan or the apply Job of a run.
type JobOverrides struct {
	// Annotations for the Job's Pod; they win over spec.annotations.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// TimeoutSeconds bounds the run (the Job's activeDeadlineSeconds). Default 86400.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=604800
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
}

// Source is where the root module comes from.
type Source struct {
	// RepoURL is the git repository: https://, http://, ssh://, git:// or file:// URL, or
	// scp-style user@host:path.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?|ssh|git|file)://.+$') || self.matches('^[A-Za-z0-9._-]+@[^:/]+:.+$')",message="repoURL must be an https://, http://, ssh://, git:// or file:// URL, or scp-style user@host:path"
	RepoURL string `json:"repoURL"`

	// TargetRevision is the branch, tag or commit to run.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	TargetRevision string `json:"targetRevision"`

	// Path of the root module inside the repository.
	// +kubebuilder:default="."
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && self != '..' && !self.startsWith('../') && !self.contains('/../') && !self.endsWith('/..')",message="path must be relative to the repository root and must not leave it"
	Path string `json:"path,omitempty"`
}

// TerraformSpec selects the binary and its inputs.
// +kubebuilder:validation:XValidation:rule="has(self.version) && self.version.size() > 0",message="terraform.version is required: the exact OpenTofu/Terraform version to run, for example 1.10.6"
type TerraformSpec struct {
	// Binary is the program to run: tofu (OpenTofu, the default) or terraform.
	// +kubebuilder:default=tofu
	// +kubebuilder:validation:Enum=tofu;terraform
	// +optional
	Binary string `json:"binary,omitempty"`

	// Version is the exact version to run (for example 1.10.6), required as upstream requires
	// it: the version is part of the change, so an agent upgrade never swaps the binary under
	// a Workspace's state. The agent refuses to run a version it does not have.
	// (The schema leaves it optional so that the TerraformSpec rule, which says so clearly,
	// is the one to refuse it.)
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)?$`
	Version string `json:"version"`

	// TfvarsPath is a .tfvars file, relative to the repository root.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && self != '..' && !self.startsWith('../') && !self.contains('/../') && !self.endsWith('/..')",message="tfvarsPath must be relative to the repository root and must not leave it"
	TfvarsPath string `json:"tfvarsPath,omitempty"`
}

// WorkspaceSpec is one root module, planned and applied where the Workspace lives.
type WorkspaceSpec struct {
	// ProjectRef is the Project this Workspace belongs to.
	ProjectRef ProjectReference `json:"projectRef"`

	// AutoApply applies a successful plan without waiting for magosproject.io/approved.
	// +kubebuilder:default=true
	// +optional
	AutoApply *bool `json:"autoApply,omitempty"`

	// Annotations for the Pods of plan and apply Jobs.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// Plan tunes plan Jobs.
	// +optional
	Plan *JobOverrides `json:"plan,omitempty"`

	// Apply tunes apply Jobs.
	// +optional
	Apply *JobOverrides `json:"apply,omitempty"`

	// Source is the repository, revision and path of the root module.
	Source Source `json:"source"`

	// Terraform selects the binary, its version and a tfvars file.
	Terraform TerraformSpec `json:"terraform"`

	// Validation overrides the Project's policy selection when policySelector is set.
	// +optional
	Validation *ValidationSpec `json:"validation,omitempty"`

	// ServiceAccountName is the identity of plan and apply Jobs.
	// +kubebuilder:default=magos-job
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// VariableSetRefs are VariableSets (in this namespace) applied after the Project's, in order;
	// a later set wins over an earlier one.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	VariableSetRefs []LocalObjectReference `json:"variableSetRef,omitempty"`

	// DestroyOnDelete runs a destroy before a deleted Workspace lets go.
	// +optional
	DestroyOnDelete bool `json:"destroyOnDelete,omitempty"`

	// RunHistory (Magos Fleet, not upstream) says how many runs the Workspace keeps a record of.
	// +optional
	RunHistory *RunHistorySpec `json:"runHistory,omitempty"`

	// DriftDetection (Magos Fleet, not upstream) checks on a schedule whether the real world
	// still matches the commit the Workspace last applied: a plan of that commit that needs no
	// grant and never applies. Its result is status.drift. Unset: no checks.
	// +optional
	DriftDetection *DriftDetectionSpec `json:"driftDetection,omitempty"`
}

// DriftDetectionSpec says how often a Workspace checks for drift.
type DriftDetectionSpec struct {
	// Interval between two checks, a Go duration such as "30m" or "6h" (at least 1m, at most
	// 720h). A check also runs soon after each apply.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('720h')",message="driftDetection.interval must be a duration from 1m to 720h"
	Interval metav1.Duration `json:"interval"`
}

// Results of a drift check (status.drift.result).
const (
	// DriftResultChecking: a check runs now (status.drift.checkingRunID).
	DriftResultChecking = "Checking"
	// DriftResultNone: the last check's plan of the applied commit changes nothing.
	DriftResultNone = "NoDrift"
	// DriftResultDrifted: the last check's plan of the applied commit would change resources:
	// the real world no longer matches it.
	DriftResultDrifted = "Drifted"
	// DriftResultFailed: the last check could not plan (status.drift.message says why); whether
	// the Workspace drifted is not known.
	DriftResultFailed = "Failed"
)

// Reasons of the Events a drift check records.
const (
	// ReasonDriftDetected: on a Workspace, a Warning Event: a check found drift where the last
	// one did not. On a Rollout, the reason while the current step's drift is block and
	// Workspaces of it drifted (the message names them), and a Warning Event naming them (step
	// drift warn or block).
	ReasonDriftDetected = "DriftDetected"
	// ReasonDriftResolved (an Event): a check found no drift where the last one did.
	ReasonDriftResolved = "DriftResolved"
	// ReasonDriftCheckFailed (a Warning Event): a check could not plan.
	ReasonDriftCheckFailed = "DriftCheckFailed"
)

// DefaultRunHistoryLimit is how many runs a Workspace keeps when spec.runHistory.limit is unset.
const DefaultRunHistoryLimit = 10

// MaxRunHistoryLimit is the most runs a Workspace can keep.
const MaxRunHistoryLimit = 50

// RunHistorySpec tunes a Workspace's run history: status.runs, and the Secrets holding the
// plan text and log of each operation of those runs.
type RunHistorySpec struct {
	// Limit is how many runs are kept, newest first (default 10). 0 keeps none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	Limit *int32 `json:"limit,omitempty"`
	// CopyToHub says whether the agent copies the plan text and log of each kept operation to
	// the Workspace's cluster namespace on the hub (default true), so that readers of the hub
	// can see them without credentials to this cluster. false keeps them in this cluster only;
	// copies made before are deleted from the hub.
	// +optional
	CopyToHub *bool `json:"copyToHub,omitempty"`
}

// CopiesRunOutputToHub reports whether the agent copies the Workspace's run output (plan text
// and log) to the hub.
func (s *WorkspaceSpec) CopiesRunOutputToHub() bool {
	return s.RunHistory == nil || s.RunHistory.CopyToHub == nil || *s.RunHistory.CopyToHub
}

// HistoryLimit is how many runs the Workspace keeps a record of.
func (s *WorkspaceSpec) HistoryLimit() int {
	if s.RunHistory == nil || s.RunHistory.Limit == nil {
		return DefaultRunHistoryLimit
	}
	return int(min(max(*s.RunHistory.Limit, 0), MaxRunHistoryLimit))
}

// AutoApplies reports whether a successful plan is applied without approval.
func (s *WorkspaceSpec) AutoApplies() bool { return s.AutoApply == nil || *s.AutoApply }

// PolicyViolation is one failed policy rule.
type PolicyViolation struct {
	// Policy is the name of the violated policy.
	Policy string `json:"policy"`
	// Message explains the violation.
	Message string `json:"message"`
}

// EvaluatedPolicy is a policy a run's plan is checked against.
type EvaluatedPolicy struct {
	// Name of the ValidatingPolicy (policies.kyverno.io/v1, cluster-scoped).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Source is why it runs: Selector (the effective policySelector selects it) or Mandatory
	// (the agent's mandatory policy set names it; a policy that is both is Mandatory).
	// +kubebuilder:validation:Enum=Selector;Mandatory
	Source string `json:"source"`
}

// ResourceChanges counts the changes of a plan.
type ResourceChanges struct {
	Add     int32 `json:"add"`
	Change  int32 `json:"change"`
	Destroy int32 `json:"destroy"`
	// DriftReverted is, of the changes, how many put back what changed outside tofu since the
	// last apply (the plan's refresh found them drifted); the rest is the change planned.
	// +optional
	DriftReverted int32 `json:"driftReverted,omitempty"`
}

// Results of a run's policy check (RunRecord.Policy).
const (
	// PolicyResultPassed: the plan was checked against at least one policy and broke none.
	PolicyResultPassed = "Passed"
	// PolicyResultViolated: the plan broke at least one policy rule.
	PolicyResultViolated = "Violated"
	// PolicyResultNotChecked: no policy applied to the plan, or the run ended before a plan.
	PolicyResultNotChecked = "NotChecked"
)

// MaxAppliedRevisions is how many commits status.appliedRevisions keeps.
const MaxAppliedRevisions = 10

// AppliedRevisions are the commits a Workspace applied from one source, oldest first.
type AppliedRevisions struct {
	// Source is the repository and ref the commits are of, in their canonical spelling
	// ("<repository>@<ref>", see docs/rollout-strategies.md): the list starts again when
	// spec.source names another repository or ref.
	Source string `json:"source"`
	// Commits are the commit SHAs applied, oldest first, each once: a commit applied again
	// moves to the end. At most 10.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Commits []string `json:"commits,omitempty"`
}

// RunRecord is what a Workspace remembers of one run (status.runs).
type RunRecord struct {
	// RunID identifies the run (YYYYMMDDTHHMMSS-<8 hex>).
	RunID string `json:"runID"`
	// Trigger says what started it (status.currentRunTrigger then).
	// +optional
	Trigger string `json:"trigger,omitempty"`
	// Revision is the commit it planned (and applied).
	// +optional
	Revision string `json:"revision,omitempty"`
	// Generation is the Workspace's spec generation it ran for.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// StartedAt is when its plan started (or when it failed, for a run that never ran).
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when its last operation ended; unset while an operation runs.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Phase and Reason are where the run stands or ended (the Workspace's phase then).
	Phase Phase `json:"phase"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the Workspace's message then.
	// +optional
	Message string `json:"message,omitempty"`
	// ResourceChanges of its plan.
	// +optional
	ResourceChanges *ResourceChanges `json:"resourceChanges,omitempty"`
	// PlanDigest of its plan (status.planDigest).
	// +optional
	PlanDigest string `json:"planDigest,omitempty"`
	// Policy is the result of the policy check: Passed, Violated or NotChecked.
	// +optional
	Policy string `json:"policy,omitempty"`
	// PolicyViolations counts the broken rules.
	// +optional
	PolicyViolations int32 `json:"policyViolations,omitempty"`
	// Operations are the plan and apply of the run that ran, in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	Operations []RunOperation `json:"operations,omitempty"`
}

// RunOperation is one operation (plan or apply) of a recorded run.
type RunOperation struct {
	// Operation is plan or apply.
	Operation string `json:"operation"`
	// Outcome is how it ended: Succeeded, Failed or PolicyViolation.
	Outcome string `json:"outcome"`
	// StartedAt and FinishedAt, when known.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// OutputSecret is the Secret, in the Workspace's namespace, holding its log (and, for a plan,
	// its plan text); empty when nothing was kept.
	// +optional
	OutputSecret string `json:"outputSecret,omitempty"`
}

// DriftStatus is what the last drift check found: a plan of the commit the Workspace last
// applied, made without a grant and never applied.
type DriftStatus struct {
	// Result of the last check: Checking (the first check runs), NoDrift, Drifted or Failed.
	// +kubebuilder:validation:Enum=Checking;NoDrift;Drifted;Failed
	Result string `json:"result"`
	// Drifted is true when the last check's plan would change resources (Result Drifted).
	// +optional
	Drifted bool `json:"drifted,omitempty"`
	// Revision is the commit the last check planned: status.observedRevision then. A check of
	// another commit than the one applied now says nothing about it.
	// +optional
	Revision string `json:"revision,omitempty"`
	// CheckedAt is when the last check ended.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// RunID identifies the last check's run (recorded in status.runs with trigger drift, its
	// plan text in the Secret the record names).
	// +optional
	RunID string `json:"runID,omitempty"`
	// ResourceChanges counts what the last check's plan would add, change and destroy to put
	// the real world back to the applied commit.
	// +optional
	ResourceChanges *ResourceChanges `json:"resourceChanges,omitempty"`
	// PlanDigest is the digest of the last check's plan (like status.planDigest): two checks
	// with the same digest found the same drift.
	// +optional
	PlanDigest string `json:"planDigest,omitempty"`
	// Message says why the last check failed.
	// +optional
	Message string `json:"message,omitempty"`
	// CheckingRunID is the run ID of the check that runs now; empty when none runs.
	// +optional
	CheckingRunID string `json:"checkingRunID,omitempty"`
	// CheckingSince is when the running check started.
	// +optional
	CheckingSince *metav1.Time `json:"checkingSince,omitempty"`
}

// DriftedAt reports whether the last drift check found drift of revision: it checked that
// commit and its plan would change resources.
func (d *DriftStatus) DriftedAt(revision string) bool {
	return d != nil && d.Drifted && revision != "" && d.Revision == revision
}

// WorkspaceOrigin says where a mirrored Workspace lives. Set only on the hub's mirrors.
type WorkspaceOrigin struct {
	// Cluster is the registered name of the spoke.
	Cluster string `json:"cluster"`
	// Namespace of the Workspace in the spoke.
	Namespace string `json:"namespace"`
	// Name of the Workspace in the spoke.
	Name string `json:"name"`
	// UID of the Workspace in the spoke.
	// +optional
	UID string `json:"uid,omitempty"`
	// Generation of the spoke Workspace's spec that this mirror reflects.
	Generation int64 `json:"generation"`
}

// WorkspaceStatus is the observed state of a Workspace.
type WorkspaceStatus struct {
	// ObservedGeneration is the spec generation the phase describes: the generation the
	// current run was minted for (written with phase Pending), so a run always describes one
	// spec. A spec change while the run waits for its grant or approval mints a new run.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is where the Workspace is in its life cycle.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Reason is a CamelCase word for why it is in that phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a sentence for a human.
	// +optional
	Message string `json:"message,omitempty"`

	// ObservedRevision is the commit SHA last applied.
	// +optional
	ObservedRevision string `json:"observedRevision,omitempty"`

	// CurrentRevision is the commit SHA the current run plans and applies.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`

	// AppliedRevisions (Magos Fleet, not upstream) are the commits of spec.source this
	// Workspace applied, in the order it applied them. The hub reads the order of commits from
	// here rather than from any clock or from its own memory, so that a Rollout that lost its
	// record (deleted and created again, or restored from a backup) never takes the Workspace's
	// region back to a commit it applied before its last one.
	// +optional
	AppliedRevisions *AppliedRevisions `json:"appliedRevisions,omitempty"`

	// LastReconcileTime is when the status last changed.
	// +optional
	LastReconcileTime *metav1.Time `json:"lastReconcileTime,omitempty"`
	// NextReconcileTime is the next scheduled re-plan.
	// +optional
	NextReconcileTime *metav1.Time `json:"nextReconcileTime,omitempty"`
	// ObservedReconcileInterval is the interval NextReconcileTime was computed with.
	// +optional
	ObservedReconcileInterval string `json:"observedReconcileInterval,omitempty"`

	// PolicyViolations of the last plan.
	// +optional
	// +listType=atomic
	PolicyViolations []PolicyViolation `json:"policyViolations,omitempty"`

	// Policies (Magos Fleet, not upstream) are the ValidatingPolicies the current run's plan is
	// checked against, sorted by name: those the effective policySelector selects and the
	// agent's mandatory ones. Written when the plan starts, cleared when a new run is minted;
	// empty while no plan of the run started (a run that failed before its plan, for example
	// NoPolicyMatched, lists none).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Policies []EvaluatedPolicy `json:"policies,omitempty"`

	// ResourceChanges of the last plan.
	// +optional
	ResourceChanges *ResourceChanges `json:"resourceChanges,omitempty"`

	// CurrentRunID identifies the current run (YYYYMMDDTHHMMSS-<8 hex>); plan and apply share it.
	// A grant names the run it allows.
	// +optional
	CurrentRunID string `json:"currentRunID,omitempty"`
	// CurrentRunTrigger says what started the current run.
	// +optional
	CurrentRunTrigger string `json:"currentRunTrigger,omitempty"`
	// CurrentRunFor is a short digest of the Workspace's labels and spec.projectRef when the
	// current run was minted: with observedGeneration, what the run (and so its grant) was
	// decided for. While the run waits (Pending, or Planned awaiting approval) a Workspace whose
	// labels, projectRef or generation no longer match gets a new run (ConfigurationChanged),
	// and a grant for the old run is then stale.
	// +optional
	CurrentRunFor string `json:"currentRunFor,omitempty"`
	// PlannedInputs is a short digest of what the current run's plan was made from: repository,
	// commit, path, tfvarsPath, binary, version, and the variables and environment of its
	// VariableSets (literal values, sensitive ones included; Secret and ConfigMap values by
	// reference). The apply runs only if its own inputs have the same digest; otherwise the run
	// is abandoned for a new one (ConfigurationChanged), which plans again under a new grant. The
	// digest is keyed (12 hex characters of an HMAC-SHA256 under a key the agent keeps in a
	// Secret of its own namespace): without the key it reveals nothing of the values, and the
	// digests of different runs are unrelated.
	// +optional
	PlannedInputs string `json:"plannedInputs,omitempty"`
	// PlanDigest is a short digest of the current run's plan (12 hex characters, keyed like
	// plannedInputs): everything the apply would do, from the plan file's JSON rendering without
	// its timestamp. Two plans with the same digest make the same changes. A step's approval
	// names the digests it approves, and an apply grant bound to a digest
	// (magosproject.io/granted-plan) applies only that plan. Set once the plan succeeded.
	// +optional
	PlanDigest string `json:"planDigest,omitempty"`
	// PlanOnly is true when the current run was granted its plan only (its step requires
	// approval): its apply needs a grant of its own, for this run, that allows the apply. A run
	// granted in full applies whatever grant it holds later, as it always did.
	// +optional
	PlanOnly bool `json:"planOnly,omitempty"`

	// Runs (Magos Fleet, not upstream) are the records of the Workspace's last runs, newest
	// first: at most spec.runHistory.limit of them. The plan text and log of each operation are
	// in the Secrets the record names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	Runs []RunRecord `json:"runs,omitempty"`

	// Drift (Magos Fleet, not upstream) is the result of the last drift check
	// (spec.driftDetection), and the check running now.
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`

	// Verification is the verification of the current run's apply, when the step that granted
	// the apply asks for one (the Rollout's steps[].verification).
	// +optional
	Verification *VerificationStatus `json:"verification,omitempty"`

	// Origin is set on the hub's mirrors: where the Workspace really lives.
	// +optional
	Origin *WorkspaceOrigin `json:"origin,omitempty"`

	// Conditions: Ready, and Degraded while non-Terraform errors are being retried.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Workspace is one root module (repository + path + revision) planned and applied in the
// cluster where it lives.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="Workspace names must be at most 63 characters: the name is a label value on the Jobs that run it"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.origin.cluster`,priority=0
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.observedRevision`
// +kubebuilder:printcolumn:name="Drift",type=string,JSONPath=`.status.drift.result`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Workspace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   WorkspaceSpec   `json:"spec"`
	Status WorkspaceStatus `json:"status,omitempty"`
}

// WorkspaceList is a list of Workspaces.
//
// +kubebuilder:object:root=true
type WorkspaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Workspace `json:"items"`
}

// Results of a verification (status.verification.result).
const (
	// VerificationRunning: the checks run (the Workspace's phase is Verifying).
	VerificationRunning = "Running"
	// VerificationPassed: every check passed.
	VerificationPassed = "Passed"
	// VerificationFailed: a check failed (the Workspace's phase is Failed with reason
	// VerificationFailed).
	VerificationFailed = "Failed"
)

// ReasonVerificationFailed: the apply succeeded, and a check of the step's verification failed.
const ReasonVerificationFailed = "VerificationFailed"

// VerificationStatus is the verification of one run's apply.
type VerificationStatus struct {
	// RunID is the run whose apply is verified.
	RunID string `json:"runID"`
	// Spec is the verification, as the grant of the apply carried it.
	Spec StepVerification `json:"spec"`
	// Result is Running, Passed or Failed.
	// +optional
	// +kubebuilder:validation:Enum=Running;Passed;Failed
	Result string `json:"result,omitempty"`
	// Message says what failed (the expression's value or error, the Job's exit or timeout).
	// +optional
	Message string `json:"message,omitempty"`
	// StartedAt and FinishedAt are when the checks started and ended.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}
