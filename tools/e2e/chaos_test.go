package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// Settings of TestChaos, from the environment.
const (
	// envChaosTrials is the number of trials (default 3).
	envChaosTrials = "MAGOS_CHAOS_TRIALS"
	// envChaosSeed seeds the fault schedule (default: derived from the time, and printed).
	envChaosSeed = "MAGOS_CHAOS_SEED"
	// envChaosCommits is the number of commits pushed per trial (default 2).
	envChaosCommits = "MAGOS_CHAOS_COMMITS"
	// envChaosSummary names a file that receives the one-line summary (make chaos prints it).
	envChaosSummary = "MAGOS_CHAOS_SUMMARY"
	// envChaosDir keeps the fleet's folder (logs, run data, ledger) there instead of a
	// temporary folder removed after the test.
	envChaosDir = "MAGOS_CHAOS_DIR"
)

// Kinds of fault TestChaos injects.
const (
	// faultHubKill kills every hub replica (SIGKILL) and restarts them after a while.
	faultHubKill = "hub-kill"
	// faultLeaderFailover kills the leading hub replica (SIGKILL), waits for the standby to take
	// the leader Lease over, and restarts the killed replica after a while.
	faultLeaderFailover = "leader-failover"
	// faultAgentKill kills an agent (SIGKILL) and restarts it after a while.
	faultAgentKill = "agent-kill"
	// faultAgentStop suspends an agent (SIGSTOP) and resumes it (SIGCONT) after a while.
	faultAgentStop = "agent-stop"
	// faultPartition cuts an agent off from the hub at the transport level (its TCP proxy to
	// the hub's API server blackholes), then heals.
	faultPartition = "partition"
	// faultDeregister removes a cluster from the hub's config file and adds it back.
	faultDeregister = "deregister"
	// faultMirrorDelay suspends an agent for a short time right after a commit, so that its
	// mirror reports the commit late.
	faultMirrorDelay = "mirror-delay"
	// faultReplayedGrant writes on a cluster's mirror on the hub an old grant: execution-allowed
	// "true", granted-by rollout and the granted-run of an earlier run of that Workspace, as a
	// stale controller or a replayed event would. Magos must not run on it.
	faultReplayedGrant = "replayed-grant"
	// faultLeaderStop suspends the leading hub replica (SIGSTOP), waits for the standby to take
	// the leader Lease over, pauses and resumes the Rollout through the hub's API server while
	// the old leader sleeps, then resumes it (SIGCONT): it wakes up believing it leads, and must
	// find out it does not. It is started again if it exited on losing the Lease.
	faultLeaderStop = "leader-stop"
	// faultRolloutRecreate deletes the Rollout and creates it again with the same spec, right
	// after a first Workspace applied the commit (or at once, if none did within a minute).
	faultRolloutRecreate = "rollout-recreate"
	// faultRolloutPause pauses the Rollout (spec.paused) and resumes it after a while.
	faultRolloutPause = "rollout-pause"
)

// chaosHubReplicas is the number of hub replicas of the chaos fleet (leader election on).
const chaosHubReplicas = 2

// failoverTimeout bounds the wait for a hub replica to lead (the Lease lasts 15s).
const failoverTimeout = 45 * time.Second

// faultKinds in a fixed order, for the schedule and the report.
var faultKinds = []string{faultHubKill, faultLeaderFailover, faultAgentKill, faultAgentStop, faultPartition,
	faultDeregister, faultMirrorDelay, faultReplayedGrant, faultLeaderStop, faultRolloutRecreate, faultRolloutPause}

// chaosPollIntervals: every region polls git fast (the agent's floor is 5s), the later ones
// faster, so that a later region usually sees a commit first.
var chaosPollIntervals = map[string]time.Duration{
	"us-east-1":  7 * time.Second,
	"eu-west-1":  6 * time.Second,
	"ap-south-1": 5 * time.Second,
}

// The second Workspace of every spoke, in the same step as the demo's (the Rollout's steps select
// env=prod and region=<spoke>), tracking the same repository spelled differently.
const (
	secondWorkspace   = "cdn-edge-b"
	secondVariableSet = "cdn-edge-b-inputs"
)

// member is one Workspace the chaos Rollout rolls out to: Workspace in the spoke Cluster, which
// writes Label in the ledger.
type member struct{ Cluster, Workspace, Label string }

// chaosMembers are the Workspaces of the chaos fleet, in step order: in each spoke the demo's
// Workspace (its ledger label is the region) and the second one (label "<region>-b").
func chaosMembers(order []string) []member {
	var out []member
	for _, c := range order {
		out = append(out, member{c, demo.Workspace, c}, member{c, secondWorkspace, c + "-b"})
	}
	return out
}

// ledgerSteps lists, in step order (one step a spoke), the ledger labels of each step's
// Workspaces.
func ledgerSteps(order []string, members []member) [][]string {
	steps := make([][]string, len(order))
	for _, m := range members {
		i := slices.Index(order, m.Cluster)
		steps[i] = append(steps[i], m.Label)
	}
	return steps
}

// labelOf is the ledger label of the Workspace name in cluster ("cluster/name" if it is no
// member).
func labelOf(members []member, cluster, name string) string {
	for _, m := range members {
		if m.Cluster == cluster && m.Workspace == name {
			return m.Label
		}
	}
	return cluster + "/" + name
}

// secondSpelling spells the repository and branch of src as another team would: the
// repository's .git folder, with a trailing slash, and the full name of the branch.
// gitrepo.CanonicalSource maps both spellings to one source.
func secondSpelling(src magosv1.Source) magosv1.Source {
	return magosv1.Source{RepoURL: strings.TrimSuffix(src.RepoURL, "/") + "/.git/", TargetRevision: "refs/heads/" + src.TargetRevision}
}

// addSecondWorkspaces creates in every spoke the second Workspace (secondWorkspace, with its
// own VariableSet: region "<spoke>-b", its ledger label) in the step of the demo's Workspace,
// tracking the demo's repository in secondSpelling, polling git as often as the first.
func addSecondWorkspaces(ctx context.Context, f *devfleet.Fleet) error {
	for _, c := range f.Order {
		var first magosv1.Workspace
		if err := f.Client(c).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &first); err != nil {
			return err
		}
		src := secondSpelling(first.Spec.Source)
		if a, b := gitrepo.CanonicalSource(first.Spec.Source.RepoURL, first.Spec.Source.TargetRevision),
			gitrepo.CanonicalSource(src.RepoURL, src.TargetRevision); a != b {
			return fmt.Errorf("%s@%s and %s@%s are not one source (%s, %s)", first.Spec.Source.RepoURL,
				first.Spec.Source.TargetRevision, src.RepoURL, src.TargetRevision, a, b)
		}
		vs, ws := demoscenario.SpokeObjects(c+"-b", src, false)
		vs.Name, ws.Name = secondVariableSet, secondWorkspace
		ws.Labels["region"] = c // the step of the spoke
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: secondVariableSet}}
		ws.Annotations = map[string]string{keys.GitPollInterval: chaosPollIntervals[c].String()}
		if err := demoscenario.Create(ctx, f.Client(c), "in "+c, vs, ws); err != nil {
			return err
		}
	}
	return nil
}

// waitMembersRelease waits (up to two minutes) until every member wrote release in the ledger
// and its Workspace is Applied at sha.
func waitMembersRelease(ctx context.Context, f *devfleet.Fleet, members []member, ledger, release, sha string) error {
	return localcluster.Poll(2*time.Minute, func() error {
		lines, err := readLedger(ledger)
		if err != nil {
			return err
		}
		var missing []string
		for _, m := range members {
			if !slices.ContainsFunc(lines, func(l ledgerLine) bool { return l.Region == m.Label && l.Release == release }) {
				missing = append(missing, m.Label)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no ledger line for %s from %s", release, strings.Join(missing, ", "))
		}
		for _, m := range members {
			var ws magosv1.Workspace
			if err := f.Client(m.Cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: m.Workspace}, &ws); err != nil {
				return err
			}
			if ws.Status.Phase != magosv1.PhaseApplied || ws.Status.ObservedRevision != sha {
				return fmt.Errorf("%s/%s is %s at %s, want Applied at %s", m.Cluster, m.Workspace, ws.Status.Phase, ws.Status.ObservedRevision, sha)
			}
		}
		return nil
	})
}

