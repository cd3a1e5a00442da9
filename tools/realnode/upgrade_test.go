package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// The upgrade test's own network, apart from test-real's (10.213.0.0/24) and demo-real's
// (10.214.0.0/24).
const (
	upgradeNetwork = "magos-upgrade"
	upgradeSubnet  = "10.215.0.0/24"
	upgradeHubAddr = "10.215.0.10"
	upgradeRollout = "fleet"
)

// upgradeSpokes are the spoke clusters of the upgrade test, in step order: one step a region.
var upgradeSpokes = []struct{ name, region, addr string }{
	{"spoke-1", "r1", "10.215.0.11"},
	{"spoke-2", "r2", "10.215.0.12"},
	{"spoke-3", "r3", "10.215.0.13"},
}

// upgradeWorkspaces are the Workspaces of each spoke: several per cluster, so that a step's
// second Workspace is granted after the first applied (maxConcurrency 1), across an upgrade.
var upgradeWorkspaces = []string{"app-a", "app-b"}

// upgradeModule is the module at release: it records the release and the region in state, and
// its apply of a new release takes applySleep (hashicorp/time, from the runner image's provider
// mirror): long enough for an agent to be upgraded while the apply Job runs.
func upgradeModule(release, applySleep string) string {
	return strings.NewReplacer("@RELEASE@", release, "@SLEEP@", applySleep).Replace(`
terraform {
  required_providers {
    time = {
      source = "hashicorp/time"
    }
  }
}
variable "region" {
  type = string
}
locals {
  release = "@RELEASE@"
}
resource "terraform_data" "release" {
  input = {
    region  = var.region
    release = local.release
  }
}
# Replaced, and so slept through again, exactly when the release changes.
resource "time_sleep" "apply" {
  create_duration = "@SLEEP@"
  triggers = {
    release = local.release
  }
}
`)
}

// upgradeEnv is what `make test-upgrade` hands TestUpgradeMidRollout on top of Env: the release
// it upgrades from, built from that release's own tree.
type upgradeEnv struct {
	Env
	// FromVersion is the release (v0.1.0, or from-<sha> for a plain git ref); its images are
	// tagged with it.
	FromVersion string
	// FromCommit is the release's commit.
	FromCommit string
	// FromCharts holds the release's charts magos-hub and magos-agent.
	FromCharts string
}

// requireUpgradeEnv reads the upgrade's environment. The test is skipped when none of it is
// set (`make test-real` runs the package without it) and fails when only part of it is.
func requireUpgradeEnv(t *testing.T) upgradeEnv {
	t.Helper()
	vars := []string{"MAGOS_UPGRADE_FROM_VERSION", "MAGOS_UPGRADE_FROM_COMMIT", "MAGOS_UPGRADE_FROM_CHARTS"}
	var set, missing []string
	for _, v := range vars {
		if os.Getenv(v) == "" {
			missing = append(missing, v)
		} else {
			set = append(set, v)
		}
	}
	if len(set) == 0 {
		t.Skip("the upgrade from the previous release runs under `make test-upgrade`, which sets MAGOS_UPGRADE_FROM_*")
	}
	if len(missing) > 0 {
		t.Fatalf("%s set but %s not: run `make test-upgrade`", strings.Join(set, ", "), strings.Join(missing, ", "))
	}
	u := upgradeEnv{Env: requireEnv(t), FromVersion: os.Getenv("MAGOS_UPGRADE_FROM_VERSION"),
		FromCommit: os.Getenv("MAGOS_UPGRADE_FROM_COMMIT"), FromCharts: os.Getenv("MAGOS_UPGRADE_FROM_CHARTS")}
	for _, c := range []string{"magos-hub", "magos-agent"} {
		if _, err := os.Stat(filepath.Join(u.FromCharts, c, "Chart.yaml")); err != nil {
			t.Fatalf("the chart %s of %s: %v", c, u.FromVersion, err)
		}
	}
	return u
}

