package rollout

import (
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// Key identifies a Workspace in the fleet: its cluster and its namespace and name there.
type Key struct {
	Cluster   string
	Namespace string
	Name      string
}

// String renders the key as cluster/namespace/name.
func (k Key) String() string { return k.Cluster + "/" + k.Namespace + "/" + k.Name }

// Grant is the decision a Workspace currently carries.
type Grant struct {
	// Allowed is true when magosproject.io/execution-allowed is "true".
	Allowed bool
	// Run is magosproject.io/granted-run.
	Run string
	// By is magosproject.io/granted-by.
	By string
}

// Workspace is what a decision needs to know of one Workspace, wherever it lives.
type Workspace struct {
	// Key is where the Workspace really lives (for a mirror: its origin).
	Key Key
	// Labels are the Workspace's labels (a mirror carries the spoke Workspace's).
	Labels map[string]string
	// ProjectRef is spec.projectRef.name.
	ProjectRef string
	// Phase is status.phase.
	Phase magosv1.Phase
	// Reason is status.reason.
	Reason string
	// Generation is the spec generation where the Workspace lives (a mirror's
	// status.origin.generation).
	Generation int64
	// ObservedGeneration is status.observedGeneration.
	ObservedGeneration int64
	// RunID is status.currentRunID.
	RunID string
	// ObservedRevision is status.observedRevision.
	ObservedRevision string
	// DetectedRevision is the magosproject.io/detected-revision annotation.
	DetectedRevision string
	// ReconcileRequested is true when magosproject.io/reconcile-request is set.
	ReconcileRequested bool
	// Grant is the decision the Workspace carries now.
	Grant Grant
}

// Cluster is what a decision needs to know of a registered cluster.
type Cluster struct {
	// Name is the registered name.
	Name string
	// Labels are the cluster's registered labels (for step clusterSelectors).
	Labels map[string]string
	// Available is true while the cluster's agent heartbeats (or, for a direct cluster, its API
	// server answers).
	Available bool
	// Reason explains an unavailable cluster (for messages).
	Reason string
}

// Input is everything Decide looks at.
type Input struct {
	// Namespace and Project name the Project being decided (on the hub).
	Namespace string
	Project   string
	// Rollout is the Project's Rollout, or nil: then every Workspace of the Project runs in
	// parallel (the Project's DefaultParallel mode).
	Rollout *magosv1.Rollout
	// Workspaces are the Workspaces the hub sees in the fleet. Decide keeps those of the
	// Project (projectRef and namespace sameness) and ignores the rest.
	Workspaces []Workspace
	// Clusters are the registered clusters by name. Workspaces of clusters not in the map are
	// ignored (a removed cluster's Workspaces drop out).
	Clusters map[string]Cluster
}

// Change is one decision to write on a Workspace.
type Change struct {
	// Key is the Workspace.
	Key Key
	// Run is the run a grant allows (empty for a revocation).
	Run string
}

// Decision is the result of Decide.
type Decision struct {
	// Phase, Reason and Message are the Rollout's (or, in parallel mode, the Project's) status.
	Phase   magosv1.Phase
	Reason  string
	Message string
	// CurrentStep is the index of the step being executed (len(steps) when completed);
	// CurrentStepName its name ("" when completed or in parallel mode).
	CurrentStep     int
	CurrentStepName string
	// Steps is the per-step status, in step order.
	Steps []magosv1.StepStatus
	// Applied and Total count the distinct Workspaces the steps select (in parallel mode: the
	// Project's Workspaces) and how many of them are Applied for their current spec.
	Applied int32
	Total   int32
	// Members are the Project's Workspaces, sorted by key.
	Members []Key
	// Clusters are the clusters the Project's Workspaces live in, sorted.
	Clusters []string
	// Grants are the grants to write (each names its run), sorted by key.
	Grants []Change
	// Revokes are the grants to remove, sorted by key.
	Revokes []Change
}