// fault is one scheduled fault: Kind on Target, injected After the previous fault of the commit
// was healed (the first, after the commit), healed For later.
type fault struct {
	Kind, Target string
	After, For   time.Duration
}

func (f fault) String() string {
	return fmt.Sprintf("%s(%s) after %s for %s", f.Kind, f.Target, f.After, f.For)
}

// schedule draws the faults of one commit from rng: sometimes a delayed mirror right after the
// commit, then one to three other faults, each bounded in time. A recreated Rollout comes first
// among them (it waits for the commit's first apply, so it falls mid-rollout).
func schedule(rng *rand.Rand, order []string) []fault {
	var out []fault
	agent := func() string { return order[rng.IntN(len(order))] }
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	if rng.IntN(3) == 0 {
		out = append(out, fault{Kind: faultMirrorDelay, Target: agent(), For: ms(1000, 3000)})
	}
	others := []string{faultHubKill, faultLeaderFailover, faultAgentKill, faultAgentStop, faultPartition,
		faultDeregister, faultReplayedGrant, faultLeaderStop, faultRolloutRecreate, faultRolloutPause}
	for range 1 + rng.IntN(3) {
		f := fault{Kind: others[rng.IntN(len(others))], After: ms(0, 6000)}
		switch f.Kind {
		case faultHubKill:
			f.Target, f.For = "hub", ms(0, 5000)
		case faultLeaderFailover:
			// Soon, so that the takeover (up to the 15s lease) falls within the rollout.
			f.Target, f.After, f.For = "leader", ms(0, 2000), ms(0, 5000)
		case faultReplayedGrant:
			f.Target = agent() // written at once: nothing to heal
		case faultAgentKill:
			f.Target, f.For = agent(), ms(0, 8000)
		case faultAgentStop:
			f.Target, f.For = agent(), ms(2000, 10000)
		case faultPartition:
			f.Target, f.For = agent(), ms(2000, 12000)
		case faultDeregister:
			f.Target, f.For = agent(), ms(1000, 6000)
		case faultLeaderStop:
			// Soon, as a failover; For is how long the Rollout stays paused under the new leader.
			f.Target, f.After, f.For = "leader", ms(0, 2000), ms(2000, 5000)
		case faultRolloutRecreate:
			f.Target, f.After, f.For = "rollout", 0, ms(0, 3000) // For: how long there is no Rollout
		case faultRolloutPause:
			f.Target, f.For = "rollout", ms(2000, 8000)
		}
		out = append(out, f)
	}
	rank := map[string]int{faultMirrorDelay: 0, faultRolloutRecreate: 1}
	slices.SortStableFunc(out, func(a, b fault) int {
		ra, ok := rank[a.Kind]
		if !ok {
			ra = 2
		}
		rb, ok := rank[b.Kind]
		if !ok {
			rb = 2
		}
		return ra - rb
	})
	return out
}

// inject applies a fault, holds it for its duration and heals it, returning when it was healed.
// It heals whatever it broke even when it fails half-way. w gives the runs seen so far (for a
// replayed grant); ledger and release are the commit's (a recreated Rollout waits for its first
// apply); what is logged with the fault's window.
func inject(ctx context.Context, f *devfleet.Fleet, w *watcher, ft fault, ledger, release string) (healed time.Time, what string, err error) {
	hold := func() {
		select {
		case <-time.After(ft.For):
		case <-ctx.Done():
		}
	}
	if ft.Kind == faultLeaderFailover || ft.Kind == faultLeaderStop {
		// A hub replica that exited by itself (one that lost the Lease under load exits, as
		// magos-hub does) is started again first, as its Deployment would: a failover needs a
		// standby.
		restarted, rerr := f.RestartExitedHubReplicas()
		if rerr != nil {
			return time.Time{}, "", rerr
		}
		if len(restarted) > 0 {
			what = fmt.Sprintf("(restarted hub replica(s) %v, which had exited) ", restarted)
		}
	}
	switch ft.Kind {
	case faultHubKill:
		hubs := f.HubReplicas()
		for _, h := range hubs {
			if err := f.Kill(h); err != nil {
				return time.Time{}, "", err
			}
		}
		hold()
		for _, h := range hubs {
			err = errors.Join(err, f.Restart(h))
		}
	case faultLeaderFailover:
		began := time.Now()
		killed, successor, ferr := f.KillHubLeader(ctx, failoverTimeout)
		if killed == "" {
			return time.Time{}, "", fmt.Errorf("killing the hub leader: %w", ferr)
		}
		what += fmt.Sprintf("killed leader %s, %s took over after %s", killed, successor,
			time.Since(began).Round(time.Millisecond))
		hold()
		err = errors.Join(ferr, f.Restart(killed))
	case faultReplayedGrant:
		what, err = replayGrant(ctx, f, w, ft.Target)
		return time.Now(), what, err
	case faultLeaderStop:
		began := time.Now()
		stopped, successor, ferr := f.StopHubLeader(ctx, failoverTimeout)
		if stopped == "" {
			return time.Time{}, "", fmt.Errorf("suspending the hub leader: %w", ferr)
		}
		what += fmt.Sprintf("suspended leader %s", stopped)
		if ferr == nil {
			what += fmt.Sprintf(", %s took over after %s", successor, time.Since(began).Round(time.Millisecond))
			// The new leader runs the Rollout while the old one sleeps: pause it and resume it.
			if perr := setPaused(ctx, f, true); perr != nil {
				ferr = perr
			} else {
				hold()
				ferr = setPaused(context.Background(), f, false)
				what += fmt.Sprintf(", Rollout paused for %s", ft.For)
			}
		}
		restarted, cerr := f.ContinueHubReplica(stopped, failoverTimeout)
		if restarted {
			what += ", " + stopped + " exited on waking and was started again"
		} else if cerr == nil {
			what += ", " + stopped + " resumed and kept running"
		}
		err = errors.Join(ferr, cerr)
	case faultRolloutRecreate:
		first, ferr := firstApply(ctx, ledger, release, time.Minute)
		if ferr != nil {
			return time.Time{}, "", ferr
		}
		if first.Region != "" {
			what = fmt.Sprintf("after %s applied %s at %s, ", first.Region, release, first.At.Format("15:04:05.000"))
		} else {
			what = "no apply of " + release + " within a minute, "
		}
		var gone time.Duration
		gone, err = recreateRollout(ctx, f, ft.For)
		what += fmt.Sprintf("no Rollout for %s", gone.Round(time.Millisecond))
	case faultRolloutPause:
		if err := setPaused(ctx, f, true); err != nil {
			return time.Time{}, "", err
		}
		hold()
		err = setPaused(context.Background(), f, false)
	case faultAgentKill:
		if err := f.Kill(ft.Target); err != nil {
			return time.Time{}, "", err
		}
		hold()
		err = f.Restart(ft.Target)
	case faultAgentStop, faultMirrorDelay:
		if err := f.StopProcess(ft.Target); err != nil {
			return time.Time{}, "", err
		}
		hold()
		err = f.ContinueProcess(ft.Target)
	case faultPartition:
		if err := f.Partition(ft.Target); err != nil {
			return time.Time{}, "", err
		}
		hold()
		err = f.Heal(ft.Target)
	case faultDeregister:
		if err := f.Deregister(ctx, ft.Target); err != nil {
			// Put it back whatever happened.
			return time.Now(), "", fmt.Errorf("%w (registering again: %v)", err, f.Register(ctx, ft.Target))
		}
		hold()
		// Register waits for the hub to set the cluster up again, with a fresh context: the
		// fault must be healed even when the trial's context is done.
		rctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		err = f.Register(rctx, ft.Target)
	default:
		return time.Time{}, "", fmt.Errorf("unknown fault kind %q", ft.Kind)
	}
	return time.Now(), what, err
}