// TestUpgradeMidRollout installs the previous release (hub and agents, its own charts and
// images) on real nodes, rolls a commit out across three spokes, and upgrades everything to this
// checkout with `helm upgrade` while the next commit rolls out: first one spoke's agent (a new
// agent against the old hub), then the hub (old agents against the new hub), then the other
// agents one by one. What it checks is read from the clusters: the apply Jobs the kubelets ran
// (the ledger: which Workspace applied which commit when, created by which agent), the grants
// the hub wrote, the Workspaces' run history, the CRDs and the objects the old release stored.
func TestUpgradeMidRollout(t *testing.T) {
	env := requireUpgradeEnv(t)
	t.Logf("upgrade: from %s (commit %s) to this checkout (images :%s)", env.FromVersion, env.FromCommit, env.Tag)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	started := time.Now()
	gateway := testNetwork(t, ctx, upgradeNetwork, upgradeSubnet)

	// 1. Four nodes: the hub's cluster and a cluster per region.
	dir := t.TempDir()
	opts := []Options{{Name: "magos-up-hub", Image: env.NodeImage, Network: upgradeNetwork, Address: upgradeHubAddr, ImagesDir: env.ImagesDir}}
	for _, s := range upgradeSpokes {
		opts = append(opts, Options{Name: "magos-up-" + s.name, Image: env.NodeImage, Network: upgradeNetwork, Address: s.addr, ImagesDir: env.ImagesDir})
	}
	nodes, err := StartAll(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	hub := newCluster(t, nodes["magos-up-hub"], dir)
	spokes := map[string]*cluster{}
	for _, s := range upgradeSpokes {
		spokes[s.name] = newCluster(t, nodes["magos-up-"+s.name], dir)
	}
	t.Logf("upgrade: 4 nodes Ready after %s", time.Since(started).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			for _, cl := range append([]*cluster{hub}, spokeList(spokes)...) {
				t.Logf("--- %s: %s Pods\n%s", cl.Node.Name, system, describePods(context.Background(), cl, system))
				t.Logf("--- %s: default Pods\n%s", cl.Node.Name, describePods(context.Background(), cl, "default"))
			}
		}
	})

	// 2. The previous release, installed as its docs say: the hub, then each agent from the
	// bootstrap kubeconfig the hub makes.
	oldHub, oldAgent := filepath.Join(env.FromCharts, "magos-hub"), filepath.Join(env.FromCharts, "magos-agent")
	newHub, newAgent := filepath.Join(env.RepoRoot, "charts/magos-hub"), filepath.Join(env.RepoRoot, "charts/magos-agent")
	registered := map[string]map[string]any{}
	for _, s := range upgradeSpokes {
		registered[s.name] = map[string]any{"region": s.region}
	}
	helmInstall(t, ctx, hub, oldHub, "magos-hub", system, HubValues(env.FromVersion, registered), false)
	{
		var wg sync.WaitGroup
		errs := make([]error, len(upgradeSpokes))
		for i, s := range upgradeSpokes {
			wg.Go(func() {
				errs[i] = installAgent(ctx, env, hub, spokes[s.name], s.name, oldAgent, env.FromVersion, t.Logf)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range upgradeSpokes {
		poll(t, ctx, 3*time.Minute, "cluster "+s.name+" Ready on the hub", func(ctx context.Context) (bool, string) {
			c := &magosv1.Cluster{}
			if err := hub.Client.Get(ctx, client.ObjectKey{Name: s.name}, c); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionReady), fmt.Sprintf("%+v", c.Status.Conditions)
		})
	}
	t.Logf("upgrade: %s installed (hub and 3 agents) after %s", env.FromVersion, time.Since(started).Round(time.Second))

	// 3. The module, a Project and a Rollout by region on the hub, two Workspaces per spoke.
	// Steps r1 and r3 take one Workspace at a time; r2 waits for approval once it planned.
	repos := t.TempDir()
	commit := gitRepo(t, repos, "fleet.git", map[string]string{"main.tf": upgradeModule("A", "1s")})
	repoURL := gitServer(t, gateway, repos) + "/fleet.git"
	one := intstr.FromInt32(1)
	steps := make([]magosv1.RolloutStep, len(upgradeSpokes))
	for i, s := range upgradeSpokes {
		steps[i] = magosv1.RolloutStep{Name: s.region, Selector: magosv1.LabelSelector{MatchLabels: map[string]magosv1.LabelValue{"region": magosv1.LabelValue(s.region)}}}
		if i == 1 {
			steps[i].RequireApproval = true
		} else {
			steps[i].MaxConcurrency = &one
		}
	}
	mustCreate(t, ctx, hub.Client, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: upgradeRollout, Namespace: Namespace},
		Spec: magosv1.ProjectSpec{Description: "written by " + env.FromVersion}})
	mustCreate(t, ctx, hub.Client, &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: upgradeRollout, Namespace: Namespace},
		Spec: magosv1.RolloutSpec{ProjectRef: upgradeRollout, Strategy: magosv1.RolloutStrategy{Steps: steps}}})
	for _, s := range upgradeSpokes {
		for _, name := range upgradeWorkspaces {
			w := workspace(name, repoURL, s.region)
			w.Spec.ProjectRef.Name = upgradeRollout
			// No scheduled re-plan (default every 3m) during the test: one of an Applied
			// Workspace of the approval step plans anew, which voids the step's approval.
			w.Annotations = map[string]string{keys.ReconcileInterval: "2h"}
			mustCreate(t, ctx, spokes[s.name].Client, variables(name, map[string]string{"region": s.region}, nil))
			mustCreate(t, ctx, spokes[s.name].Client, w)
		}
	}
	grants := watchGrants(t, ctx, hub)
	applies := watchApplies(t, ctx, spokes)

	// 4. Commit A rolls out everywhere on the previous release (step r2 approved as users do).
	shaA := headOf(t, filepath.Join(repos, "fleet.git"))
	approveWhenAwaiting(t, ctx, env, hub, "r2", shaA)
	waitRolloutApplied(t, ctx, hub, shaA)
	t.Logf("upgrade: commit A (%s) Applied everywhere on %s after %s", shaA[:8], env.FromVersion, time.Since(started).Round(time.Second))

	// What the previous release stored, read back after the upgrades: the CRDs and the objects.
	crdsBefore := map[string]map[string]crdIdentity{}
	for _, cl := range append([]*cluster{hub}, spokeList(spokes)...) {
		crdsBefore[cl.Node.Name] = readCRDs(t, ctx, cl)
	}
	hubObjects := []objectRef{{"Project", Namespace, upgradeRollout}, {"Rollout", Namespace, upgradeRollout}}
	spokeObjects := []objectRef{}
	for _, name := range upgradeWorkspaces {
		spokeObjects = append(spokeObjects, objectRef{"Workspace", Namespace, name}, objectRef{"VariableSet", Namespace, name})
	}
	storedBefore := map[string]map[objectRef]storedObject{"hub": readStored(t, ctx, hub, hubObjects)}
	for name, cl := range spokes {
		storedBefore[name] = readStored(t, ctx, cl, spokeObjects)
	}

	// 5. Commit B, whose applies each sleep 20s, and the upgrades while it rolls out.
	commit(map[string]string{"main.tf": upgradeModule("B", "20s")})
	shaB := headOf(t, filepath.Join(repos, "fleet.git"))
	t.Logf("upgrade: commit B (%s) pushed; upgrading while it rolls out", shaB[:8])
	var phases []upgradePhase
	upgrade := func(what string, cl *cluster, chartDir, name string, values map[string]any) {
		t.Helper()
		from := time.Now()
		helmInstall(t, ctx, cl, chartDir, name, system, values, true)
		phases = append(phases, upgradePhase{what: what, from: from, to: time.Now()})
		t.Logf("upgrade: %s upgraded in %s (at +%s)", what, time.Since(from).Round(time.Second), time.Since(started).Round(time.Second))
	}

	// 5a. One spoke's agent first, while its first Workspace applies B: a new agent against
	// the old hub.
	waitApplyRunning(t, ctx, spokes["spoke-1"], shaB)
	upgrade("agent spoke-1", spokes["spoke-1"], newAgent, "magos-agent", AgentValues(env.Tag, "spoke-1"))
	checkCRDsUpgraded(t, ctx, spokes["spoke-1"], crdsBefore[spokes["spoke-1"].Node.Name], newAgent)

	// 5b. The hub, once step r2 planned B and awaits approval: the old agents against the new
	// hub. What the old hub stored reads back unchanged at once.
	waitAwaitingApproval(t, ctx, hub, "r2", shaB)
	upgrade("hub", hub, newHub, "magos-hub", HubValues(env.Tag, registered))
	checkCRDsUpgraded(t, ctx, hub, crdsBefore[hub.Node.Name], newHub)
	for _, v := range checkStoredUnchanged(storedBefore["hub"], readStored(t, ctx, hub, hubObjects), nil) {
		t.Errorf("the hub's objects after its upgrade: %s", v)
	}
	approveWhenAwaiting(t, ctx, env, hub, "r2", shaB)

	// 5c. The other agents one by one, each while its spoke applies B.
	for _, s := range upgradeSpokes[1:] {
		waitApplyRunning(t, ctx, spokes[s.name], shaB)
		upgrade("agent "+s.name, spokes[s.name], newAgent, "magos-agent", AgentValues(env.Tag, s.name))
		checkCRDsUpgraded(t, ctx, spokes[s.name], crdsBefore[spokes[s.name].Node.Name], newAgent)
	}

	// 6. B completes, and the fleet's own account of it holds.
	waitRolloutApplied(t, ctx, hub, shaB)
	t.Logf("upgrade: commit B Applied everywhere after %s", time.Since(started).Round(time.Second))
	seen := grants.stop()

	ledger := applies.stop()
	t.Logf("upgrade: the ledger (apply Jobs the kubelets ran):\n%s", formatApplyLedger(ledger))
	t.Logf("upgrade: the grants the hub wrote:\n%s", formatGrants(seen))
	var stepOrder [][]string
	for _, s := range upgradeSpokes {
		var labels []string
		for _, name := range upgradeWorkspaces {
			labels = append(labels, s.name+"/"+name)
		}
		stepOrder = append(stepOrder, labels)
	}
	for _, v := range checkApplyLedger(ledger, stepOrder, []string{shaA, shaB}) {
		t.Errorf("ledger: %s", v)
	}
	history := map[string]*magosv1.Workspace{}
	for name, cl := range spokes {
		for _, ws := range upgradeWorkspaces {
			w := &magosv1.Workspace{}
			if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: ws}, w); err != nil {
				t.Fatal(err)
			}
			history[name+"/"+ws] = w
			if w.Status.Phase.Info().InFlight || w.Status.ObservedRevision != shaB {
				t.Errorf("%s/%s is %s at %s, want Applied at B %s", name, ws, w.Status.Phase, w.Status.ObservedRevision, shaB)
			}
			if state := tfState(t, ctx, cl, ws); !strings.Contains(state, `"B"`) {
				t.Errorf("%s/%s: the state does not record release B:\n%s", name, ws, state)
			}
		}
		checkNoActiveJobs(t, ctx, cl)
	}
	for _, v := range checkRunsAccounted(seen, history, ledger) {
		t.Errorf("runs: %s", v)
	}
	for _, v := range checkMixedPhases(phases, seen, ledger, env.FromVersion, env.Tag, shaB) {
		t.Errorf("mixed versions: %s", v)
	}

	// 7. The CRDs are the new ones, updated in place, and what the old release stored reads back
	// unchanged (the Rollout but for the approval step r2 was given for B).
	checkCRDsUpgraded(t, ctx, hub, crdsBefore[hub.Node.Name], newHub)
	for _, s := range upgradeSpokes {
		checkCRDsUpgraded(t, ctx, spokes[s.name], crdsBefore[spokes[s.name].Node.Name], newAgent)
	}
	for _, v := range checkStoredUnchanged(storedBefore["hub"], readStored(t, ctx, hub, hubObjects), map[objectRef]bool{{"Rollout", Namespace, upgradeRollout}: true}) {
		t.Errorf("hub: %s", v)
	}
	for name, cl := range spokes {
		for _, v := range checkStoredUnchanged(storedBefore[name], readStored(t, ctx, cl, spokeObjects), nil) {
			t.Errorf("%s: %s", name, v)
		}
	}
	// Every Deployment now runs this checkout's images.
	for _, cl := range append([]*cluster{hub}, spokeList(spokes)...) {
		deps := &unstructured.UnstructuredList{}
		deps.SetAPIVersion("apps/v1")
		deps.SetKind("DeploymentList")
		if err := cl.Client.List(ctx, deps, client.InNamespace(system)); err != nil {
			t.Fatal(err)
		}
		for _, d := range deps.Items {
			containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				if img, _ := c.(map[string]any)["image"].(string); strings.HasPrefix(img, "magos-") && !strings.HasSuffix(img, ":"+env.Tag) {
					t.Errorf("%s: Deployment %s still runs %s after the upgrade", cl.Node.Name, d.GetName(), img)
				}
			}
		}
	}
	if !t.Failed() {
		t.Logf("upgrade: %s -> %s mid-rollout: %d apply Jobs in the ledger, %d runs granted, all in step order, none twice; took %s",
			env.FromVersion, env.Tag, len(ledger), len(seen), time.Since(started).Round(time.Second))
		if p := os.Getenv("MAGOS_REAL_SUMMARY"); p != "" {
			line := fmt.Sprintf("upgrade: %s -> %s mid-rollout ok: applies=%d grants=%d phases=%d in %s\n", env.FromVersion, env.Tag, len(ledger), len(seen), len(phases), time.Since(started).Round(time.Second))
			if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
}

func spokeList(spokes map[string]*cluster) []*cluster {
	var out []*cluster
	for _, s := range upgradeSpokes {
		out = append(out, spokes[s.name])
	}
	return out
}

// installAgent installs the agent chart at chartDir into the spoke, from the bootstrap
// kubeconfig `magosctl agent-kubeconfig` prints against the hub.
func installAgent(ctx context.Context, env upgradeEnv, hub, spoke *cluster, name, chartDir, tag string, logf func(string, ...any)) error {
	bootstrap, err := AgentKubeconfig(ctx, env.Magosctl, hub.Kubeconfig, name)
	if err != nil {
		return err
	}
	if err := BootstrapSecret(ctx, spoke, system, bootstrap); err != nil {
		return err
	}
	if err := StaticVolumes(ctx, spoke, 2*len(upgradeWorkspaces)); err != nil {
		return err
	}
	_, err = HelmInstall(ctx, spoke, chartDir, "magos-agent", system, AgentValues(tag, name), false, logf)
	return err
}

// headOf is the commit at the head of the repository's main.
func headOf(t *testing.T, repo string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", repo, "rev-parse", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// readRollout reads the upgrade's Rollout from the hub.
func readRollout(ctx context.Context, hub *cluster) (*magosv1.Rollout, error) {
	r := &magosv1.Rollout{}
	return r, hub.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: upgradeRollout}, r)
}

