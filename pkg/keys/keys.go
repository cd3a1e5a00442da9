// Package keys holds the annotation, label and finalizer keys Magos reads and writes. The
// upstream keys keep their upstream spelling so upstream manifests and tools keep working.
package keys

// Prefix is the prefix of every Magos key.
const Prefix = "magosproject.io/"

// Workspace annotations shared with upstream Magos.
const (
	// ExecutionAllowed is the grant: only the value "true" lets a Workspace run.
	ExecutionAllowed = Prefix + "execution-allowed"
	// Approved, "true", approves applying a plan when autoApply is false. Consumed on apply.
	Approved = Prefix + "approved"
	// ReconcileRequest, any non-empty value, asks for one fresh run.
	ReconcileRequest = Prefix + "reconcile-request"
	// CheckDrift, any non-empty value, asks a Workspace with spec.driftDetection for a drift
	// check now (once it is Applied); the agent removes it when the check starts.
	CheckDrift = Prefix + "check-drift"
	// ReconcileInterval is the Go duration of the drift/retry schedule (default 3m).
	ReconcileInterval = Prefix + "reconcile-interval"
	// DetectedRevision is the commit SHA the tracked ref moved to.
	DetectedRevision = Prefix + "detected-revision"
	// GitPollInterval overrides how often the tracked ref is polled.
	GitPollInterval = Prefix + "git-poll-interval"
	// DetectedAt is when the agent's poll saw the ref at DetectedRevision (RFC 3339, the agent's
	// clock). The hub orders commits reported by different agents by it.
	DetectedAt = Prefix + "detected-at"
)

// Annotations Magos Fleet adds.
const (
	// GrantedRun is the run ID a grant allows (status.currentRunID of the Workspace when the hub
	// decided). A grant naming another run is not executed.
	GrantedRun = Prefix + "granted-run"
	// GrantedBy says which controller gave the grant: "rollout" or "project".
	GrantedBy = Prefix + "granted-by"
	// DecidedBy is the hub replica that wrote a Workspace's grant or revocation: its identity in
	// the hub's leader Lease. The hub writes it with every decision; the hub chart's admission
	// policy magos-hub-leader refuses a decision carrying another identity than the Lease's
	// holder, so a deposed or paused leader cannot land one. Absent when the hub runs without
	// leader election.
	DecidedBy = Prefix + "decided-by"
	// HubLeaderLease is the name of the Lease the hub replicas elect their leader with (in the
	// hub's namespace); the magos-hub-leader admission policy reads its holder.
	HubLeaderLease = "magos-hub.magosproject.io"
	// GrantedRevision is the commit a Rollout's grant allows: the commit the Rollout is rolling
	// out for the Workspace's repository and ref. The run plans and applies exactly that commit,
	// whatever the ref points at meanwhile. Absent when the hub does not know the commit yet (the
	// first run resolves the ref itself) and on grants in parallel mode.
	GrantedRevision = Prefix + "granted-revision"
	// GrantedOperation narrows a grant: GrantedOperationPlan allows the run to plan only (the
	// plan then waits in Planned for an apply grant). Absent: plan and apply.
	GrantedOperation = Prefix + "granted-operation"
	// GrantedPlan binds an apply grant to one plan: the run applies only when its plan has this
	// digest (status.planDigest). The hub sets it when a step's approval names the plan.
	GrantedPlan = Prefix + "granted-plan"
	// GrantedVerification carries, on an apply grant of a step with a verification, that
	// verification (the step's RolloutStep.Verification as JSON): the agent runs it after the
	// apply, before the Workspace counts as Applied.
	GrantedVerification = Prefix + "granted-verification"
)

// GrantedOperationPlan is the value of GrantedOperation on a grant that allows a plan only.
const GrantedOperationPlan = "plan"

// Requests people make on the hub, on a mirror, that the agent carries down to the Workspace.
// Each names the run it is for: on any other run it does nothing.
const (
	// RetryRun asks for a new run of a Workspace whose run (the value) ended, failed or applied:
	// magosctl retry WORKSPACE --cluster C.
	RetryRun = Prefix + "retry-run"
	// ApproveRun approves applying the plan of the run it names, as approved=true does:
	// magosctl approve WORKSPACE --cluster C.
	ApproveRun = Prefix + "approve-run"
	// RequestedBy is the user who wrote the last request (the hub's admission policy checks it).
	RequestedBy = Prefix + "requested-by"
	// PausedBy, on a Rollout, is the user who last paused or resumed it (spec.paused), written
	// with it by magosctl rollout pause|resume and the dashboard: the Rollout's Events name them.
	// The hub's admission policy holds it to its writer's user name when it changes.
	PausedBy = Prefix + "paused-by"
)

