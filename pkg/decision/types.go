package decision

import (
	"time"

	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/grant"

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

// Grant is the decision a Workspace currently carries: the hub-agent contract's grant, read
// and judged by pkg/grant alone.
type Grant = grant.Grant

// Source is the repository and ref a Workspace tracks (spec.source), in their canonical
// spelling (gitrepo.CanonicalURL and gitrepo.CanonicalRef). Workspaces with the same Source roll
// out the same commit, however each of them spells it.
type Source struct {
	RepoURL string
	Ref     string
}

// SourceOf returns the Source of a repository and ref as a Workspace spells them.
func SourceOf(repoURL, ref string) Source {
	if repoURL == "" {
		return Source{}
	}
	return Source{RepoURL: gitrepo.CanonicalURL(repoURL), Ref: gitrepo.CanonicalRef(ref)}
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
	// Source is the repository and ref the Workspace tracks, canonical.
	Source Source
	// Spelling is the repository and ref as the Workspace writes them
	// ("<repoURL>@<targetRevision>").
	Spelling string
	// Order are the commits of Source the Workspace applied (status.appliedRevisions), oldest
	// first, followed by the commit its agent detected at the ref since its last run started
	// (a detected revision other than the one last applied): the order in which the Workspace
	// itself saw the commits, which no clock decides.
	Order []string
	// ObservedRevision is status.observedRevision: the commit last applied.
	ObservedRevision string
	// CurrentRevision is status.currentRevision: the commit the current (or last) run plans
	// and applies.
	CurrentRevision string
	// DetectedRevision is the magosproject.io/detected-revision annotation.
	DetectedRevision string
	// DetectedAt is the magosproject.io/detected-at annotation (zero when absent or
	// unparsable): when the agent's poll saw the ref at DetectedRevision.
	DetectedAt time.Time
	// ReconcileRequested is true when magosproject.io/reconcile-request is set.
	ReconcileRequested bool
	// Grant is the decision the Workspace carries now.
	Grant Grant
	// PlanDigest is status.planDigest: the digest of the current run's plan, once it succeeded.
	PlanDigest string
	// PlanOnly is status.planOnly: the current run was granted its plan only.
	PlanOnly bool
	// Changes are status.resourceChanges: what the last plan adds, changes and destroys.
	Changes magosv1.ResourceChanges
	// PolicyViolations is the number of status.policyViolations: the rules the last plan broke.
	PolicyViolations int32
	// Drifted is true when the Workspace's last drift check found drift at the commit it
	// applied (status.drift.DriftedAt(status.observedRevision)). A check of another commit than
	// the one applied now is a stale view: the Workspace is not drifted.
	Drifted bool
	// DriftDigest and DriftChanges are the drift check's plan (status.drift.planDigest and
	// status.drift.resourceChanges: what it would put back), set only when Drifted.
	DriftDigest  string
	DriftChanges magosv1.ResourceChanges
	// Trigger is status.currentRunTrigger: why the current run was minted.
	Trigger string
	// RetryRequested is the magosproject.io/retry-run annotation: the run a retry was asked of.
	RetryRequested string
	// RequestedBy is the magosproject.io/requested-by annotation: who wrote the last request of
	// a person (a retry, an approval of its plan).
	RequestedBy string
	// Applied are the commits of Source the Workspace applied (status.appliedRevisions), oldest
	// first.
	Applied []string
}

// Cluster is what a decision needs to know of a registered cluster.
type Cluster struct {
	// Name is the registered name.
	Name string
	// Labels are the cluster's registered labels (for step clusterSelectors).
	Labels map[string]string
	// Available is true while the cluster's agent heartbeats with its sync live (or, for a
	// direct cluster, its API server answers).
	Available bool
	// Synced is true when the hub holds a complete view of the cluster's Workspaces, as of the
	// cluster's last sync: the hub has engaged the cluster and (for an agent cluster) the agent
	// has completed a sync. The Workspaces of a cluster that is not Synced are unknown, so no
	// step that may select them is ever counted done or found empty.
	Synced bool
	// SyncedAt is the time as of which the hub's view of the cluster's Workspaces is complete
	// (every change made before it has reached the hub), on the clock of whoever wrote it: the
	// agent's sync watermark for an agent cluster, the hub's own check for a direct one. A step
	// is found empty (NoWorkspacesFound) only on clusters synced after the Rollout was created,
	// on the hub's clock (SyncedAt less ClockOffset).
	SyncedAt time.Time
	// ClockOffset is how far the clock of the cluster's agent runs ahead of the hub's (negative:
	// behind), as the hub measured it (Cluster status.clockOffset; zero for a direct cluster).
	// Decide subtracts it from every time the agent wrote (SyncedAt, a Workspace's DetectedAt)
	// before comparing it with the hub's clock or another cluster's, so that no agent's clock
	// decides which commit is rolled out nor when a cluster's view is complete.
	ClockOffset time.Duration
	// Reason explains an unavailable or unsynced cluster (for messages).
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
	// Now stamps revisions the decision starts rolling out (Decide reads no clock).
	Now time.Time
}

// Change is one decision to write on a Workspace.
type Change struct {
	// Key is the Workspace.
	Key Key
	// Run is the run a grant allows (empty for a revocation).
	Run string
	// Revision is the commit a grant allows (empty when the Rollout does not know the commit
	// of the Workspace's source yet, in parallel mode, for a destroy, and for a revocation).
	Revision string
	// PlanOnly makes the grant allow a plan only: the step requires approval.
	PlanOnly bool
	// Plan binds the grant to the plan of this digest: the step's approval names it.
	Plan string
	// Verification is the step's verification (grant.EncodeVerification), which the agent runs
	// after the apply: set on the grants of the current step's runs, but for destroys.
	Verification string
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
	// AppliedBefore is true when some member has applied a commit before (its
	// status.observedRevision is set), under whatever decided it then.
	AppliedBefore bool
	// Grants are the grants to write (each names its run), sorted by key.
	Grants []Change
	// Revokes are the grants to remove, sorted by key: grants that could still start a run.
	Revokes []Change
	// Retries ask Workspaces for a new run (magosproject.io/retry-run naming Run), sorted by
	// key: under spec.rollback, the members of the current step whose run ended at another
	// commit than the one rolled back to, so that a new run can be granted that commit.
	Retries []Change
	// Revisions are the commits the Rollout rolls out, one per Source its members track,
	// sorted by repository and ref (nil in parallel mode and without steps).
	Revisions []magosv1.RolloutRevision
	// Tolerated are, by step name, the failed Workspaces of the steps up to the current one
	// whose failures the step tolerates (within its maxFailures), sorted by key.
	Tolerated map[string][]Key
	// RecheckAfter is set when the decision changes with time alone (a soak or a progress
	// deadline ends): decide again after it.
	RecheckAfter time.Duration
	// NextWindowAt is, when the Rollout waits outside its change windows, when the next one
	// opens (zero otherwise).
	NextWindowAt time.Time
	// LastProgress is when the current step last progressed, and DeadlineExceeded whether it
	// has not for the Rollout's spec.progressDeadline (both unset without one).
	LastProgress     time.Time
	DeadlineExceeded bool
	// WaitingFor names, with reason WaitingForClusters, the clusters the Rollout waits for,
	// sorted (status.waitingForClusters).
	WaitingFor []string
	// ApprovalVoided says, when the current step's approval (spec.approvals) no longer covers
	// the plans waiting in the step, why (empty otherwise).
	ApprovalVoided string
}