// waitRolloutApplied waits for the Rollout to be Applied on commit sha.
func waitRolloutApplied(t *testing.T, ctx context.Context, hub *cluster, sha string) {
	t.Helper()
	poll(t, ctx, 8*time.Minute, "the Rollout Applied on "+sha[:8], func(ctx context.Context) (bool, string) {
		r, err := readRollout(ctx, hub)
		if err != nil {
			return false, err.Error()
		}
		if r.Status.Phase == magosv1.PhaseFailed {
			t.Fatalf("the Rollout Failed: %s %s", r.Status.Reason, r.Status.Message)
		}
		on := len(r.Status.Revisions) > 0 && r.Status.Revisions[0].Commit == sha
		return r.Status.Phase == magosv1.PhaseApplied && on && r.Status.ObservedGeneration == r.Generation,
			fmt.Sprintf("rollout %s %s at step %s: %s %+v", r.Status.Phase, r.Status.Reason, r.Status.CurrentStepName, r.Status.Message, r.Status.Revisions)
	})
}

// waitAwaitingApproval waits until the Rollout's current step is step, awaiting approval of
// plans of commit sha.
func waitAwaitingApproval(t *testing.T, ctx context.Context, hub *cluster, step, sha string) {
	t.Helper()
	poll(t, ctx, 8*time.Minute, "step "+step+" awaiting approval of "+sha[:8], func(ctx context.Context) (bool, string) {
		r, err := readRollout(ctx, hub)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range r.Status.Steps {
			if s.Name != step || s.Phase != magosv1.StepAwaitingApproval || len(s.Plans) == 0 {
				continue
			}
			for _, p := range s.Plans {
				if p.Revision != sha {
					return false, fmt.Sprintf("step %s awaits approval of %s, not %s", step, p.Revision, sha)
				}
			}
			return r.Status.CurrentStepName == step, ""
		}
		return false, fmt.Sprintf("rollout %s %s at step %s: %s", r.Status.Phase, r.Status.Reason, r.Status.CurrentStepName, r.Status.Message)
	})
}

