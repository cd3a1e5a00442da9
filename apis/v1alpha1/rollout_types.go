package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Reasons written on a Rollout.
const (
	ReasonNoSteps            = "NoSteps"
	ReasonNoWorkspacesFound  = "NoWorkspacesFound"
	ReasonRolloutCompleted   = "RolloutCompleted"
	ReasonStepFailed         = "StepFailed"
	ReasonLevelProgressing   = "LevelProgressing"
	ReasonWaitingForClusters = "WaitingForClusters"
	ReasonPaused             = "Paused"
	ReasonInvalidSelector    = "InvalidSelector"
	// ReasonRollingBack: spec.rollback rolls its commits back out, step by step in reverse
	// order.
	ReasonRollingBack = "RollingBack"
	// ReasonRolledBack: every step is back at the commits spec.rollback names.
	ReasonRolledBack = "RolledBack"
	// ReasonInvalidVerification: a step's verification expression does not compile.
	ReasonInvalidVerification = "InvalidVerification"
	// ReasonSoaking: the current step is all Applied and soaks for its minSuccessTime before
	// the next step starts.
	ReasonSoaking = "Soaking"
	// ReasonOutsideChangeWindow: the Rollout waits for its next change window.
	ReasonOutsideChangeWindow = "OutsideChangeWindow"
	// ReasonInvalidChangeWindow: a change window's schedule or time zone cannot be read.
	ReasonInvalidChangeWindow = "InvalidChangeWindow"
	// ReasonProgressDeadlineExceeded: the current step has not progressed for
	// spec.progressDeadline (condition Progressing=False, and an Event).
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonProgressing: condition Progressing=True.
	ReasonProgressing = "Progressing"
	// ReasonFailureTolerated (an Event): Workspaces of a step failed within its maxFailures,
	// and the Rollout goes on.
	ReasonFailureTolerated = "FailureTolerated"
	// ReasonAwaitingApproval: the current step requires approval, its plans are ready, and no
	// valid approval names them (magosctl rollout approve).
	ReasonAwaitingApproval = "AwaitingApproval"
	// ReasonApproved (an Event): an approval of the current step's plans was accepted and their
	// applies are granted.
	ReasonApproved = "Approved"
	// ReasonApprovalVoided (an Event): a plan of the step changed after its approval, which no
	// longer holds; the step awaits approval again.
	ReasonApprovalVoided = "ApprovalVoided"
	// ReasonApprovalRejected: the current step requires approval and a person rejected the
	// plans it waits with (spec.rejections): nothing of the step applies until a new plan asks
	// for approval again or someone approves these plans after all.
	ReasonApprovalRejected = "ApprovalRejected"
	// ReasonPreviewing: with spec.planFirst, Workspaces of the current or a later step have not
	// planned the change yet, so the current step applies nothing new.
	ReasonPreviewing = "Previewing"
	// ReasonPreviewFailed: with spec.planFirst, more Workspaces of a later step failed to plan
	// the change or broke a policy than the step's maxFailures: nothing applies.
	ReasonPreviewFailed = "PreviewFailed"
	// ReasonPlanChanged (an Event): with spec.planFirst, a Workspace planned again after the
	// preview, and its new plan differs from the one previewed.
	ReasonPlanChanged = "PlanChanged"
)

// Step phases in status.steps.
const (
	StepPending     = "Pending"
	StepProgressing = "Progressing"
	StepCompleted   = "Completed"
	StepFailed      = "Failed"
	StepWaiting     = "Waiting"
	// StepSoaking: every Workspace of the step is Applied (or failed within maxFailures), and
	// the step waits out its minSuccessTime.
	StepSoaking = "Soaking"
	// StepAwaitingApproval: the step requires approval, and its plans wait for one.
	StepAwaitingApproval = "AwaitingApproval"
	// StepPreviewing: with spec.planFirst, the step waits for the fleet-wide preview before it
	// applies.
	StepPreviewing = "Previewing"
)

// Results of a plan in a step's preview (status.steps[].preview[].result).
const (
	// PreviewPending: the Workspace has not planned the change yet.
	PreviewPending = "Pending"
	// PreviewPlanned: the Workspace planned the change, and the plan waits or applies.
	PreviewPlanned = "Planned"
	// PreviewApplied: the Workspace applied the change.
	PreviewApplied = "Applied"
	// PreviewPolicyViolation: the Workspace's plan breaks a policy (ValidationFailed).
	PreviewPolicyViolation = "PolicyViolation"
	// PreviewFailed: the Workspace's last run failed.
	PreviewFailed = "Failed"
)