// setPaused sets the Rollout's spec.paused through the hub's API server, as magosctl rollout
// pause and resume do.
func setPaused(ctx context.Context, f *devfleet.Fleet, paused bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := f.Client("hub").Patch(ctx, &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: demo.Project}},
		client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"paused":%t}}`, paused)))
	if err != nil {
		return fmt.Errorf("setting the Rollout's spec.paused to %t: %w", paused, err)
	}
	return nil
}

// firstApply waits up to timeout for the ledger's first apply of release and returns it (none
// within timeout: a zero line and no error).
func firstApply(ctx context.Context, ledger, release string, timeout time.Duration) (ledgerLine, error) {
	deadline := time.Now().Add(timeout)
	for {
		lines, err := readLedger(ledger)
		if err != nil {
			return ledgerLine{}, err
		}
		if i := slices.IndexFunc(lines, func(l ledgerLine) bool { return l.Release == release }); i >= 0 {
			return lines[i], nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return ledgerLine{}, nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// recreateRollout deletes the Rollout, waits (up to a minute) until the hub's API server no
// longer has it, waits for absent, and creates it again with the same labels, annotations and
// spec. It creates it again whatever happened, with a context of its own, and returns how long
// there was no Rollout.
func recreateRollout(ctx context.Context, f *devfleet.Fleet, absent time.Duration) (time.Duration, error) {
	hub := f.Client("hub")
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Project}
	var old magosv1.Rollout
	if err := hub.Get(ctx, key, &old); err != nil {
		return 0, fmt.Errorf("reading the Rollout: %w", err)
	}
	fresh := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: old.Name,
		Labels: old.Labels, Annotations: old.Annotations}, Spec: *old.Spec.DeepCopy()}
	var err error
	if err = hub.Delete(ctx, &old, client.Preconditions{UID: &old.UID}); err == nil {
		err = localcluster.Poll(time.Minute, func() error {
			if err := hub.Get(ctx, key, &magosv1.Rollout{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the deleted Rollout is still on the hub (%v)", err)
			}
			return nil
		})
	}
	deleted := time.Now()
	if err == nil {
		select {
		case <-time.After(absent):
		case <-ctx.Done():
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cerr := hub.Create(cctx, fresh); cerr != nil && !apierrors.IsAlreadyExists(cerr) {
		err = errors.Join(err, fmt.Errorf("creating the Rollout again: %w", cerr))
	}
	return time.Since(deleted), err
}

// keepChaosRun copies what a failing chaos run leaves to understand it, out of the test's
// temporary folder and into a new folder under the system's temporary directory, which it
// returns: the fleet's logs (every hub replica, agent and API server), the ledger, and
// violations.txt with the seed and every violation. The schedule of each trial and every
// observer's report are in the test's own output, which names the folder.
func keepChaosRun(fleetDir string, seed uint64, violations []string) (string, error) {
	kept, err := os.MkdirTemp("", fmt.Sprintf("magos-chaos-%d-", seed))
	if err != nil {
		return "", err
	}
	if err := os.CopyFS(filepath.Join(kept, "logs"), os.DirFS(filepath.Join(fleetDir, "logs"))); err != nil {
		return kept, fmt.Errorf("copying the logs: %w", err)
	}
	if raw, err := os.ReadFile(filepath.Join(fleetDir, "ledger")); err == nil {
		if err := os.WriteFile(filepath.Join(kept, "ledger"), raw, 0o644); err != nil {
			return kept, err
		}
	}
	text := fmt.Sprintf("seed %d (rerun with %s=%d)\n\n%s\n", seed, envChaosSeed, seed, strings.Join(violations, "\n\n"))
	return kept, os.WriteFile(filepath.Join(kept, "violations.txt"), []byte(text), 0o644)
}

// replayGrant writes on the hub's mirror of cluster's demo Workspace, with the hub's admin client, a
// grant of an earlier run of that Workspace (the latest run the watcher saw granted or running
// that is not the mirror's current run, preferably not its granted one either):
// execution-allowed "true", granted-by rollout, granted-run the old run. Until the Workspace has
// a run other than one the watcher saw (the commit's run, once its agent detected the commit),
// it waits, up to a minute. It returns what it wrote.
func replayGrant(ctx context.Context, f *devfleet.Fleet, w *watcher, cluster string) (string, error) {
	hub := f.Client("hub")
	deadline := time.Now().Add(time.Minute)
	for {
		var mirrors magosv1.WorkspaceList
		if err := hub.List(ctx, &mirrors, client.InNamespace(keys.ClusterNamespace(cluster)),
			client.MatchingLabels{keys.Mirror: "true", keys.Cluster: cluster}); err != nil {
			return "", fmt.Errorf("listing the mirrors of %s: %w", cluster, err)
		}
		mirrors.Items = slices.DeleteFunc(mirrors.Items, func(m magosv1.Workspace) bool {
			return mirror.OriginOf(cluster, &m).Name != demo.Workspace
		})
		if len(mirrors.Items) == 1 {
			m := mirrors.Items[0]
			var old string
			for _, run := range slices.Backward(w.runsOf(labelOf(w.members, cluster, demo.Workspace))) {
				if run == m.Status.CurrentRunID {
					continue
				}
				if old == "" || old == m.Annotations[keys.GrantedRun] {
					old = run
				}
			}
			if old != "" {
				patch := client.MergeFrom(m.DeepCopy())
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[keys.ExecutionAllowed] = "true"
				m.Annotations[keys.GrantedRun] = old
				m.Annotations[keys.GrantedBy] = keys.GrantedByRollout
				if err := hub.Patch(ctx, &m, patch); err != nil {
					return "", fmt.Errorf("writing the old grant on %s/%s: %w", m.Namespace, m.Name, err)
				}
				return fmt.Sprintf("granted-run %s on %s/%s (its current run %s)", old, m.Namespace, m.Name, m.Status.CurrentRunID), nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("no earlier run of %s to replay within a minute (seen %v, %d mirrors)",
				cluster, w.runsOf(labelOf(w.members, cluster, demo.Workspace)), len(mirrors.Items))
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// clusterState is what the hub's Cluster object said about a cluster in one poll.
type clusterState struct {
	Registered, Ready, Synced bool
}

func (c clusterState) problem() string {
	switch {
	case !c.Registered:
		return "deregistered"
	case !c.Ready:
		return "not Ready"
	case !c.Synced:
		return "unsynced"
	}
	return ""
}

// observation is one poll of the hub by the test: the Rollout and every Cluster, read together.
type observation struct {
	At           time.Time
	ResourceVer  string
	Current      bool // status.observedGeneration == metadata.generation
	Phase        magosv1.Phase
	Reason, Step string
	Message      string
	Paused       bool // spec.paused
	Generation   int64
	UID          types.UID
	Clusters     map[string]clusterState
	GrantedRuns  map[string]string   // by member's label: the granted-run annotation of its mirror
	Runs         map[string][]string // by member's label: its mirror's granted-run and currentRunID
	// Holder is the holder of the hub replicas' leader Lease, read before everything else of
	// the poll; Decisions are, by member's label, its mirror's grant annotations and the
	// replica that wrote them (magosproject.io/decided-by); StatusBy and StatusAt are the
	// Rollout's status.decidedBy and status.lastReconcileTime (new with every status written).
	Holder             string
	Decisions          map[string]decisionSeen
	StatusBy, StatusAt string
	ReadErr            error
	hasRolloutRead     bool
}

// decisionSeen is a mirror's decision as a poll saw it.
type decisionSeen struct {
	Grant string // every grant annotation, as one string: a change of it is a decision written
	By    string // magosproject.io/decided-by
}

// deposedDecisions checks two successive polls for a decision written by a hub replica that did
// not hold the leader Lease: a mirror's grant that changed between prev and cur, or a Rollout
// status written between them, carrying a replica's identity other than the Lease's holder that
// both polls read (the Lease is read first in a poll, so the write came after prev's read of the
// Lease showed another holder, and before cur's showed it still). A takeover between the two
// polls is not judged.
func deposedDecisions(prev, cur observation) []string {
	if prev.Holder == "" || prev.Holder != cur.Holder {
		return nil
	}
	var out []string
	for _, label := range slices.Sorted(maps.Keys(cur.Decisions)) {
		d := cur.Decisions[label]
		if p, ok := prev.Decisions[label]; ok && p.Grant != d.Grant && d.By != "" && d.By != cur.Holder {
			out = append(out, fmt.Sprintf("the decision on %s's mirror changed to %q, written by hub replica %s while %s held the leader Lease", label, d.Grant, d.By, cur.Holder))
		}
	}
	if prev.StatusAt != "" && cur.StatusAt != prev.StatusAt && cur.StatusBy != "" && cur.StatusBy != cur.Holder {
		out = append(out, fmt.Sprintf("the Rollout's status was written by hub replica %s while %s held the leader Lease", cur.StatusBy, cur.Holder))
	}
	return out
}

// settled reports whether the observation is a report of the end of a Rollout: RolloutCompleted,
// or Failed (for any reason) for the current spec.
func (o observation) settled() bool {
	return o.Current && (o.Phase == magosv1.PhaseApplied && o.Reason == magosv1.ReasonRolloutCompleted ||
		o.Phase == magosv1.PhaseFailed)
}

// pausedGrants checks three successive polls of the hub for a grant written while the hub knew
// the Rollout was paused (spec.paused stops new grants): when prev shows the Rollout paused with
// that spec observed (status.observedGeneration = generation) and next, read after cur's
// mirrors, still shows the same Rollout at the same generation, a granted-run first seen in cur
// was written between prev's read of the mirrors and cur's, while the Rollout was paused and
// the hub had said so.
func pausedGrants(prev, cur, next observation) []string {
	if !prev.Paused || !prev.Current || !next.Paused || next.UID != prev.UID || next.Generation != prev.Generation {
		return nil
	}
	var out []string
	for _, label := range slices.Sorted(maps.Keys(cur.GrantedRuns)) {
		if run := cur.GrantedRuns[label]; run != "" && run != prev.GrantedRuns[label] {
			out = append(out, fmt.Sprintf("%s granted run %s while the Rollout was paused (generation %d, paused and observed by the hub at %s, still paused at %s)",
				label, run, prev.Generation, prev.At.Format("15:04:05.000"), next.At.Format("15:04:05.000")))
		}
	}
	return out
}

// judgeReport checks one new report of the Rollout (cur, whose resourceVersion differs from
// prev's) against the Clusters read in the same poll and in the poll before (the report was
// written between the two): the hub must never report a Rollout RolloutCompleted or Failed
// while a cluster it rolls out to is unsynced or not Ready; and in a chaos trial nothing fails,
// so Failed is allowed only as NoWorkspacesFound while a cluster is deregistered (the
// documented outcome of removing a cluster). A problem seen in both polls is a violation; in
// only one of them, the report may have been written before it began or after it ended, and
// is only ambiguous.
func judgeReport(order []string, prev, cur observation) (violation, ambiguous string) {
	if !cur.settled() || cur.ResourceVer == prev.ResourceVer {
		return "", ""
	}
	var both, one []string
	deregistered := false
	for _, name := range order {
		p, c := prev.Clusters[name].problem(), cur.Clusters[name].problem()
		if p == "deregistered" || c == "deregistered" {
			deregistered = true
		}
		switch {
		case p != "" && c != "":
			both = append(both, name+" "+c)
		case p != "" || c != "":
			one = append(one, name+" "+p+c)
		}
	}
	what := fmt.Sprintf("Rollout reported %s/%s at step %q (%s)", cur.Phase, cur.Reason, cur.Step, cur.Message)
	if cur.Phase == magosv1.PhaseFailed && !(cur.Reason == magosv1.ReasonNoWorkspacesFound && deregistered) {
		return what + " although nothing fails in a chaos trial; clusters: " + describe(order, cur), ""
	}
	if cur.Phase == magosv1.PhaseFailed {
		return "", "" // NoWorkspacesFound while a cluster is deregistered: as documented
	}
	if len(both) > 0 {
		return what + " while " + strings.Join(both, ", ") + " (in the polls before and after the report)", ""
	}
	if len(one) > 0 {
		return "", what + " while " + strings.Join(one, ", ") + " in one of the two polls around the report"
	}
	return "", ""
}

func describe(order []string, o observation) string {
	var out []string
	for _, name := range order {
		p := o.Clusters[name].problem()
		if p == "" {
			p = "Ready and synced"
		}
		out = append(out, name+" "+p)
	}
	return strings.Join(out, ", ")
}

// watcher polls the hub from outside the system under test: the Rollout, the Clusters and the
// grants on the mirrors, and judges every new report of the Rollout.
type watcher struct {
	f       *devfleet.Fleet
	order   []string
	members []member

	mu         sync.Mutex
	last       observation
	before     observation // the successful poll before last
	violations []string
	ambiguous  []string
	grants     []grantSeen // new grants, when first seen
	polls      int
	runs       map[string][]string // by member's label: every run granted or current seen, oldest first, for good
	previewing int                 // polls that saw the Rollout Previewing
	spokes     []spokeRead         // every read of the regions' Workspaces, from their spokes
}

// spokeRead is one read of a region's Workspace from its spoke's API server, the way its agent
// left it: the read started At, so the Workspace was in this state at some time after At.
type spokeRead struct {
	Region                                        string // the member's ledger label
	At                                            time.Time
	Phase                                         magosv1.Phase
	CurrentRevision, ObservedRevision, PlanDigest string
}

// hasPlanOf reports whether the read shows a plan of commit sha: Planned or Applying it with a
// plan digest, or having applied it (status.observedRevision, whatever the phase now: a scheduled
// re-plan after the apply mints a new run).
func (r spokeRead) hasPlanOf(sha string) bool {
	if r.ObservedRevision == sha {
		// It applied the commit: whatever it does now (a scheduled re-plan mints a new run,
		// Pending), the commit was planned there before.
		return true
	}
	switch r.Phase {
	case magosv1.PhasePlanned, magosv1.PhaseApplying:
		return r.CurrentRevision == sha && r.PlanDigest != ""
	case magosv1.PhaseApplied:
		return r.ObservedRevision == sha
	}
	return false
}

// previewViolations checks, for a Rollout with planFirst, one release against the spokes' own
// records: once the ledger shows the release's first apply, every other region must already have
// planned it, so no read of another region's Workspace started after that apply (and before
// done, when the release had rolled out everywhere) may show it without a plan of the commit.
func previewViolations(reads []spokeRead, release, sha string, lines []ledgerLine, done time.Time) []string {
	var first ledgerLine
	for _, l := range lines {
		if l.Release == release && (first.At.IsZero() || l.At.Before(first.At)) {
			first = l
		}
	}
	if first.At.IsZero() {
		return nil
	}
	var out []string
	reported := map[string]bool{}
	for _, r := range reads {
		if r.Region == first.Region || reported[r.Region] || !r.At.After(first.At) || r.At.After(done) || r.hasPlanOf(sha) {
			continue
		}
		reported[r.Region] = true
		out = append(out, fmt.Sprintf("%s applied %s (%.8s) at %s, but %s had not planned it at %s (%s, current revision %.8s, plan %q)",
			first.Region, release, sha, first.At.Format("15:04:05.000"), r.Region, r.At.Format("15:04:05.000"),
			r.Phase, r.CurrentRevision, r.PlanDigest))
	}
	return out
}

// runsOf returns the runs seen so far of the Workspace with that ledger label, oldest first.
func (w *watcher) runsOf(label string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.runs[label])
}

// remember records the runs of o for runsOf. Called with mu held.
func (w *watcher) remember(o observation) {
	if w.runs == nil {
		w.runs = map[string][]string{}
	}
	for cluster, runs := range o.Runs {
		for _, run := range runs {
			if run != "" && !slices.Contains(w.runs[cluster], run) {
				w.runs[cluster] = append(w.runs[cluster], run)
			}
		}
	}
}

func (w *watcher) run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		reads := w.readSpokes(ctx) // first, and whatever the hub answers
		o := w.observe(ctx)
		w.mu.Lock()
		w.spokes = append(w.spokes, reads...)
		if o.ReadErr == nil && o.Reason == magosv1.ReasonPreviewing {
			w.previewing++
		}
		w.polls++
		if o.ReadErr == nil {
			w.remember(o)
			if w.before.hasRolloutRead && w.last.hasRolloutRead {
				for _, v := range pausedGrants(w.before, w.last, o) {
					w.violations = append(w.violations, w.last.At.Format("15:04:05.000")+" "+v)
				}
			}
			if w.last.hasRolloutRead {
				for _, v := range deposedDecisions(w.last, o) {
					w.violations = append(w.violations, o.At.Format("15:04:05.000")+" "+v)
				}
				if v, a := judgeReport(w.order, w.last, o); v != "" {
					w.violations = append(w.violations, o.At.Format("15:04:05.000")+" "+v)
				} else if a != "" {
					w.ambiguous = append(w.ambiguous, o.At.Format("15:04:05.000")+" "+a)
				}
				for cluster, run := range o.GrantedRuns {
					if run != "" && run != w.last.GrantedRuns[cluster] {
						w.grants = append(w.grants, grantSeen{cluster, run, o.At})
					}
				}
			}
			w.before, w.last = w.last, o
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *watcher) observe(ctx context.Context) observation {
	hub := w.f.Client("hub")
	o := observation{At: time.Now(), Clusters: map[string]clusterState{}, GrantedRuns: map[string]string{},
		Runs: map[string][]string{}, Decisions: map[string]decisionSeen{}}
	var lease coordinationv1.Lease
	if o.ReadErr = hub.Get(ctx, client.ObjectKey{Namespace: devfleet.HubLeaseNamespace, Name: devfleet.HubLeaseName}, &lease); o.ReadErr != nil {
		return o
	}
	if lease.Spec.HolderIdentity != nil {
		o.Holder = *lease.Spec.HolderIdentity
	}
	var r magosv1.Rollout
	if o.ReadErr = hub.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Project}, &r); o.ReadErr != nil {
		return o
	}
	var clusters magosv1.ClusterList
	if o.ReadErr = hub.List(ctx, &clusters); o.ReadErr != nil {
		return o
	}
	var mirrors magosv1.WorkspaceList
	if o.ReadErr = hub.List(ctx, &mirrors, client.MatchingLabels{keys.Mirror: "true"}); o.ReadErr != nil {
		return o
	}
	o.hasRolloutRead = true
	o.ResourceVer, o.Current = r.ResourceVersion, r.Status.ObservedGeneration == r.Generation
	o.Paused, o.Generation, o.UID = r.Spec.Paused, r.Generation, r.UID
	o.Phase, o.Reason, o.Step, o.Message = r.Status.Phase, r.Status.Reason, r.Status.CurrentStepName, r.Status.Message
	o.StatusBy = r.Status.DecidedBy
	if r.Status.LastReconcileTime != nil {
		o.StatusAt = r.Status.LastReconcileTime.UTC().Format(time.RFC3339Nano)
	}
	for _, c := range clusters.Items {
		if c.DeletionTimestamp != nil {
			continue
		}
		o.Clusters[c.Name] = clusterState{Registered: true,
			Ready:  meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionReady),
			Synced: c.Status.SyncedSince != nil}
	}
	for _, m := range mirrors.Items {
		cluster := m.Labels[keys.Cluster]
		label := labelOf(w.members, cluster, mirror.OriginOf(cluster, &m).Name)
		o.GrantedRuns[label] = m.Annotations[keys.GrantedRun]
		o.Runs[label] = []string{m.Annotations[keys.GrantedRun], m.Status.CurrentRunID}
		var grant []string
		for _, k := range []string{keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy, keys.GrantedRevision, keys.GrantedOperation, keys.GrantedPlan} {
			grant = append(grant, m.Annotations[k])
		}
		o.Decisions[label] = decisionSeen{Grant: strings.Join(grant, "|"), By: m.Annotations[keys.DecidedBy]}
	}
	return o
}

// readSpokes reads every member's Workspace from its spoke (a member whose read fails is left out
// of this poll).
func (w *watcher) readSpokes(ctx context.Context) []spokeRead {
	var out []spokeRead
	for _, m := range w.members {
		at := time.Now()
		var ws magosv1.Workspace
		if err := w.f.Client(m.Cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: m.Workspace}, &ws); err != nil {
			continue
		}
		out = append(out, spokeRead{Region: m.Label, At: at, Phase: ws.Status.Phase, CurrentRevision: ws.Status.CurrentRevision,
			ObservedRevision: ws.Status.ObservedRevision, PlanDigest: ws.Status.PlanDigest})
	}
	return out
}

// spokeReads returns the reads of the spokes since the last take.
func (w *watcher) spokeReads() []spokeRead {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.spokes)
}

// grantSeen is a new grant (granted-run on a mirror) the watcher saw.
type grantSeen struct {
	Member, Run string // the member's ledger label
	At          time.Time
}

// take returns what the watcher found so far (and how many polls saw the Rollout Previewing)
// and forgets it, the spokes' reads included.
func (w *watcher) take() (violations, ambiguous []string, grants []grantSeen, polls, previewing int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	violations, ambiguous, grants, polls, previewing = w.violations, w.ambiguous, w.grants, w.polls, w.previewing
	w.violations, w.ambiguous, w.grants, w.polls, w.previewing, w.spokes = nil, nil, nil, 0, 0, nil
	return
}

// chaosSettings reads the settings of TestChaos from the environment.
func chaosSettings(t *testing.T) (trials, commits int, seed uint64) {
	t.Helper()
	intFrom := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", name, v)
		}
		return n
	}
	trials, commits = intFrom(envChaosTrials, 3), intFrom(envChaosCommits, 2)
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv(envChaosSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: want a number", envChaosSeed, v)
		}
	}
	return trials, commits, seed
}

// trialLedgerViolations checks the ledger lines of one trial's releases (the ledger also holds
// the other trials'): every release applied in step order (steps: the ledger labels of each
// step's Workspaces, checkStepLedger), exactly once per Workspace.
func trialLedgerViolations(lines []ledgerLine, steps [][]string, releases []string) []violation {
	var mine []ledgerLine
	for _, l := range lines {
		if slices.Contains(releases, l.Release) {
			mine = append(mine, l)
		}
	}
	return checkStepLedger(mine, steps, releases)
}

// percentiles returns p50, p90 and max of ds (zeros when empty).
func percentiles(ds []time.Duration) (p50, p90, top time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.5), at(0.9), s[len(s)-1]
}

// TestChaos: on one fleet (hub and three regional spokes, real binaries, real tofu), after the
// demo Rollout completed and a second Workspace was added to each spoke (in the same step,
// tracking the same repository spelled otherwise), each trial pushes new commits of the ledger
// module one at a time while a seeded random schedule injects faults: the hub (both replicas) or
// an agent killed and restarted, the leading hub replica killed, or suspended, so that the
// standby takes over, an agent suspended, an agent partitioned from the hub at the transport
// level, a cluster removed from the hub's config and added back, a delayed mirror, an old grant
// replayed onto a mirror, the Rollout paused, or deleted and created again. Every fault is
// healed before the wait for the commit, which is bounded. Every second trial sets the
// Rollout's planFirst. Observers outside Magos judge each trial: the ledger the module writes on
// every apply (exactly once per Workspace and release, every Workspace of a step before the
// first of the next), the test's own polls of the Rollout, Clusters and mirrors on the hub
// (never RolloutCompleted or Failed while a cluster is unsynced or not Ready, no grant while the
// hub has the Rollout paused), and, in a planFirst trial, its reads of the Workspaces from the
// spokes (none without a plan of the commit once another applied it). Settings:
// MAGOS_CHAOS_TRIALS, MAGOS_CHAOS_SEED, MAGOS_CHAOS_COMMITS; see docs (make chaos).
func TestChaos(t *testing.T) {
	trials, commits, seed := chaosSettings(t)
	t.Logf("chaos: %d trials of %d commits, seed %d (rerun with %s=%d)", trials, commits, seed, envChaosSeed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6d61676f73))

	var (
		faults     = map[string]int{}
		total      int
		violations []string
		resumes    = map[string][]time.Duration{} // by fault kind
		ran        int
		// fleetDir is the fleet's folder (logs, ledger), read by report once the fleet stopped.
		fleetDir string
	)
	report := func() {
		var byKind []string
		var all []time.Duration
		for _, k := range faultKinds {
			byKind = append(byKind, fmt.Sprintf("%s=%d", k, faults[k]))
			all = append(all, resumes[k]...)
		}
		t.Logf("chaos: %d trials, %d faults (%s), %d violations", ran, total, strings.Join(byKind, " "), len(violations))
		// Only faults healed while the commit had not rolled out everywhere yet have a resume.
		resumeLine := func(what string, ds []time.Duration) {
			p50, p90, top := percentiles(ds)
			t.Logf("chaos: from a fault healed to the Rollout resuming (next grant or apply), %s, over %d faults: p50 %s, p90 %s, max %s",
				what, len(ds), p50.Round(time.Millisecond), p90.Round(time.Millisecond), top.Round(time.Millisecond))
		}
		resumeLine("all kinds", all)
		for _, k := range faultKinds {
			if len(resumes[k]) > 0 {
				resumeLine(k, resumes[k])
			}
		}
		for _, v := range violations {
			t.Errorf("violation: %s", v)
		}
		if len(violations) > 0 && fleetDir != "" {
			if kept, err := keepChaosRun(fleetDir, seed, violations); err != nil {
				t.Errorf("keeping the failing run's logs: %v", err)
			} else {
				t.Logf("chaos: the failing run's logs (hubs, agents, API servers), ledger and violations are kept in %s", kept)
			}
		}
		line := fmt.Sprintf("chaos: trials=%d faults=%d violations=%d seed=%d", ran, total, len(violations), seed)
		t.Log(line)
		if path := os.Getenv(envChaosSummary); path != "" {
			if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
				t.Errorf("writing the summary: %v", err)
			}
		}
	}
	defer report()

	// Bounded, and long enough for every commit's faults and waits (a few minutes at most each).
	ctx, cancel := context.WithTimeout(context.Background(), max(60*time.Minute, time.Duration(trials*commits)*3*time.Minute))
	defer cancel()
	var progress bytes.Buffer
	dir := os.Getenv(envChaosDir)
	if dir == "" {
		dir = t.TempDir()
	}
	// Every agent but the first runs with its clock skewed, up to five minutes ahead or behind,
	// drawn from the seed (apart from the faults' draws, so that a seed's schedule is kept).
	skews := map[string]time.Duration{}
	clocks := rand.New(rand.NewPCG(seed, 0x636c6f636b))
	for _, name := range devfleet.DefaultSpokes[1:] {
		skews[name] = time.Duration(clocks.IntN(601)-300) * time.Second
	}
	t.Logf("chaos: agents' clocks skewed by %v", skews)
	f, err := devfleet.Start(ctx, devfleet.Options{Dir: dir, Progress: &progress, HubProxy: true, ControllerManager: true,
		HubReplicas: chaosHubReplicas, AgentClockSkew: skews})
	if err != nil {
		t.Fatalf("starting the fleet: %v\n%s", err, progress.String())
	}
	defer func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	}()
	fleetDir = f.Dir
	ledger := filepath.Join(f.Dir, "ledger")
	s, err := demo.Run(ctx, f, demo.Options{Module: ledgerModule("v1", ledger), PollIntervals: chaosPollIntervals})
	if err != nil || !s.Completed {
		t.Fatalf("the demo Rollout did not complete (%v):\n%s", err, s.Final)
	}
	v1 := workspace(t, ctx, f, f.Order[0]).Status.ObservedRevision
	if err := waitRelease(t, ctx, f, ledger, "v1", v1); err != nil {
		t.Fatalf("the first release: %v", err)
	}
	// A second Workspace in every spoke, in the first one's step, the same source spelled
	// otherwise: the Rollout rolls v1 out to them, step by step, before the trials.
	if err := addSecondWorkspaces(ctx, f); err != nil {
		t.Fatalf("adding the second Workspaces: %v", err)
	}
	members := chaosMembers(f.Order)
	steps := ledgerSteps(f.Order, members)
	if err := waitMembersRelease(ctx, f, members, ledger, "v1", v1); err != nil {
		t.Fatalf("the first release on the second Workspaces: %v\nRollout: %s", err, rolloutLine(t, ctx, f))
	}
	t.Logf("chaos: steps (ledger labels) %v; second Workspaces track %s", steps, secondSpelling(workspace(t, ctx, f, f.Order[0]).Spec.Source))

	w := &watcher{f: f, order: f.Order, members: members}
	wctx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); w.run(wctx) }()
	defer func() { stopWatching(); <-watched }()

	for trial := 1; trial <= trials; trial++ {
		var releases []string
		var plan [][]fault
		for c := 1; c <= commits; c++ {
			releases = append(releases, fmt.Sprintf("t%dc%d", trial, c))
			plan = append(plan, schedule(rng, f.Order))
		}
		for c, fs := range plan {
			var text []string
			for _, ft := range fs {
				text = append(text, ft.String())
			}
			t.Logf("trial %d: commit %s: faults %s", trial, releases[c], strings.Join(text, "; "))
		}
		ran = trial
		// Every second trial previews each commit fleet-wide first (spec.planFirst).
		planFirst := trial%2 == 0
		if err := f.Client("hub").Patch(ctx, &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: demo.Project}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"planFirst":%t}}`, planFirst))); err != nil {
			t.Fatalf("trial %d: setting planFirst: %v", trial, err)
		}
		t.Logf("trial %d: planFirst %v", trial, planFirst)
		stalled := ""
		for c, release := range releases {
			sha, err := demo.Commit(f, "edge module "+release, ledgerModule(release, ledger))
			if err != nil {
				t.Fatal(err)
			}
			committed := time.Now()
			t.Logf("trial %d: committed %s as %s at %s", trial, release, sha[:8], committed.Format("15:04:05.000"))
			type heal struct {
				kind string
				at   time.Time
			}
			var healed []heal
			for _, ft := range plan[c] {
				select {
				case <-time.After(ft.After):
				case <-ctx.Done():
				}
				began := time.Now()
				at, what, err := inject(ctx, f, w, ft, ledger, release)
				faults[ft.Kind]++
				total++
				if err != nil {
					t.Fatalf("trial %d, %s: injecting %s: %v", trial, release, ft, err)
				}
				if what != "" {
					what = ": " + what
				}
				t.Logf("trial %d: %s: %s(%s) from %s to %s%s", trial, release, ft.Kind, ft.Target,
					began.Format("15:04:05.000"), at.Format("15:04:05.000"), what)
				healed = append(healed, heal{ft.Kind, at})
			}
			// Every fault of the commit is healed: the commit must now roll out everywhere.
			if err := waitMembersRelease(ctx, f, members, ledger, release, sha); err != nil {
				stalled = fmt.Sprintf("trial %d (seed %d): %s (%s) did not roll out everywhere within the bounded wait after every fault was healed: %v\nRollout: %s",
					trial, seed, release, sha[:8], err, rolloutLine(t, ctx, f))
			}
			done := time.Now()
			lines, err := readLedger(ledger)
			if err != nil {
				t.Fatal(err)
			}
			if planFirst {
				for _, v := range previewViolations(w.spokeReads(), release, sha, lines, done) {
					violations = append(violations, fmt.Sprintf("trial %d (seed %d): preview: %s", trial, seed, v))
				}
			}
			progress := w.grantsSoFar()
			for _, l := range lines {
				if l.Release == release {
					progress = append(progress, l.At)
				}
			}
			slices.SortFunc(progress, func(a, b time.Time) int { return a.Compare(b) })
			for _, h := range healed {
				if i := slices.IndexFunc(progress, func(p time.Time) bool { return p.After(h.at) && p.Before(done) }); i >= 0 {
					resumes[h.kind] = append(resumes[h.kind], progress[i].Sub(h.at))
				}
			}
			t.Logf("trial %d: %s rolled out %s after its commit", trial, release, done.Sub(committed).Round(time.Millisecond))
			if stalled != "" {
				break
			}
		}
		vs, amb, grants, polls, previewing := w.take()
		var grantText strings.Builder
		for _, g := range grants {
			fmt.Fprintf(&grantText, "  %-12s run %s %s\n", g.Member, g.Run, g.At.Format("15:04:05.000"))
		}
		t.Logf("trial %d: grants seen on the hub's mirrors:\n%s", trial, grantText.String())
		for _, a := range amb {
			t.Logf("trial %d: ambiguous (not counted): %s", trial, a)
		}
		for _, v := range vs {
			violations = append(violations, fmt.Sprintf("trial %d (seed %d): status: %s", trial, seed, v))
		}
		lines, err := readLedger(ledger)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range trialLedgerViolations(lines, steps, releases) {
			text := fmt.Sprintf("trial %d (seed %d): ledger: %s", trial, seed, v)
			if i == 0 { // the trial's ledger, once
				text += "\n  the trial's ledger:\n" + ledgerText(lines, releases)
			}
			violations = append(violations, text)
		}
		t.Logf("trial %d: %d polls of the hub (%d saw the Rollout Previewing), %d status violations, ledger:\n%s",
			trial, polls, previewing, len(vs), ledgerText(lines, releases))
		if stalled != "" {
			violations = append(violations, stalled)
			break // the fleet did not recover: the next trials would only repeat it
		}
	}
}