// approveWhenAwaiting approves step's plans of commit sha with magosctl, as users do, once the
// step awaits approval.
func approveWhenAwaiting(t *testing.T, ctx context.Context, env upgradeEnv, hub *cluster, step, sha string) {
	t.Helper()
	waitAwaitingApproval(t, ctx, hub, step, sha)
	poll(t, ctx, time.Minute, "magosctl rollout approve "+upgradeRollout+" --step "+step, func(ctx context.Context) (bool, string) {
		out, err := exec.CommandContext(ctx, env.Magosctl, "--kubeconfig", hub.Kubeconfig, "-n", Namespace,
			"rollout", "approve", upgradeRollout, "--step", step).CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	})
}

// waitApplyRunning waits until an apply Job of commit sha runs in the spoke: its runner
// container started and not finished.
func waitApplyRunning(t *testing.T, ctx context.Context, cl *cluster, sha string) {
	t.Helper()
	poll(t, ctx, 8*time.Minute, "an apply of "+sha[:8]+" running in "+cl.Node.Name, func(ctx context.Context) (bool, string) {
		ledger, err := applyLedgerOf(ctx, cl, "")
		if err != nil {
			return false, err.Error()
		}
		for _, a := range ledger {
			if a.Revision == sha && a.Running {
				return true, ""
			}
		}
		return false, fmt.Sprintf("apply Jobs: %+v", ledger)
	})
}

