package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is the coarse state of any Magos object. The same enum is used on every kind.
// +kubebuilder:validation:Enum=Pending;Reconciling;Ready;Idle;Planning;Planned;Applying;Verifying;Applied;Failed;ValidationFailed;Deleting
type Phase string

// The phases. Idle is accepted for compatibility with upstream but never written. What each
// phase means is its row in phaseInfos (PhaseInfo): a new phase needs one.
const (
	PhasePending     Phase = "Pending"
	PhaseReconciling Phase = "Reconciling"
	PhaseReady       Phase = "Ready"
	PhaseIdle        Phase = "Idle"
	PhasePlanning    Phase = "Planning"
	PhasePlanned     Phase = "Planned"
	PhaseApplying    Phase = "Applying"
	// PhaseVerifying (Workspace): the apply succeeded, and the step's verification
	// (RolloutStep.Verification) runs.
	PhaseVerifying        Phase = "Verifying"
	PhaseApplied          Phase = "Applied"
	PhaseFailed           Phase = "Failed"
	PhaseValidationFailed Phase = "ValidationFailed"
	PhaseDeleting         Phase = "Deleting"
)

// Condition types.
const (
	// ConditionReady summarises the object's phase: True when it settled well, False when it
	// failed or is being deleted, Unknown while work is in progress (PhaseInfo.Ready,
	// ReadyCondition).
	ConditionReady = "Ready"
	// ConditionProgressing, on a Rollout with spec.progressDeadline, is False with reason
	// ProgressDeadlineExceeded while its current step has not progressed for that long.
	ConditionProgressing = "Progressing"

	// ConditionDegraded is True while a controller keeps failing on something that is not the
	// object's own fault (an API conflict, a Job that could not be created, a cluster that did not
	// answer). It is retried; it never turns the object Failed on its own.
	ConditionDegraded = "Degraded"

	// ConditionAvailable, on a Cluster, is True while its agent heartbeats (agent clusters) or its
	// API server answers (direct clusters).
	ConditionAvailable = "Available"

	// ConditionEngaged, on a Cluster, is True while the hub's controllers watch it.
	ConditionEngaged = "Engaged"
)

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ValidationSpec selects the policies a plan must satisfy.
type ValidationSpec struct {
	// PolicySelector selects ValidatingPolicy objects (policies.kyverno.io/v1) by label. An empty
	// selector ({}) selects every policy; leaving it out selects none (on a Workspace: inherit the
	// Project's). A Workspace's selector replaces its Project's. A selector that is not empty but
	// selects no policy fails the run before its plan (ValidationFailed, reason NoPolicyMatched).
	// The agent's mandatory policies check every plan whatever the selector.
	// +optional
	PolicySelector *LabelSelector `json:"policySelector,omitempty"`
}

// LabelSelector is metav1.LabelSelector with bounds and checks that let the API server reject a
// selector that could never be parsed, at admission rather than in a controller. It is
// JSON-compatible with metav1.LabelSelector.
// +kubebuilder:validation:XValidation:rule="!has(self.matchLabels) || self.matchLabels.all(k, k.size() <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="matchLabels keys must be label keys: an optional DNS-subdomain prefix and '/', then a name of 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
type LabelSelector struct {
	// MatchLabels is a map of {key,value} pairs; all must match.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`

	// MatchExpressions is a list of label selector requirements; all must match.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelValue is a label value: at most 63 letters, digits, '-', '_' or '.', starting and
// ending with a letter or digit, or empty.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type LabelValue string

// LabelSelectorRequirement is one requirement of a LabelSelector.
// +kubebuilder:validation:XValidation:rule="self.key.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="key must be a label key: an optional DNS-subdomain prefix and '/', then a name of 1 to 63 letters, digits, '-', '_' or '.'"
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",message="values must be non-empty for the In and NotIn operators and empty for Exists and DoesNotExist"
type LabelSelectorRequirement struct {
	// Key is the label key the selector applies to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`

	// Operator is one of In, NotIn, Exists and DoesNotExist.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`

	// Values for In and NotIn; empty for Exists and DoesNotExist.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
	// +listType=atomic
	Values []string `json:"values,omitempty"`
}
