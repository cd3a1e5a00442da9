package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Transports of a registered cluster.
const (
	// TransportAgent: an agent in the spoke connects to the hub; the hub never holds spoke
	// credentials.
	TransportAgent = "agent"
	// TransportDirect: the hub connects to the spoke's API server with a kubeconfig.
	TransportDirect = "direct"
)

// Reasons written on a Cluster.
const (
	ReasonAgentHeartbeating = "AgentHeartbeating"
	ReasonAgentSilent       = "AgentSilent"
	ReasonAgentNeverSeen    = "AgentNeverSeen"
	// ReasonAgentVersionSkew: the agent's version is outside the hub's version skew policy
	// (docs/operations.md); the hub counts the cluster unavailable and decides nothing on it.
	ReasonAgentVersionSkew = "AgentVersionSkew"
	ReasonEngaged          = "Engaged"
	ReasonEngageFailed     = "EngageFailed"
	ReasonReachable        = "Reachable"
)

// SecretKeySelector names a key of a Secret in a given namespace.
type SecretKeySelector struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:default=kubeconfig
	// +optional
	Key string `json:"key,omitempty"`
}

// KubeconfigSource is where the hub reads a direct cluster's kubeconfig.
// +kubebuilder:validation:XValidation:rule="(has(self.path) ? 1 : 0) + (has(self.secretRef) ? 1 : 0) + (has(self.inCluster) && self.inCluster ? 1 : 0) == 1",message="kubeconfig needs exactly one of path, secretRef and inCluster: true"
type KubeconfigSource struct {
	// Path of a kubeconfig file on the hub.
	// +optional
	Path string `json:"path,omitempty"`
	// SecretRef names a Secret key holding the kubeconfig.
	// +optional
	SecretRef *SecretKeySelector `json:"secretRef,omitempty"`
	// InCluster reaches the hub's own cluster with the hub's own ServiceAccount (a
	// single-cluster install): no kubeconfig to make or store.
	// +optional
	InCluster bool `json:"inCluster,omitempty"`
}

// ClusterSpec is a registered cluster, as the hub's config file declares it. The hub writes it;
// users edit the config file, not this object. The cluster's registered labels are the object's
// labels.
// +kubebuilder:validation:XValidation:rule="(self.transport == 'direct') == has(self.kubeconfig)",message="a direct cluster needs a kubeconfig and an agent cluster must not have one"
type ClusterSpec struct {
	// Transport is agent (pull: an agent in the spoke connects) or direct (the hub connects).
	// +kubebuilder:validation:Enum=agent;direct
	Transport string `json:"transport"`

	// Kubeconfig of a direct cluster.
	// +optional
	Kubeconfig *KubeconfigSource `json:"kubeconfig,omitempty"`

	// Namespaces are the hub namespaces whose Projects and Rollouts this cluster's Workspaces
	// may join, from the bindings of the hub's config file; "*" is every namespace. A cluster
	// bound to none brings no Workspace into any Project: its Workspaces never count in, halt
	// or receive a grant from one.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`
}

// AllNamespaces in ClusterSpec.Namespaces binds a cluster to every hub namespace.
const AllNamespaces = "*"

// Binds reports whether the cluster may bring Workspaces into Projects of the hub namespace.
func (c *Cluster) Binds(namespace string) bool {
	for _, ns := range c.Spec.Namespaces {
		if ns == AllNamespaces || ns == namespace {
			return true
		}
	}
	return false
}

// ClusterStatus is the health of a registered cluster.
type ClusterStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Namespace on the hub that holds the cluster's mirrors (agent clusters).
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// LastHeartbeatTime is the agent's last heartbeat.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// AgentVersion is the version the agent reports.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`

	// SyncedSince is the agent's sync watermark: since when every Workspace of the cluster has had
	// an up-to-date mirror on the hub (the agent's clock). Unset until the agent's first complete
	// sync; the hub counts the Workspaces of an agent cluster without it as unknown.
	// +optional
	SyncedSince *metav1.Time `json:"syncedSince,omitempty"`

	// ClockOffset is how far the agent's clock runs ahead of the hub's (negative: behind), as the
	// hub measures it: the renew time the agent writes in its Lease, less the time on the hub's
	// own clock when the hub saw that renewal, the largest over the agent's last renewals (the
	// one seen with the least delay). The hub subtracts it from every time the agent writes
	// (when its poll saw a commit, its sync watermark) before comparing them with another
	// cluster's or its own, so an agent's clock decides no order. Unset for a direct cluster and
	// before the hub saw a renewal.
	// +optional
	ClockOffset *metav1.Duration `json:"clockOffset,omitempty"`

	// Mirrored is the number of Workspaces the agent reports it mirrors.
	// +optional
	Mirrored int32 `json:"mirrored,omitempty"`

	// Workspaces is the number of Workspaces the hub sees in the cluster.
	// +optional
	Workspaces int32 `json:"workspaces,omitempty"`

	// Conditions: Engaged, Available, Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Cluster is a spoke registered with the hub. The hub creates one for every entry of its config
// file and keeps its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Transport",type=string,JSONPath=`.spec.transport`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].reason`
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`,priority=1
// +kubebuilder:printcolumn:name="Workspaces",type=integer,JSONPath=`.status.workspaces`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Clock Offset",type=string,JSONPath=`.status.clockOffset`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

// Availability returns whether the cluster is Available and the reason of that condition ("" and
// false while it has none).
func (c *Cluster) Availability() (bool, string) {
	for _, cond := range c.Status.Conditions {
		if cond.Type == ConditionAvailable {
			return cond.Status == metav1.ConditionTrue, cond.Reason
		}
	}
	return false, ""
}