// checkNoActiveJobs fails the test if a Job of the spoke's default namespace is still active.
func checkNoActiveJobs(t *testing.T, ctx context.Context, cl *cluster) {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := cl.Client.List(ctx, jobs, client.InNamespace(Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.Status.Active > 0 || j.Status.CompletionTime == nil && j.Status.Failed == 0 {
			t.Errorf("%s: Job %s is still running (active %d)", cl.Node.Name, j.Name, j.Status.Active)
		}
	}
}

// upgradePhase is one upgrade: what was upgraded, from when helm upgrade started to when it
// returned (the new Pods Ready).
type upgradePhase struct {
	what     string
	from, to time.Time
}

// applyRecord is one apply Job the kubelet ran: the ledger of the upgrade test.
type applyRecord struct {
	// Label is cluster/workspace.
	Label, Cluster, Workspace string
	Job, RunID, Revision      string
	// Runner is the runner image the agent that created the Job put in it: which release's
	// agent created it.
	Runner string
	// Created is the Job's creation; Started and Finished its runner container's (zero while it
	// has not).
	Created, Started, Finished time.Time
	Running, Succeeded         bool
	Pods                       int
}

// runSpec is the part of the runner's spec (runner.EnvSpec) the ledger reads.
type runSpec struct {
	Operation string `json:"operation"`
	RunID     string `json:"runID"`
	Name      string `json:"name"`
	Revision  string `json:"revision"`
}

// applyLedgerOf reads the spoke's apply Jobs, and their Pods, into the ledger; label names the
// cluster in it.
func applyLedgerOf(ctx context.Context, cl *cluster, label string) ([]applyRecord, error) {
	jobs := &batchv1.JobList{}
	if err := cl.Client.List(ctx, jobs, client.InNamespace(Namespace), client.MatchingLabels{keys.JobType: "apply"}); err != nil {
		return nil, err
	}
	var out []applyRecord
	for _, j := range jobs.Items {
		c := j.Spec.Template.Spec.Containers[0]
		var spec runSpec
		for _, e := range c.Env {
			if e.Name == "MAGOS_RUN_SPEC" {
				if err := json.Unmarshal([]byte(e.Value), &spec); err != nil {
					return nil, fmt.Errorf("Job %s: its run spec: %w", j.Name, err)
				}
			}
		}
		if spec.RunID == "" {
			return nil, fmt.Errorf("Job %s carries no run spec (MAGOS_RUN_SPEC)", j.Name)
		}
		a := applyRecord{Label: label + "/" + spec.Name, Cluster: label, Workspace: spec.Name, Job: j.Name, RunID: spec.RunID,
			Revision: spec.Revision, Runner: c.Image, Created: j.CreationTimestamp.Time, Succeeded: j.Status.Succeeded > 0}
		pods := &corev1.PodList{}
		if err := cl.Client.List(ctx, pods, client.InNamespace(Namespace), client.MatchingLabels{"job-name": j.Name}); err != nil {
			return nil, err
		}
		a.Pods = len(pods.Items)
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				switch {
				case cs.State.Running != nil:
					a.Running, a.Started = true, cs.State.Running.StartedAt.Time
				case cs.State.Terminated != nil:
					a.Started, a.Finished = cs.State.Terminated.StartedAt.Time, cs.State.Terminated.FinishedAt.Time
				}
			}
		}
		// The Pod of a finished Job may be gone already (the agent deletes a run's Jobs when the
		// next run starts): the Job controller's own count of its Pods and its times stand in.
		if n := int(j.Status.Succeeded + j.Status.Failed + j.Status.Active); n > a.Pods {
			a.Pods = n
		}
		if a.Started.IsZero() && j.Status.StartTime != nil {
			a.Started = j.Status.StartTime.Time
		}
		if a.Finished.IsZero() && !a.Running && j.Status.CompletionTime != nil {
			a.Finished = j.Status.CompletionTime.Time
		}
		out = append(out, a)
	}
	return out, nil
}

// applyWatch records the spokes' apply Jobs until stopped. The agent deletes a run's Jobs when
// a later run of its Workspace starts, so the ledger is kept as the Jobs come and go: each Job
// as last seen (a Job lives on for seconds at least after it finished).
type applyWatch struct {
	mu     sync.Mutex
	seen   map[string]applyRecord // by cluster/Job
	ctx    context.Context
	spokes map[string]*cluster
	cancel context.CancelFunc
	done   chan struct{}
}

// watchApplies polls the spokes' apply Jobs every 500ms into the ledger.
func watchApplies(t *testing.T, ctx context.Context, spokes map[string]*cluster) *applyWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := &applyWatch{seen: map[string]applyRecord{}, ctx: ctx, spokes: spokes, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll(ctx, spokes)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *applyWatch) poll(ctx context.Context, spokes map[string]*cluster) {
	for _, s := range upgradeSpokes {
		l, err := applyLedgerOf(ctx, spokes[s.name], s.name)
		if err != nil {
			continue
		}
		w.mu.Lock()
		for _, a := range l {
			key := s.name + "/" + a.Job
			// Once seen terminated, the container's times are final: a later sighting without the
			// Pod (the Job's times stand in then) keeps them.
			if was, ok := w.seen[key]; ok && !was.Finished.IsZero() && !was.Running {
				a.Started, a.Finished, a.Running = was.Started, was.Finished, false
			}
			w.seen[key] = a
		}
		w.mu.Unlock()
	}
}

// stop reads the spokes a last time, ends the watch and returns the ledger in the order the
// Jobs were created.
func (w *applyWatch) stop() []applyRecord {
	if w.ctx.Err() == nil {
		w.poll(w.ctx, w.spokes)
	}
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var all []applyRecord
	for _, a := range w.seen {
		all = append(all, a)
	}
	slices.SortFunc(all, func(a, b applyRecord) int { return a.Created.Compare(b.Created) })
	return all
}