// HubRefusal is written by the hub on a Workspace it reads but takes no part of (its cluster
// is not bound to the hub namespace of its Project): the reason, in words. The agent carries
// it down to the spoke Workspace; it is removed once the Workspace counts again.
const HubRefusal = Prefix + "hub-refusal"

// Orchestration, on a hub Project, set to OrchestrationParallel, runs the Project's Workspaces
// in parallel without a Rollout at once: without the grace period a new Project otherwise waits
// for its Rollout, and after its Rollout was deleted.
const (
	Orchestration         = Prefix + "orchestration"
	OrchestrationParallel = "parallel"
)

// Values of GrantedBy.
const (
	GrantedByRollout = "rollout"
	GrantedByProject = "project"
)

// AcknowledgeRemovedClusters, on a hub Rollout, lists the clusters (comma-separated names) the
// Rollout may go on without: a cluster removed from the hub's configuration (or unbound from the
// Rollout's namespace) while an unfinished step held Workspaces in it makes that step wait until
// the cluster is registered again or is listed here. No other edit of the Rollout ends the wait.
const AcknowledgeRemovedClusters = Prefix + "acknowledge-removed-clusters"

// Labels on the hub's mirrors of spoke Workspaces.
const (
	// Mirror marks a Workspace on the hub that mirrors one in a spoke. Agents never execute
	// Workspaces that carry it.
	Mirror = Prefix + "mirror"
	// Cluster is the registered name of the cluster a mirror comes from.
	Cluster = Prefix + "cluster"
	// OriginNamespace is the namespace of the mirrored Workspace in its spoke.
	OriginNamespace = Prefix + "origin-namespace"
	// OriginName is the name of the mirrored Workspace in its spoke.
	OriginName = Prefix + "origin-name"
)

// Labels on Jobs and their Pods.
const (
	Workspace = Prefix + "workspace"
	JobType   = Prefix + "job-type"
	RunID     = Prefix + "run-id"
)

// Finalizer is the finalizer on Projects and Workspaces.
const Finalizer = Prefix + "finalizer"

// ClusterNamespacePrefix prefixes the hub namespace that holds an agent cluster's mirrors.
const ClusterNamespacePrefix = "magos-cluster-"

// ClusterNamespace is the hub namespace that holds the mirrors of the named agent cluster.
func ClusterNamespace(cluster string) string { return ClusterNamespacePrefix + cluster }

// AgentLease is the name of the coordination.k8s.io Lease an agent renews in its cluster
// namespace on the hub (its heartbeat).
const AgentLease = "magos-agent"

// AgentServiceAccount is the ServiceAccount the hub creates for an agent in its cluster namespace
// on the hub: the agent's bootstrap token, and every token it renews, are for it.
const AgentServiceAccount = "magos-agent"

// Annotations on the agent's heartbeat Lease.
const (
	// AgentVersion carries the agent's version.
	AgentVersion = Prefix + "agent-version"
	// HubVersion carries the version of the hub that last judged the Lease, written by the hub
	// (the agent keeps it when it renews): the agent checks the skew policy against it too.
	HubVersion = Prefix + "hub-version"
	// SyncedSince is the agent's sync watermark: since when (RFC 3339, the agent's clock) every
	// spoke Workspace has had an up-to-date mirror on the hub, without interruption. The agent
	// leaves it out while a mirror has been behind its spoke Workspace for the sync grace or
	// longer (it still renews the Lease: it is alive), and the hub then counts the cluster's
	// Workspaces unknown: a live Lease means a live agent, a live Lease with synced-since a live
	// sync.
	SyncedSince = Prefix + "synced-since"
	// MirrorsBehind is how many mirrors were out of sync with their spoke Workspace at the
	// agent's last audit (decimal; left out when none).
	MirrorsBehind = Prefix + "mirrors-behind"
	// MirrorLag is how long the mirror furthest behind had been out of sync at that audit (a Go
	// duration, the agent's clock; left out when none).
	MirrorLag = Prefix + "mirror-lag"
	// Mirrored is the number of spoke Workspaces the agent mirrors (decimal).
	Mirrored = Prefix + "mirrored"
	// SyncedAt is the agent's completeness watermark (RFC 3339, the agent's clock): every change
	// of every spoke Workspace made before it is mirrored on the hub. The hub finds a step empty
	// (NoWorkspacesFound) only on clusters synced after the Rollout was created.
	SyncedAt = Prefix + "synced-at"
)

// NotifiedPrefix prefixes the annotation the hub writes on a Rollout's Event once its
// notification reached a webhook: NotifiedPrefix + the webhook's name, the time of delivery. A
// hub that starts again (or a new leader) does not send that Event to that webhook again.
const NotifiedPrefix = "notified.magosproject.io/"