// StepDriftBlocked: the step's drift is block, and Workspaces of it drifted.
const StepDriftBlocked = "DriftBlocked"

// Values of spec.targets.
const (
	// TargetsDynamic: a step's Workspaces are those its selectors match at each decision.
	TargetsDynamic = "Dynamic"
	// TargetsFrozen: a step's Workspaces are recorded when a change starts.
	TargetsFrozen = "Frozen"
)

// RolloutStep selects the Workspaces of one step.
// +kubebuilder:validation:XValidation:rule="!has(self.clusterSelector) || has(self.clusterSelector.matchLabels) || has(self.clusterSelector.matchExpressions)",message="clusterSelector must not be empty: leave it out to select every cluster"
type RolloutStep struct {
	// Name of the step, unique within the Rollout.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Selector selects the step's Workspaces by label.
	Selector LabelSelector `json:"selector"`

	// ClusterSelector narrows the step to Workspaces in clusters whose registered labels match.
	// +optional
	ClusterSelector *LabelSelector `json:"clusterSelector,omitempty"`

	// MaxConcurrency is how many of the step's Workspaces may plan or apply at once, counted
	// across all clusters (a granted run that has not started counts): a number (at least 1) or
	// a percentage of the step's Workspaces ("25%", rounded down, at least 1). Unset: all.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="maxConcurrency must be a number of at least 1 or a percentage from 1% to 100%"
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`

	// MaxFailures is how many of the step's Workspaces may fail while the step still passes: a
	// number or a percentage of the step's Workspaces ("10%", rounded down). Beyond it the step
	// fails and the Rollout stops. Tolerated failures stay in status.steps[].failed and are
	// recorded in FailureTolerated Events. Unset: 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^([0-9]|[1-9][0-9]|100)%$')",message="maxFailures must be a number of at least 0 or a percentage from 0% to 100%"
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`

	// MinSuccessTime is how long the step soaks once all of its Workspaces are Applied for the
	// change (a Go duration such as "20s" or "1h"): the next step starts only when the soak ends
	// with every Workspace still Applied. A failure beyond maxFailures during the soak fails
	// the step; new work (a new commit or spec) ends the soak, which starts again once the
	// step is all Applied again. Unset: no soak.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('720h')",message="minSuccessTime must be a duration above 0s and at most 720h"
	MinSuccessTime *metav1.Duration `json:"minSuccessTime,omitempty"`

	// RequireApproval makes the step wait for a person: its Workspaces plan, and nothing of the
	// step applies until an approval in spec.approvals names the revision and digest of every
	// plan waiting (magosctl rollout approve ROLLOUT --step STEP writes one). A plan that changes
	// after the approval voids it, and the step awaits approval again.
	// +optional
	RequireApproval bool `json:"requireApproval,omitempty"`

	// Drift says what drift means for the step (a Workspace whose last drift check, see the
	// Workspace's spec.driftDetection, found that the real world no longer matches the commit
	// it applied): block (while the step is current and any of its Workspaces drifted, it
	// grants none of them a run that may apply, only plans (requireApproval, planFirst), keeps
	// the grants they hold and lets runs in flight finish, and waits with reason DriftDetected
	// naming them, until a check finds no drift or spec.driftAcceptances accepts that drift),
	// warn (a Warning Event DriftDetected, and the preview shows it; the step goes on) or
	// ignore. Default: warn.
	// +optional
	// +kubebuilder:validation:Enum=block;warn;ignore
	Drift string `json:"drift,omitempty"`

	// Verification proves each Workspace of the step healthy after its apply, before it counts
	// as done: the Workspace stays in phase Verifying while its checks run, becomes Applied when
	// they pass, and Failed with reason VerificationFailed when one fails, which counts against
	// maxFailures and halts the Rollout as a failed apply does. The soak (minSuccessTime) starts
	// once the step's Workspaces passed. Checks run only after an apply that a grant of this
	// step allowed, and once per run.
	// +optional
	Verification *StepVerification `json:"verification,omitempty"`
}