func formatApplyLedger(l []applyRecord) string {
	var b strings.Builder
	for _, a := range l {
		fmt.Fprintf(&b, "  %-18s %s run %s by %-22s created %s started %s finished %s pods %d succeeded %v\n", a.Label, short(a.Revision), a.RunID, a.Runner,
			a.Created.Format("15:04:05"), a.Started.Format("15:04:05.000"), a.Finished.Format("15:04:05.000"), a.Pods, a.Succeeded)
	}
	return b.String()
}

func short(sha string) string { return sha[:min(8, len(sha))] }

// checkApplyLedger checks the ledger against the steps (the labels of each step's Workspaces,
// in step order) for each commit of commits: every Workspace applied it exactly once (one
// apply Job, one Pod, succeeded), and every apply of a later step started after the last apply
// of every earlier step finished. An apply of a commit not in commits is a violation too.
func checkApplyLedger(ledger []applyRecord, steps [][]string, commits []string) []string {
	stepOf := map[string]int{}
	for i, labels := range steps {
		for _, l := range labels {
			stepOf[l] = i
		}
	}
	var out []string
	for _, sha := range commits {
		byLabel := map[string][]applyRecord{}
		for _, a := range ledger {
			if a.Revision == sha {
				byLabel[a.Label] = append(byLabel[a.Label], a)
			}
		}
		for label, as := range byLabel {
			if _, ok := stepOf[label]; !ok {
				out = append(out, fmt.Sprintf("%s applied %s but is in no step", label, short(sha)))
			}
			if len(as) > 1 {
				var jobs []string
				for _, a := range as {
					jobs = append(jobs, a.Job)
				}
				out = append(out, fmt.Sprintf("%s applied %s %d times (Jobs %s)", label, short(sha), len(as), strings.Join(jobs, ", ")))
			}
			for _, a := range as {
				if a.Pods != 1 || !a.Succeeded || a.Finished.IsZero() {
					out = append(out, fmt.Sprintf("%s: apply Job %s of %s ran %d Pods, succeeded %v, finished %v (want 1 Pod, succeeded, finished)", label, a.Job, short(sha), a.Pods, a.Succeeded, !a.Finished.IsZero()))
				}
			}
		}
		for i, labels := range steps {
			for _, label := range labels {
				if len(byLabel[label]) == 0 {
					out = append(out, fmt.Sprintf("%s never applied %s", label, short(sha)))
				}
				for _, a := range byLabel[label] {
					for _, earlier := range steps[:i] {
						for _, e := range earlier {
							for _, b := range byLabel[e] {
								// (Kubernetes keeps these times to the second: the same second is no violation.)
								if a.Started.Before(b.Finished) {
									out = append(out, fmt.Sprintf("%s (step %d) started applying %s at %s, before %s (an earlier step) finished at %s",
										label, i+1, short(sha), a.Started.Format("15:04:05.000"), e, b.Finished.Format("15:04:05.000")))
								}
							}
						}
					}
				}
			}
		}
	}
	for _, a := range ledger {
		if !slices.Contains(commits, a.Revision) {
			out = append(out, fmt.Sprintf("%s applied %s, a commit that was not rolled out (Job %s)", a.Label, short(a.Revision), a.Job))
		}
	}
	slices.Sort(out)
	return out
}

// grantRecord is a grant the hub wrote on a Workspace's mirror, as first seen.
type grantRecord struct {
	Cluster, Workspace, RunID, Operation, Revision string
	// DecidedBy is the hub replica (its Pod) that wrote it, and HubImage that Pod's image.
	DecidedBy, HubImage string
	Seen                time.Time
}

// grantWatch records the grants the hub writes on its mirrors until stopped.
type grantWatch struct {
	mu     sync.Mutex
	seen   map[string]grantRecord // by cluster/workspace/run/operation
	cancel context.CancelFunc
	done   chan struct{}
}

// watchGrants polls the hub's mirrors for the grants it writes (a grant stays on the mirror
// while its run is current, seconds at least, so a poll every 200ms sees each), and the hub's
// Pods for the image each replica runs.
func watchGrants(t *testing.T, ctx context.Context, hub *cluster) *grantWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	g := &grantWatch{seen: map[string]grantRecord{}, cancel: cancel, done: make(chan struct{})}
	images := map[string]string{}
	go func() {
		defer close(g.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			pods := &corev1.PodList{}
			// only is the image every hub Pod runs now, when they all run one: a grant first seen
			// then was written by a replica of that image (the mirror keeps no writer: the agent's
			// up-sync drops keys.DecidedBy within moments, so the Pod named on it is often unseen).
			only := ""
			if err := hub.Client.List(ctx, pods, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "magos-hub"}); err == nil {
				for i, p := range pods.Items {
					images[p.Name] = p.Spec.Containers[0].Image
					if i == 0 {
						only = p.Spec.Containers[0].Image
					} else if only != p.Spec.Containers[0].Image {
						only = "mixed"
					}
				}
			}
			list := &magosv1.WorkspaceList{}
			if err := hub.Client.List(ctx, list, client.HasLabels{keys.Mirror}); err == nil {
				g.mu.Lock()
				for _, w := range list.Items {
					a := w.Annotations
					if a[keys.GrantedRun] == "" {
						continue
					}
					cluster, _ := strings.CutPrefix(w.Namespace, keys.ClusterNamespacePrefix)
					r := grantRecord{Cluster: cluster, Workspace: w.Labels[keys.OriginName], RunID: a[keys.GrantedRun],
						Operation: a[keys.GrantedOperation], Revision: a[keys.GrantedRevision], DecidedBy: a[keys.DecidedBy], Seen: time.Now()}
					r.HubImage = images[r.DecidedBy]
					if r.HubImage == "" && only != "mixed" {
						r.HubImage = only
					}
					key := strings.Join([]string{r.Cluster, r.Workspace, r.RunID, r.Operation}, "/")
					if _, ok := g.seen[key]; !ok {
						g.seen[key] = r
					}
				}
				g.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { g.stop() })
	return g
}