// grantsSoFar returns when the grants seen since the last take were seen.
func (w *watcher) grantsSoFar() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Time
	for _, g := range w.grants {
		out = append(out, g.At)
	}
	return out
}

// ledgerText renders the ledger lines of releases.
func ledgerText(lines []ledgerLine, releases []string) string {
	var b strings.Builder
	for _, l := range lines {
		if slices.Contains(releases, l.Release) {
			fmt.Fprintf(&b, "  %-12s %s %s\n", l.Region, l.Release, l.At.Format("15:04:05.000"))
		}
	}
	return b.String()
}

// rolloutLine renders where the Rollout stands, for a stalled commit.
func rolloutLine(t *testing.T, ctx context.Context, f *devfleet.Fleet) string {
	r := rolloutOf(t, ctx, f)
	return fmt.Sprintf("%s/%s at step %q: %s", r.Status.Phase, r.Status.Reason, r.Status.CurrentStepName, r.Status.Message)
}

// TestChaosObserversCatchViolations: the observers of TestChaos can fail. The ledger check
// catches an apply out of step order and a duplicate apply injected into a trial's ledger (and
// ignores the other trials' lines), and, with two Workspaces a step, a step started before the
// last Workspace of the step before applied, a Workspace that never applies, one that applies
// again after its Rollout was recreated and a step applied before the step before it; the pause
// check catches a grant written while the hub had the Rollout paused, and lets through one
// written before the hub observed the pause, around the resume, or by a recreated Rollout; the
// preview check catches a region seen on its spoke without
// a plan of the commit after the first region applied it; the status check catches a RolloutCompleted reported while
// a cluster was unsynced or not Ready, and a Failed in a trial where nothing fails, and lets
// through NoWorkspacesFound while a cluster is deregistered, a report without a change, and a
// problem seen in only one of the two polls around a report (ambiguous, not counted).
func TestChaosObserversCatchViolations(t *testing.T) {
	order := []string{"us-east-1", "eu-west-1", "ap-south-1"}
	t.Run("ledger", func(t *testing.T) {
		lines, err := parseLedger([]byte(`us-east-1 t1c1 1
eu-west-1 t1c1 2
ap-south-1 t1c1 3
ap-south-1 t2c1 4
us-east-1 t2c1 5
eu-west-1 t2c1 6
us-east-1 t2c1 7
ap-south-1 t3c1 8
`))
		if err != nil {
			t.Fatal(err)
		}
		steps := ledgerSteps(order, []member{{"us-east-1", "a", "us-east-1"}, {"eu-west-1", "a", "eu-west-1"}, {"ap-south-1", "a", "ap-south-1"}})
		if got := trialLedgerViolations(lines, steps, []string{"t1c1"}); len(got) != 0 {
			t.Errorf("a clean trial: %v", got)
		}
		got := trialLedgerViolations(lines, steps, []string{"t2c1"})
		want := []violation{
			{"t2c1", "ap-south-1", "applied before us-east-1 (an earlier step) had applied it"},
			{"t2c1", "ap-south-1", "applied before eu-west-1 (an earlier step) had applied it"},
			{"t2c1", "us-east-1", "applied more than once"},
		}
		if !slices.Equal(got, want) {
			t.Errorf("out of order and duplicate:\n got %v\nwant %v", got, want)
		}
	})

	// Two Workspaces a step (chaosMembers): each applies each release once, and the first apply
	// of a step comes after the last apply of the step before.
	t.Run("ledger, two Workspaces a step", func(t *testing.T) {
		steps := ledgerSteps(order, chaosMembers(order))
		clean := `us-east-1-b t1c1 1
us-east-1 t1c1 2
eu-west-1 t1c1 3
eu-west-1-b t1c1 4
ap-south-1-b t1c1 5
ap-south-1 t1c1 6
`
		for _, tc := range []struct {
			name, ledger string
			want         []violation
		}{
			{"in step order, either Workspace of a step first", clean, nil},
			{"a later step starts before the last Workspace of a step applied", `us-east-1 t1c1 1
eu-west-1 t1c1 2
us-east-1-b t1c1 3
eu-west-1-b t1c1 4
ap-south-1 t1c1 5
ap-south-1-b t1c1 6
`, []violation{{"t1c1", "eu-west-1", "applied before us-east-1-b (an earlier step) had applied it"}}},
			{"a second Workspace that never applies", `us-east-1 t1c1 1
us-east-1-b t1c1 2
eu-west-1 t1c1 3
ap-south-1 t1c1 5
ap-south-1-b t1c1 6
`, []violation{
				{"t1c1", "ap-south-1", "applied before eu-west-1-b (an earlier step) had applied it"},
				{"t1c1", "ap-south-1-b", "applied before eu-west-1-b (an earlier step) had applied it"},
				{"t1c1", "eu-west-1-b", "never applied"},
			}},
			// What a rollout-recreate that started the commit over would leave: the first
			// Workspace applies again after the Rollout came back.
			{"a Workspace applies again after its Rollout was recreated", clean + "us-east-1 t1c1 7\n",
				[]violation{{"t1c1", "us-east-1", "applied more than once"}}},
			// What a suspended leader that woke up and granted the next step would leave.
			{"a step applied before the step before it", `us-east-1 t1c1 1
us-east-1-b t1c1 2
ap-south-1-b t1c1 3
eu-west-1 t1c1 4
eu-west-1-b t1c1 5
ap-south-1 t1c1 6
`, []violation{
				{"t1c1", "ap-south-1-b", "applied before eu-west-1 (an earlier step) had applied it"},
				{"t1c1", "ap-south-1-b", "applied before eu-west-1-b (an earlier step) had applied it"},
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lines, err := parseLedger([]byte(tc.ledger))
				if err != nil {
					t.Fatal(err)
				}
				if got := trialLedgerViolations(lines, steps, []string{"t1c1"}); !slices.Equal(got, tc.want) {
					t.Errorf("trialLedgerViolations:\n got %v\nwant %v", got, tc.want)
				}
			})
		}
	})

	// A grant while paused, as a rollout-pause or the pause of a leader-stop would show it if
	// the hub (or a suspended leader waking up) granted through the pause.
	t.Run("paused", func(t *testing.T) {
		poll := func(paused, current bool, gen int64, grants map[string]string) observation {
			return observation{Paused: paused, Current: current, Generation: gen, UID: "u1", GrantedRuns: grants}
		}
		none := map[string]string{"us-east-1": "r1"}
		more := map[string]string{"us-east-1": "r1", "eu-west-1": "r2"}
		for _, tc := range []struct {
			name            string
			prev, cur, next observation
			want            int
		}{
			{"a grant while the hub had the pause and still has it", poll(true, true, 2, none), poll(true, true, 2, more), poll(true, true, 2, more), 1},
			{"a grant before the hub observed the pause", poll(true, false, 2, none), poll(true, true, 2, more), poll(true, true, 2, more), 0},
			{"a grant around the resume", poll(true, true, 2, none), poll(true, true, 2, more), poll(false, true, 3, more), 0},
			{"a grant of a recreated Rollout", poll(true, true, 2, none), poll(true, true, 2, more), observation{Paused: true, Generation: 2, UID: "u2"}, 0},
			{"no new grant while paused", poll(true, true, 2, more), poll(true, true, 2, more), poll(true, true, 2, more), 0},
			{"a grant while not paused", poll(false, true, 1, none), poll(false, true, 1, more), poll(false, true, 1, more), 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if got := pausedGrants(tc.prev, tc.cur, tc.next); len(got) != tc.want {
					t.Errorf("pausedGrants = %q, want %d", got, tc.want)
				}
			})
		}
	})

	// A decision landed by a replica that no longer leads, as a suspended leader waking up
	// (leader-stop) would leave it without the API server's fence.
	t.Run("deposed leader", func(t *testing.T) {
		poll := func(holder, grant, by, statusAt, statusBy string) observation {
			return observation{Holder: holder, Decisions: map[string]decisionSeen{"us-east-1": {Grant: grant, By: by}},
				StatusAt: statusAt, StatusBy: statusBy}
		}
		for _, tc := range []struct {
			name      string
			prev, cur observation
			want      int
		}{
			{"a grant by a replica that does not hold the Lease", poll("hub-2", "", "hub", "t1", "hub-2"), poll("hub-2", "true|r1", "hub", "t1", "hub-2"), 1},
			{"a status by a replica that does not hold the Lease", poll("hub-2", "", "", "t1", "hub-2"), poll("hub-2", "", "", "t2", "hub"), 1},
			{"a grant by the leader", poll("hub-2", "", "hub", "t1", "hub-2"), poll("hub-2", "true|r1", "hub-2", "t2", "hub-2"), 0},
			{"a grant around a takeover", poll("hub", "", "hub", "t1", "hub"), poll("hub-2", "true|r1", "hub", "t1", "hub"), 0},
			{"an old grant left by a former leader", poll("hub-2", "true|r1", "hub", "t1", "hub"), poll("hub-2", "true|r1", "hub", "t1", "hub"), 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if got := deposedDecisions(tc.prev, tc.cur); len(got) != tc.want {
					t.Errorf("deposedDecisions = %q, want %d", got, tc.want)
				}
			})
		}
	})

	t.Run("preview", func(t *testing.T) {
		at := func(ms int) time.Time { return time.Unix(100, int64(ms)*int64(time.Millisecond)) }
		lines := []ledgerLine{{"us-east-1", "t2c1", at(1000)}, {"eu-west-1", "t2c1", at(5000)}, {"ap-south-1", "t2c1", at(9000)}}
		done := at(10000)
		planned := func(region string, ms int) spokeRead {
			return spokeRead{Region: region, At: at(ms), Phase: magosv1.PhasePlanned, CurrentRevision: "sha-2", PlanDigest: "d"}
		}
		for _, tc := range []struct {
			name  string
			reads []spokeRead
			want  int
		}{
			{"every other region planned before the first apply", []spokeRead{
				{Region: "eu-west-1", At: at(500), Phase: magosv1.PhasePlanning, CurrentRevision: "sha-2"},
				planned("eu-west-1", 900), planned("ap-south-1", 1100),
				{Region: "eu-west-1", At: at(5500), Phase: magosv1.PhaseApplied, ObservedRevision: "sha-2"},
				{Region: "us-east-1", At: at(1100), Phase: magosv1.PhaseApplying, CurrentRevision: "sha-2"}, // the first region itself
			}, 0},
			{"a region still planning after the first apply", []spokeRead{
				planned("eu-west-1", 1100), {Region: "ap-south-1", At: at(1200), Phase: magosv1.PhasePlanning, CurrentRevision: "sha-2"},
			}, 1},
			{"a region planned the old commit only", []spokeRead{
				{Region: "ap-south-1", At: at(2000), Phase: magosv1.PhasePlanned, CurrentRevision: "sha-1", PlanDigest: "d"},
			}, 1},
			{"a region that applied the commit re-plans on its schedule", []spokeRead{
				planned("eu-west-1", 900), planned("ap-south-1", 900),
				{Region: "ap-south-1", At: at(9500), Phase: magosv1.PhasePending, CurrentRevision: "sha-2", ObservedRevision: "sha-2"},
			}, 0},
			{"reads after the release rolled out are not judged", []spokeRead{
				{Region: "ap-south-1", At: at(11000), Phase: magosv1.PhasePending},
			}, 0},
			{"one violation per region", []spokeRead{
				{Region: "ap-south-1", At: at(2000), Phase: magosv1.PhasePending}, {Region: "ap-south-1", At: at(2100), Phase: magosv1.PhasePending},
				{Region: "eu-west-1", At: at(2000), Phase: magosv1.PhasePending},
			}, 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if got := previewViolations(tc.reads, "t2c1", "sha-2", lines, done); len(got) != tc.want {
					t.Errorf("previewViolations = %q, want %d", got, tc.want)
				}
			})
		}
	})

	healthy := map[string]clusterState{}
	for _, name := range order {
		healthy[name] = clusterState{Registered: true, Ready: true, Synced: true}
	}
	with := func(name string, st clusterState) map[string]clusterState {
		m := maps.Clone(healthy)
		if st.Registered {
			m[name] = st
		} else {
			delete(m, name)
		}
		return m
	}
	progressing := observation{ResourceVer: "1", Current: true, Phase: magosv1.PhaseReconciling,
		Reason: magosv1.ReasonLevelProgressing, Clusters: healthy}
	report := func(rv string, phase magosv1.Phase, reason string, clusters map[string]clusterState) observation {
		return observation{ResourceVer: rv, Current: true, Phase: phase, Reason: reason, Step: "ap-south-1", Clusters: clusters}
	}
	unsynced := clusterState{Registered: true, Ready: true}
	notReady := clusterState{Registered: true, Synced: true}
	for _, tc := range []struct {
		name           string
		prev, cur      observation
		violation, amb bool
	}{
		{"completed with every cluster Ready and synced", progressing,
			report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, healthy), false, false},
		{"completed while a cluster is unsynced", observation{ResourceVer: "1", Clusters: with("eu-west-1", unsynced)},
			report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, with("eu-west-1", unsynced)), true, false},
		{"completed while a cluster is not Ready", observation{ResourceVer: "1", Clusters: with("us-east-1", notReady)},
			report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, with("us-east-1", notReady)), true, false},
		{"completed while a cluster is deregistered", observation{ResourceVer: "1", Clusters: with("us-east-1", clusterState{})},
			report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, with("us-east-1", clusterState{})), true, false},
		{"completed, a cluster went unready after the report", progressing,
			report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, with("eu-west-1", notReady)), false, true},
		{"the same completed report polled again", report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, with("eu-west-1", notReady)),
			report("2", magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, with("eu-west-1", notReady)), false, false},
		{"a step failed", progressing, report("2", magosv1.PhaseFailed, magosv1.ReasonStepFailed, healthy), true, false},
		{"an empty step while every cluster is registered", observation{ResourceVer: "1", Clusters: with("us-east-1", unsynced)},
			report("2", magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, with("us-east-1", unsynced)), true, false},
		{"an empty step while a cluster is deregistered", progressing,
			report("2", magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, with("us-east-1", clusterState{})), false, false},
		{"waiting for an unsynced cluster", progressing,
			report("2", magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, with("us-east-1", unsynced)), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, a := judgeReport(order, tc.prev, tc.cur)
			if (v != "") != tc.violation || (a != "") != tc.amb {
				t.Errorf("judgeReport: violation %q, ambiguous %q; want violation %v, ambiguous %v", v, a, tc.violation, tc.amb)
			}
		})
	}
}

// TestKeepChaosRun: a failing chaos run's logs, ledger and violations are copied out of the
// test's temporary folder into a folder of their own.
func TestKeepChaosRun(t *testing.T) {
	fleet := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fleet, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"logs/hub.log": "hub says\n", "logs/agent-eu-west-1.log": "agent says\n", "ledger": "eu-west-1 v2 1\n"} {
		if err := os.WriteFile(filepath.Join(fleet, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := keepChaosRun(fleet, 42, []string{"trial 1 (seed 42): ledger: eu-west-1 v2: applied before us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(kept)
	for name, want := range map[string]string{"logs/hub.log": "hub says", "logs/agent-eu-west-1.log": "agent says",
		"ledger": "eu-west-1 v2", "violations.txt": "applied before us-east-1"} {
		raw, err := os.ReadFile(filepath.Join(kept, name))
		if err != nil || !strings.Contains(string(raw), want) {
			t.Errorf("%s in %s: %q (%v), want it to hold %q", name, kept, raw, err, want)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(kept, "violations.txt")); !strings.Contains(string(raw), envChaosSeed+"=42") {
		t.Errorf("violations.txt does not say how to rerun: %q", raw)
	}
}