// StepVerification is what a step checks on each of its Workspaces after the apply: a CEL
// expression over the Workspace's outputs, a Job, or both (the expression first).
// +kubebuilder:validation:XValidation:rule="has(self.expression) || has(self.job)",message="verification needs an expression, a job, or both"
type StepVerification struct {
	// Expression is a CEL expression over `outputs` (the apply's non-sensitive outputs, by
	// name, as their JSON values) that must be true, such as
	// "outputs.healthy_replicas >= 3". An output it names that the module does not have fails
	// the check.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Expression string `json:"expression,omitempty"`
	// Job runs a container in the Workspace's own cluster and namespace, with the outputs as
	// environment; it passes when the container exits 0 within the timeout.
	// +optional
	Job *VerificationJob `json:"job,omitempty"`
}

// VerificationJob is a check run as a Kubernetes Job beside the Workspace. Its container gets,
// as environment, MAGOS_OUTPUTS (the outputs as one JSON object), OUTPUT_<NAME> per output
// (the name upper-cased, '-' as '_'; a string as is, other values as JSON), MAGOS_WORKSPACE,
// MAGOS_NAMESPACE, MAGOS_RUN_ID and MAGOS_REVISION.
type VerificationJob struct {
	// Image is the container image.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// Command is the container's entrypoint (default: the image's).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Command []string `json:"command,omitempty"`
	// Args are its arguments.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// Timeout bounds the check (a Go duration, at most 1h); a check still running then fails.
	// Default: 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('1h')",message="timeout must be a duration above 0s and at most 1h"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// DefaultVerificationTimeout bounds a verification Job whose timeout is unset.
const DefaultVerificationTimeout = 5 * time.Minute

// TimeoutOrDefault is the Job's timeout, defaulted.
func (j *VerificationJob) TimeoutOrDefault() time.Duration {
	if j == nil || j.Timeout == nil || j.Timeout.Duration <= 0 {
		return DefaultVerificationTimeout
	}
	return j.Timeout.Duration
}

// Values of a step's drift (RolloutStep.Drift).
const (
	// DriftBlock: the step waits while any of its Workspaces drifted.
	DriftBlock = "block"
	// DriftWarn: drift is reported (an Event, the preview), and the step goes on.
	DriftWarn = "warn"
	// DriftIgnore: drift is not reported by the Rollout.
	DriftIgnore = "ignore"
)

// DriftPolicy is the step's drift setting, defaulted: warn when unset.
func (s *RolloutStep) DriftPolicy() string {
	if s.Drift == "" {
		return DriftWarn
	}
	return s.Drift
}

// DriftAcceptance accepts one Workspace's drift, as found by one drift check: a step that
// blocks on drift lets the Workspace go on while its last check's plan has this digest. A new
// check that finds other drift blocks again.
type DriftAcceptance struct {
	// Workspace is the Workspace, as cluster/namespace/name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=400
	Workspace string `json:"workspace"`
	// Digest is the drift check's plan digest (the Workspace's status.drift.planDigest).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Digest string `json:"digest"`
	// AcceptedBy is the user who accepted it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	AcceptedBy string `json:"acceptedBy"`
	// AcceptedAt is when.
	AcceptedAt metav1.Time `json:"acceptedAt"`
}

// ApprovedPlan is one plan an approval names.
type ApprovedPlan struct {
	// Workspace is the Workspace, as cluster/namespace/name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=400
	Workspace string `json:"workspace"`
	// Revision is the commit the plan was made of.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision,omitempty"`
	// Digest is the plan's digest (the Workspace's status.planDigest).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Digest string `json:"digest"`
}

// StepApproval approves the plans of one step. Writing one needs the verb "approve" on the
// Rollout (rollouts, group magosproject.io) besides update, and approvedBy must be the writer's
// own user name: the magos-hub chart's admission policy enforces both.
type StepApproval struct {
	// Step is the step's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Step string `json:"step"`
	// Plans are the plans approved: every plan of the step waiting for approval must be one of
	// them, with the same revision and digest.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	Plans []ApprovedPlan `json:"plans"`
	// ApprovedBy is the user who approved.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ApprovedBy string `json:"approvedBy"`
	// ApprovedAt is when.
	ApprovedAt metav1.Time `json:"approvedAt"`
}

// StepRejection rejects the plans of one step that waits for approval: the step applies
// nothing and says who rejected them and why, until its plans change (a new commit or spec asks
// for approval again) or an approval replaces the rejection. Writing one needs the verb
// "approve" on the Rollout besides update, and rejectedBy must be the writer's own user name:
// the magos-hub chart's admission policy enforces both.
type StepRejection struct {
	// Step is the step's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Step string `json:"step"`
	// Plans are the plans rejected, as the step's status listed them when they were rejected.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	Plans []ApprovedPlan `json:"plans"`
	// Reason says why, in the rejecter's words.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
	// RejectedBy is the user who rejected them.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	RejectedBy string `json:"rejectedBy"`
	// RejectedAt is when.
	RejectedAt metav1.Time `json:"rejectedAt"`
}

// PlanStatus is a plan of a step that waits for approval.
type PlanStatus struct {
	// Workspace is the Workspace, as cluster/namespace/name.
	Workspace string `json:"workspace"`
	// Run is the run that planned it.
	// +optional
	Run string `json:"run,omitempty"`
	// Revision is the commit planned.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Digest is the plan's digest.
	Digest string `json:"digest"`
	// Add, Change and Destroy count the plan's resource changes.
	// +optional
	Add int32 `json:"add,omitempty"`
	// +optional
	Change int32 `json:"change,omitempty"`
	// +optional
	Destroy int32 `json:"destroy,omitempty"`
}

// PlanSummary is what a plan does, and its digest.
type PlanSummary struct {
	// Digest is the plan's digest (the Workspace's status.planDigest).
	// +optional
	Digest string `json:"digest,omitempty"`
	// Add, Change and Destroy count the plan's resource changes.
	// +optional
	Add int32 `json:"add,omitempty"`
	// +optional
	Change int32 `json:"change,omitempty"`
	// +optional
	Destroy int32 `json:"destroy,omitempty"`
	// DriftReverted is, of the plan's changes, how many revert drift (put back what changed
	// outside tofu since the last apply); the rest is the commit's own change.
	// +optional
	DriftReverted int32 `json:"driftReverted,omitempty"`
}

// PreviewPlan is one Workspace's plan of the change in a step's preview (spec.planFirst).
type PreviewPlan struct {
	// Workspace is the Workspace, as cluster/namespace/name.
	Workspace string `json:"workspace"`
	// Run is the Workspace's current run.
	// +optional
	Run string `json:"run,omitempty"`
	// Revision is the commit planned.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Result is Pending (not planned yet), Planned, Applied, PolicyViolation or Failed.
	Result string `json:"result"`
	// PlanSummary is the plan (empty while Pending).
	PlanSummary `json:",inline"`
	// PolicyViolations is the number of policy rules the plan breaks.
	// +optional
	PolicyViolations int32 `json:"policyViolations,omitempty"`
	// Drift is, when the Workspace's last drift check found drift at the commit it applied, that
	// drift: what a plan of the applied commit would put back, apart from the change.
	// +optional
	Drift *PlanSummary `json:"drift,omitempty"`
	// Previewed is the plan first previewed for this change, kept when the Workspace planned
	// again since (a stale plan, a spec change): while it plans again, and when its new plan
	// differs from the previewed one.
	// +optional
	Previewed *PlanSummary `json:"previewed,omitempty"`
}

// RolloutStrategy is the ordered list of steps.
type RolloutStrategy struct {
	// Steps run in order; the Workspaces of one step run in parallel.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(s, self.exists_one(t, t.name == s.name))",message="step names must be unique"
	// +listType=atomic
	Steps []RolloutStep `json:"steps"`
}

// ChangeWindow is a recurring span of time in which a Rollout may start runs.
type ChangeWindow struct {
	// Schedule is when each window opens, as a cron schedule of five fields (minute, hour, day of
	// month, month, day of week; "0 9 * * 1-5" is 09:00 on weekdays) or a descriptor such as
	// "@daily".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || self.split(' ').filter(f, f != '').size() == 5",message="schedule must be a cron schedule of five fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily"
	Schedule string `json:"schedule"`
	// Duration is how long each window stays open (a Go duration such as "2h").
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('8760h')",message="duration must be a duration above 0s and at most 8760h"
	Duration metav1.Duration `json:"duration"`
	// TimeZone is the IANA time zone the schedule is read in, such as "Europe/Paris". Default:
	// UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
}

// RolloutSpec promotes a change through the Workspaces of one Project, step by step.
type RolloutSpec struct {
	// ProjectRef is the Project (same namespace, same name as the Rollout).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ProjectRef string `json:"projectRef"`

	// Strategy is the ordered list of steps.
	Strategy RolloutStrategy `json:"strategy"`

	// Paused stops new grants; runs already granted finish.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// ProgressDeadline is how long the current step may go without progress (a Workspace of it
	// starting, applying or failing, or the step changing) before the Rollout says so: condition
	// Progressing=False with reason ProgressDeadlineExceeded, a Warning Event and the metric
	// magos_rollout_progress_deadline_exceeded. It does not stop the Rollout: it goes on when
	// the step progresses. Not counted while the Rollout is paused, soaking, failed or completed.
	// A Go duration such as "10m". Unset: no deadline.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="progressDeadline must be a duration above 0s"
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`

	// ChangeWindows, when set, are the only times the Rollout starts runs: outside every window
	// it grants nothing new (runs already started finish; grants not yet used are withdrawn, as
	// when paused), and status.nextWindowAt says when the next window opens. Unset: any time.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	ChangeWindows []ChangeWindow `json:"changeWindows,omitempty"`

	// Targets says when the Workspaces of each step are decided. Dynamic (the default): at every
	// decision, so a Workspace that appears joins its step at once, even a step that has passed
	// (the Rollout goes back to it). Frozen: each step's Workspaces are recorded when a change
	// starts (a new commit is rolled out, or the Rollout's spec changes) in status.steps[].targets;
	// a Workspace that appears later joins with the next change, and never slips into a step
	// that has passed.
	// +optional
	// +kubebuilder:validation:Enum=Dynamic;Frozen
	Targets string `json:"targets,omitempty"`

	// PlanFirst previews every change fleet-wide before anything applies: when a change
	// arrives (a new commit or spec), every Workspace of every step plans it without applying,
	// and status.steps[].preview shows, per Workspace, what it will add, change and destroy, or
	// that its plan breaks a policy or failed. The current step applies only once every
	// Workspace of it and of the later steps has planned (or failed), and each apply is bound to
	// the plan previewed (its digest). A Workspace that plans again before its step applies (a
	// new commit, a spec change, or a saved plan gone stale) shows the plan it previewed beside
	// the new one where they differ, and a step that requires approval asks for it again. More
	// failed previews in a later step than its maxFailures stop the Rollout before it applies
	// anything (PreviewFailed).
	// +optional
	PlanFirst bool `json:"planFirst,omitempty"`

	// Approvals approve the plans of steps that require approval, at most one per step. Written
	// by magosctl rollout approve; see StepApproval for who may write one.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.step == a.step))",message="at most one approval per step"
	// +listType=atomic
	Approvals []StepApproval `json:"approvals,omitempty"`

	// Rejections reject the plans of steps that require approval, at most one per step, each
	// with its reason. Written by magosctl rollout reject or the dashboard, which remove the
	// step's approval when they write one (and an approval written by them removes the step's
	// rejection); see StepRejection for who may write one.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.step == a.step))",message="at most one rejection per step"
	// +listType=atomic
	Rejections []StepRejection `json:"rejections,omitempty"`

	// DriftAcceptances accept the drift of Workspaces in steps whose drift is block, at most one
	// per Workspace (the API server refuses a second one). Written by magosctl rollout
	// accept-drift.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +listType=map
	// +listMapKey=workspace
	DriftAcceptances []DriftAcceptance `json:"driftAcceptances,omitempty"`

	// Rollback, when set, rolls the commits it names back out: every Workspace of a named source
	// that is not at its commit runs it again, step by step in reverse order (the last step
	// first), through the same grants, previews, approvals and verification as a change. The
	// Rollout holds the sources at those commits, whatever their refs point at, until Rollback
	// is removed; then it rolls the refs' newest commits out again in step order. Written by
	// magosctl rollout rollback, or by the hub when a step fails and onFailure is Rollback.
	// +optional
	Rollback *RolloutRollback `json:"rollback,omitempty"`

	// OnFailure is what the Rollout does when a step fails beyond its maxFailures: Halt (the
	// default: it stops and waits for a person) or Rollback (the hub writes spec.rollback with,
	// for each source, the newest commit every Workspace of it had applied before the one
	// being rolled out, and rolls it back out in reverse step order). A failure during a
	// rollback halts.
	// +optional
	// +kubebuilder:validation:Enum=Halt;Rollback
	OnFailure string `json:"onFailure,omitempty"`
}

// Values of spec.onFailure.
const (
	// OnFailureHalt: a failed step stops the Rollout.
	OnFailureHalt = "Halt"
	// OnFailureRollback: a failed step rolls the last commit every Workspace applied back out.
	OnFailureRollback = "Rollback"
)

// RolloutRollback names the commits a Rollout rolls back to.
type RolloutRollback struct {
	// Commits are the commits to roll back to, one per source the Rollout rolls out.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Commits []RollbackCommit `json:"commits"`
	// RequestedBy is who asked for the rollback (a user, or the hub for onFailure).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	RequestedBy string `json:"requestedBy"`
	// RequestedAt is when.
	RequestedAt metav1.Time `json:"requestedAt"`
	// Reason says why, for the Rollout's Events and status.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// RollbackCommit is the commit one source rolls back to.
type RollbackCommit struct {
	// RepoURL and TargetRevision name the source as Workspaces write it (spec.source); they
	// are compared in their canonical spelling.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	RepoURL string `json:"repoURL"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	TargetRevision string `json:"targetRevision,omitempty"`
	// Commit is the full commit SHA to roll back to.
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{40}|[0-9a-f]{64})$`
	Commit string `json:"commit"`
}

// StepStatus tells where one step stands.
type StepStatus struct {
	// Name of the step.
	Name string `json:"name"`
	// Phase of the step: Pending, Progressing, Previewing, Waiting, AwaitingApproval, Soaking,
	// Completed or Failed.
	Phase string `json:"phase"`
	// Matched is the number of Workspaces the step selects.
	Matched int32 `json:"matched"`
	// Applied is the number of them Applied for their current generation and revision.
	Applied int32 `json:"applied"`
	// Running is the number planning or applying.
	Running int32 `json:"running"`
	// Failed is the number Failed or ValidationFailed.
	Failed int32 `json:"failed"`
	// MaxFailures is the step's maxFailures resolved against the number it matched: failures
	// up to it are tolerated.
	// +optional
	MaxFailures int32 `json:"maxFailures,omitempty"`
	// MaxConcurrency is the step's maxConcurrency resolved against the number it matched
	// (unset: no limit).
	// +optional
	MaxConcurrency int32 `json:"maxConcurrency,omitempty"`
	// SucceededAt is when every Workspace of the step was last found Applied (or failed within
	// maxFailures) for the change; the step's soak runs from it. Unset while the step is not.
	// +optional
	SucceededAt *metav1.Time `json:"succeededAt,omitempty"`
	// SoakEndsAt is when the step's soak ends (SucceededAt plus minSuccessTime).
	// +optional
	SoakEndsAt *metav1.Time `json:"soakEndsAt,omitempty"`
	// Clusters the step's Workspaces live in.
	// +optional
	// +listType=atomic
	Clusters []string `json:"clusters,omitempty"`
	// Plans are, while the step awaits approval, the plans waiting for it (at most 1000).
	// +optional
	// +listType=atomic
	Plans []PlanStatus `json:"plans,omitempty"`
	// Preview is, with spec.planFirst, each Workspace's plan of the change being rolled out, in
	// Workspace order. The previews of all steps list at most 4000 Workspaces together, in step
	// order: PreviewOmitted counts those of the step left out.
	// +optional
	// +listType=atomic
	Preview []PreviewPlan `json:"preview,omitempty"`
	// PreviewOmitted is the number of the step's Workspaces its preview leaves out.
	// +optional
	PreviewOmitted int32 `json:"previewOmitted,omitempty"`
	// Approval is the approval the step's applies were granted under, while it holds.
	// +optional
	Approval *StepApproval `json:"approval,omitempty"`
	// Rejection is the rejection of the plans the step waits with, while it holds them back.
	// +optional
	Rejection *StepRejection `json:"rejection,omitempty"`
	// Targets are, with spec.targets Frozen, the Workspaces (cluster/namespace/name) recorded for
	// the step when the change started: only they run in the step until the next change.
	// +optional
	// +listType=atomic
	Targets []string `json:"targets,omitempty"`
	// TargetsRecordedAt is when Targets were recorded.
	// +optional
	TargetsRecordedAt *metav1.Time `json:"targetsRecordedAt,omitempty"`
	// Late is the number of Workspaces the step selects that were not recorded in Targets: they
	// join with the next change.
	// +optional
	Late int32 `json:"late,omitempty"`
	// Drifted are the step's Workspaces (cluster/namespace/name) whose last drift check found
	// drift at the commit they applied, not accepted (at most 100), unless the step's drift is
	// ignore.
	// +optional
	// +listType=atomic
	Drifted []string `json:"drifted,omitempty"`
}

// RolloutRevision is the commit a Rollout is rolling out for one repository and ref that its
// Workspaces track. Once any Workspace reports a newer commit of that repository and ref, every
// Workspace tracking them is behind until it reports that commit Applied, whichever agent polled
// first.
type RolloutRevision struct {
	// RepoURL is the repository (spec.source.repoURL of the Workspaces), in its canonical
	// spelling: every spelling of one repository is one source (docs/rollout-strategies.md).
	RepoURL string `json:"repoURL"`
	// TargetRevision is the branch, tag or commit they track (spec.source.targetRevision), in
	// its canonical spelling.
	TargetRevision string `json:"targetRevision"`
	// Commit is the commit SHA being rolled out.
	Commit string `json:"commit"`
	// Since is when the hub started rolling this commit out.
	Since metav1.Time `json:"since"`
	// DetectedAt is when an agent's poll saw the ref at Commit (the agent's clock); a commit
	// reported with an earlier detection time never replaces this one. Unset when the commit
	// came from a run that resolved the ref itself.
	// +optional
	DetectedAt *metav1.Time `json:"detectedAt,omitempty"`
	// Spellings are, when the Workspaces write this repository and ref in more than one way,
	// each way they write it ("<spec.source.repoURL>@<spec.source.targetRevision>"), sorted.
	// RepoURL and TargetRevision are the canonical spelling all of them map to.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Spellings []string `json:"spellings,omitempty"`
}

// RolloutStatus is the observed state of a Rollout.
type RolloutStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// CurrentStep is the index of the step being executed (len(steps) when completed).
	CurrentStep int `json:"currentStep"`
	// CurrentStepName is the name of that step.
	// +optional
	CurrentStepName string `json:"currentStepName,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// WaitingForClusters names, while the reason is WaitingForClusters, the clusters the Rollout
	// waits for (unavailable, not synced, or removed), sorted; the message says why each.
	// +optional
	// +listType=atomic
	WaitingForClusters []string `json:"waitingForClusters,omitempty"`
	// +optional
	LastReconcileTime *metav1.Time `json:"lastReconcileTime,omitempty"`
	// NextWindowAt is, while the Rollout waits outside its change windows, when the next one
	// opens.
	// +optional
	NextWindowAt *metav1.Time `json:"nextWindowAt,omitempty"`
	// LastProgressTime is when the current step last progressed (see spec.progressDeadline).
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`

	// AppliedWorkspaces is the number of distinct Workspaces Applied.
	// +optional
	AppliedWorkspaces int32 `json:"appliedWorkspaces,omitempty"`
	// TotalWorkspaces is the number of distinct Workspaces the steps select.
	// +optional
	TotalWorkspaces int32 `json:"totalWorkspaces,omitempty"`

	// Steps tells, per step, how many Workspaces it matched and where they stand.
	// +optional
	// +listType=atomic
	Steps []StepStatus `json:"steps,omitempty"`

	// Revisions are the commits being rolled out, one per repository and ref the Workspaces
	// track.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Revisions []RolloutRevision `json:"revisions,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// DecidedBy is the hub replica that wrote this status: its identity in the hub's leader
	// Lease. With the hub chart's admission policy magos-hub-leader, the API server accepts a
	// status only from the replica the Lease names, so a deposed leader cannot write one.
	// +optional
	DecidedBy string `json:"decidedBy,omitempty"`
}

// Rollout orders the Workspaces of a Project in steps: in order, parallel within a step,
// stopping on the first failure.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.projectRef",message="Rollout name must exactly match the projectRef it targets to ensure 1-to-1 mapping"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.currentStepName`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.appliedWorkspaces`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totalWorkspaces`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   RolloutSpec   `json:"spec"`
	Status RolloutStatus `json:"status,omitempty"`
}

// RolloutList is a list of Rollouts.
//
// +kubebuilder:object:root=true
type RolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Rollout `json:"items"`
}