// stop ends the watch and returns the grants seen, in the order they were first seen.
func (g *grantWatch) stop() []grantRecord {
	g.cancel()
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []grantRecord
	for _, r := range g.seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b grantRecord) int { return a.Seen.Compare(b.Seen) })
	return out
}

func formatGrants(gs []grantRecord) string {
	var b strings.Builder
	for _, g := range gs {
		op := g.Operation
		if op == "" {
			op = "apply"
		}
		fmt.Fprintf(&b, "  %s %-18s %-5s %s run %s by %s (%s)\n", g.Seen.Format("15:04:05.000"), g.Cluster+"/"+g.Workspace, op, short(g.Revision), g.RunID, g.DecidedBy, g.HubImage)
	}
	return b.String()
}

// checkRunsAccounted checks that no run was lost or left running: every run the hub granted is
// in its Workspace's run history with a phase that ended, and every apply Job the kubelets ran
// was of a run the hub granted.
func checkRunsAccounted(grants []grantRecord, history map[string]*magosv1.Workspace, ledger []applyRecord) []string {
	var out []string
	granted := map[string]bool{}
	for _, g := range grants {
		label := g.Cluster + "/" + g.Workspace
		granted[label+"/"+g.RunID] = true
		w := history[label]
		if w == nil {
			out = append(out, fmt.Sprintf("run %s was granted to %s, which is not one of the test's Workspaces", g.RunID, label))
			continue
		}
		i := slices.IndexFunc(w.Status.Runs, func(r magosv1.RunRecord) bool { return r.RunID == g.RunID })
		switch {
		case i < 0:
			out = append(out, fmt.Sprintf("run %s of %s, granted by %s, is not in its run history: lost", g.RunID, label, g.DecidedBy))
		case !magosv1.InfoOf(w.Status.Runs[i].Phase, w.Status.Runs[i].Reason).Ended:
			out = append(out, fmt.Sprintf("run %s of %s is %s in its run history: left unfinished", g.RunID, label, w.Status.Runs[i].Phase))
		}
	}
	for _, a := range ledger {
		if !granted[a.Label+"/"+a.RunID] {
			out = append(out, fmt.Sprintf("%s ran apply Job %s of run %s, which the hub was not seen granting", a.Label, a.Job, a.RunID))
		}
	}
	return out
}

// checkMixedPhases checks that each mixed-version phase kept deciding and applying commit sha:
// a new agent applied a run the old hub granted (after spoke-1's agent was upgraded, before the
// hub was), and an old agent applied a run the new hub granted (after the hub was upgraded,
// before that spoke's agent was). Which release's agent created an apply Job is the runner image
// it put in the Job (the agent chart's runner.image.tag: :oldTag or :newTag); which hub granted
// it, the image of the hub Pod the grant names (keys.DecidedBy). phases are the upgrades done.
func checkMixedPhases(phases []upgradePhase, grants []grantRecord, ledger []applyRecord, oldTag, newTag, sha string) []string {
	if len(phases) < 2 {
		return []string{fmt.Sprintf("only %d upgrades ran, want the agent of spoke-1 and then the hub", len(phases))}
	}
	hubOf := map[string]string{} // the hub image of each run's apply grant
	for _, g := range grants {
		if g.Operation == "" || g.Operation == "apply" {
			hubOf[g.Cluster+"/"+g.Workspace+"/"+g.RunID] = g.HubImage
		}
	}
	var out []string
	for _, w := range []struct{ what, hubTag, agentTag string }{
		{"a new agent against the old hub", oldTag, newTag},
		{"an old agent against the new hub", newTag, oldTag},
	} {
		var found []string
		for _, a := range ledger {
			hub, ok := hubOf[a.Label+"/"+a.RunID]
			if ok && a.Revision == sha && strings.HasSuffix(a.Runner, ":"+w.agentTag) && strings.HasSuffix(hub, ":"+w.hubTag) {
				found = append(found, a.Label)
			}
		}
		if len(found) == 0 {
			out = append(out, fmt.Sprintf("%s: no apply of %s granted by a hub of :%s and run by an agent of :%s", w.what, short(sha), w.hubTag, w.agentTag))
		}
	}
	return out
}

// objectRef names a stored object of Magos' API.
type objectRef struct{ Kind, Namespace, Name string }

// storedObject is what the API server returns of an object: its identity and spec, exactly.
type storedObject struct {
	UID        string
	Generation int64
	Created    string
	Spec       string // the spec as JSON
}

// readStored reads the objects as the API server serves them (unstructured: every field
// stored, whether this checkout's types know it or not).
func readStored(t *testing.T, ctx context.Context, cl *cluster, refs []objectRef) map[objectRef]storedObject {
	t.Helper()
	out := map[objectRef]storedObject{}
	for _, r := range refs {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(magosv1.GroupVersion.String())
		u.SetKind(r.Kind)
		if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, u); err != nil {
			t.Fatalf("%s: %s %s: %v", cl.Node.Name, r.Kind, r.Name, err)
		}
		spec, err := json.Marshal(u.Object["spec"])
		if err != nil {
			t.Fatal(err)
		}
		out[r] = storedObject{UID: string(u.GetUID()), Generation: u.GetGeneration(), Created: u.GetCreationTimestamp().UTC().String(), Spec: string(spec)}
	}
	return out
}

