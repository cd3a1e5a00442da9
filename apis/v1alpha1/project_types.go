package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons written on a Project.
const (
	ReasonManagedByRollout = "ManagedByRollout"
	ReasonDefaultParallel  = "DefaultParallel"
	// ReasonRolloutRemoved: the Project's Rollout was deleted; its Workspaces wait for a new
	// Rollout, or for the Project to be annotated magosproject.io/orchestration: parallel.
	ReasonRolloutRemoved = "RolloutRemoved"
)

// ProjectSpec groups Workspaces and sets their defaults.
type ProjectSpec struct {
	// Description is free text.
	// +optional
	Description string `json:"description,omitempty"`

	// VariableSetRefs are VariableSets (in this namespace of the cluster where a Workspace runs)
	// applied to every Workspace of the Project, before the Workspace's own.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	VariableSetRefs []LocalObjectReference `json:"variableSetRef,omitempty"`

	// Validation is the default policy selection of the Project's Workspaces.
	// +optional
	Validation *ValidationSpec `json:"validation,omitempty"`
}

// ProjectStatus is the observed state of a Project.
type ProjectStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	LastReconcileTime *metav1.Time `json:"lastReconcileTime,omitempty"`

	// Workspaces is the number of Workspaces of the Project across the fleet.
	// +optional
	Workspaces int32 `json:"workspaces,omitempty"`

	// Clusters lists the clusters where the Project has Workspaces.
	// +optional
	// +listType=atomic
	Clusters []string `json:"clusters,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// DecidedBy is the hub replica that wrote this status (see RolloutStatus.DecidedBy).
	// +optional
	DecidedBy string `json:"decidedBy,omitempty"`
}

// Project groups Workspaces. Without a Rollout of the same name its Workspaces run in parallel.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Workspaces",type=integer,JSONPath=`.status.workspaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Project struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ProjectSpec   `json:"spec"`
	Status ProjectStatus `json:"status,omitempty"`
}

// ProjectList is a list of Projects.
//
// +kubebuilder:object:root=true
type ProjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Project `json:"items"`
}
