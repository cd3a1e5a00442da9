// Package v1alpha1 holds the Magos API, group magosproject.io, version v1alpha1.
//
// The kinds and their field names, phases and reasons are those of upstream single-cluster
// Magos, so its manifests apply unchanged. Magos Fleet adds what a fleet needs: conditions that
// carry observedGeneration, real VariableSets, a clusterSelector on Rollout steps, the origin of
// mirrored Workspaces, and the cluster-scoped Cluster kind that the hub writes for every
// registered spoke. Validation that upstream left to the controllers (and then mishandled) is
// done at admission here, through OpenAPI bounds and CEL rules.
//
// +kubebuilder:object:generate=true
// +groupName=magosproject.io
package v1alpha1