// checkStoredUnchanged compares objects read after an upgrade with the same objects read
// before: the same object (UID, creation), the same generation and spec. For the objects in
// approved, the spec may differ by its approvals only (and so its generation).
func checkStoredUnchanged(before, after map[objectRef]storedObject, approved map[objectRef]bool) []string {
	var out []string
	for ref, b := range before {
		a := after[ref]
		if a.UID != b.UID || a.Created != b.Created {
			out = append(out, fmt.Sprintf("%s %s is another object after the upgrade: uid %s created %s, was %s %s", ref.Kind, ref.Name, a.UID, a.Created, b.UID, b.Created))
		}
		bs, as := b.Spec, a.Spec
		if approved[ref] {
			bs, as = withoutApprovals(bs), withoutApprovals(as)
		} else if a.Generation != b.Generation {
			out = append(out, fmt.Sprintf("%s %s: generation %d after the upgrade, was %d", ref.Kind, ref.Name, a.Generation, b.Generation))
		}
		if as != bs {
			out = append(out, fmt.Sprintf("%s %s reads back changed after the upgrade:\nbefore %s\nafter  %s", ref.Kind, ref.Name, bs, as))
		}
	}
	slices.Sort(out)
	return out
}

// withoutApprovals is the spec (JSON) without its approvals; a spec that is not a JSON object
// is returned as it is.
func withoutApprovals(spec string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(spec), &m); err != nil {
		return spec
	}
	delete(m, "approvals")
	out, err := json.Marshal(m)
	if err != nil {
		return spec
	}
	return string(out)
}

// crdIdentity is a CRD as a cluster serves it: which object it is, and the schema of each
// version (as JSON).
type crdIdentity struct {
	UID, Created string
	Schemas      map[string]string
}

// readCRDs reads Magos' CRDs from the cluster.
func readCRDs(t *testing.T, ctx context.Context, cl *cluster) map[string]crdIdentity {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("apiextensions.k8s.io/v1")
	list.SetKind("CustomResourceDefinitionList")
	if err := cl.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	out := map[string]crdIdentity{}
	for _, c := range list.Items {
		if g, _, _ := unstructured.NestedString(c.Object, "spec", "group"); g != magosv1.GroupVersion.Group {
			continue
		}
		versions, _, _ := unstructured.NestedSlice(c.Object, "spec", "versions")
		out[c.GetName()] = crdIdentity{UID: string(c.GetUID()), Created: c.GetCreationTimestamp().UTC().String(), Schemas: schemasOf(t, versions)}
	}
	if len(out) == 0 {
		t.Fatalf("%s serves no CRD of %s", cl.Node.Name, magosv1.GroupVersion.Group)
	}
	return out
}

// schemasOf is each version's openAPIV3Schema, as canonical JSON.
func schemasOf(t *testing.T, versions []any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		schema, _, _ := unstructured.NestedFieldNoCopy(m, "schema", "openAPIV3Schema")
		raw, err := json.Marshal(schema)
		if err != nil {
			t.Fatal(err)
		}
		// Through the API's own type, so that a file and a served schema compare as the API
		// server reads them (empty fields, key order).
		var props apiextensionsv1.JSONSchemaProps
		if err := json.Unmarshal(raw, &props); err != nil {
			t.Fatalf("the schema of version %s: %v", name, err)
		}
		if raw, err = json.Marshal(props); err != nil {
			t.Fatal(err)
		}
		out[name] = string(raw)
	}
	return out
}

// chartCRDs reads the CRDs a chart carries (files/crds/*.yaml).
func chartCRDs(t *testing.T, chartDir string) map[string]map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "files", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the chart %s carries no CRDs (files/crds/*.yaml): %v", chartDir, err)
	}
	out := map[string]map[string]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		out[u.GetName()] = schemasOf(t, versions)
	}
	return out
}

// checkCRDsUpgraded checks that the cluster serves the CRDs of the chart at chartDir, updated in
// place: each is the object it was before the upgrade (its UID and creation unchanged) and serves
// exactly the chart's schema. It says how many schemas the upgrade changed.
func checkCRDsUpgraded(t *testing.T, ctx context.Context, cl *cluster, before map[string]crdIdentity, chartDir string) {
	t.Helper()
	now := readCRDs(t, ctx, cl)
	want := chartCRDs(t, chartDir)
	changed := 0
	for name, b := range before {
		n, ok := now[name]
		switch {
		case !ok:
			t.Errorf("%s: CRD %s is gone after the upgrade", cl.Node.Name, name)
			continue
		case n.UID != b.UID || n.Created != b.Created:
			t.Errorf("%s: CRD %s was replaced, not updated in place: uid %s created %s, was %s %s", cl.Node.Name, name, n.UID, n.Created, b.UID, b.Created)
		}
		for v, s := range b.Schemas {
			if n.Schemas[v] != s {
				changed++
			}
		}
	}
	for name, schemas := range want {
		n, ok := now[name]
		if !ok {
			t.Errorf("%s: the new chart's CRD %s is not served", cl.Node.Name, name)
			continue
		}
		for v, s := range schemas {
			if n.Schemas[v] != s {
				t.Errorf("%s: CRD %s version %s does not serve the new chart's schema (%d bytes served, %d in %s)", cl.Node.Name, name, v, len(n.Schemas[v]), len(s), chartDir)
			}
		}
	}
	t.Logf("upgrade: %s serves the new chart's %d CRDs, updated in place (%d schemas changed by the upgrade)", cl.Node.Name, len(want), changed)
}
