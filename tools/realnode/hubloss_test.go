package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// The hub-loss test's network and nodes: apart from test-real's (10.213), demo-real's (10.214)
// and the single-cluster test's (10.215).
const (
	lossNetwork = "magos-hubloss"
	lossSubnet  = "10.219.0.0/24"
	lossHubAddr = "10.219.0.10"
	lossProject = "edge"
)

// lossRegions are the spokes, in the Rollout's order, with their nodes' addresses.
var lossRegions = []struct{ name, addr string }{
	{"r1", "10.219.0.11"},
	{"r2", "10.219.0.12"},
	{"r3", "10.219.0.13"},
}

// lossWorkspaces are the Workspaces of every spoke.
var lossWorkspaces = []string{"web", "api"}

// lossModule is the module the Workspaces apply: its output release is what the state records
// of each apply.
const lossModule = `
variable "region" {
  type = string
}
variable "release" {
  type    = string
  default = "vA"
}
resource "terraform_data" "release" {
  input = {
    region  = var.region
    release = var.release
  }
}
output "release" {
  value = var.release
}
`

// lossGitOps is the Project and the Rollout as a GitOps user keeps them in git: applied to the
// first hub, and the same text, with no status, to the hub that replaces it. Steps go region by
// region; r2 and r3 require approval.
const lossGitOps = `apiVersion: magosproject.io/v1alpha1
kind: Rollout
metadata:
  name: edge
  namespace: default
spec:
  projectRef: edge
  strategy:
    steps:
      - name: r1
        selector: {matchLabels: {region: r1}}
      - name: r2
        selector: {matchLabels: {region: r2}}
        requireApproval: true
      - name: r3
        selector: {matchLabels: {region: r3}}
        requireApproval: true
---
apiVersion: magosproject.io/v1alpha1
kind: Project
metadata:
  name: edge
  namespace: default
`

// TestLosingTheHub loses the hub's cluster mid-change and restores it as docs/operations.md
// ("Losing the hub") says: a new cluster, the hub chart installed with the same values file,
// the Project and the Rollout applied again from git, each agent given a bootstrap kubeconfig
// of the new hub with `helm upgrade`. Commit A is rolled out everywhere; commit B is applied in
// r1, approved and applied in r2, and waits for approval in r3 when the hub's node is removed
// (its etcd with it). What the test asserts is read from the spokes (their apply Jobs and the
// tofu state the applies wrote), never from the hub alone: no Workspace that applied B applies
// again or goes back to A, r3 applies nothing until a person approves on the new hub, and then
// it applies B, after r1 and r2.
func TestLosingTheHub(t *testing.T) {
	env := requireEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	began := time.Now()
	gateway := testNetwork(t, ctx, lossNetwork, lossSubnet)
	dir := t.TempDir()

	opts := []Options{{Name: "magos-hubloss-hub", Address: lossHubAddr}}
	for _, r := range lossRegions {
		opts = append(opts, Options{Name: "magos-hubloss-" + r.name, Address: r.addr})
	}
	for i := range opts {
		opts[i].Image, opts[i].Network, opts[i].ImagesDir = env.NodeImage, lossNetwork, env.ImagesDir
	}
	nodes, err := StartAll(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	hub := newCluster(t, nodes["magos-hubloss-hub"], dir)
	spokes := map[string]*cluster{}
	for _, r := range lossRegions {
		spokes[r.name] = newCluster(t, nodes["magos-hubloss-"+r.name], dir)
	}
	t.Logf("4 nodes Ready after %s", time.Since(began).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			for _, cl := range append([]*cluster{hub}, slices.Collect(maps.Values(spokes))...) {
				t.Logf("--- %s: Pods\n%s", cl.Node.Name, describePods(context.Background(), cl, system))
				t.Logf("--- %s: default Pods\n%s", cl.Node.Name, describePods(context.Background(), cl, "default"))
			}
		}
	})

	// The module, served from this machine; its commits, as the test pushes them.
	repos := t.TempDir()
	commit := gitRepo(t, repos, "edge.git", map[string]string{"main.tf": lossModule})
	repoURL := gitServer(t, gateway, repos) + "/edge.git"
	head := func() string {
		out, err := exec.CommandContext(ctx, "git", "-C", filepath.Join(repos, "edge.git"), "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	commitA := head()

	// What an operator keeps: the hub's values file (its config file under config:) and the
	// Project and Rollout in git.
	known := map[string]map[string]any{}
	for _, r := range lossRegions {
		known[r.name] = map[string]any{"region": r.name}
	}
	valuesFile := filepath.Join(dir, "hub-values.yaml")
	raw, err := yaml.Marshal(HubValues(env.Tag, known))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(valuesFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	gitops := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(gitops, []byte(lossGitOps), 0o600); err != nil {
		t.Fatal(err)
	}

	// 1. The first hub and an agent in each spoke, as docs/install.md says.
	installHub(t, ctx, env, hub, valuesFile)
	var wg sync.WaitGroup
	errs := make([]error, len(lossRegions))
	for i, r := range lossRegions {
		wg.Go(func() {
			spoke := spokes[r.name]
			bootstrap, err := AgentKubeconfig(ctx, env.Magosctl, hub.Kubeconfig, r.name)
			if err == nil {
				err = BootstrapSecret(ctx, spoke, system, bootstrap)
			}
			if err == nil {
				err = StaticVolumes(ctx, spoke, 2*len(lossWorkspaces))
			}
			if err == nil {
				_, err = HelmInstall(ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system,
					AgentValues(env.Tag, r.name), false, nil)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFleetBack(t, ctx, hub)
	t.Logf("hub and agents installed, clusters Ready (%s since start)", time.Since(began).Round(time.Second))

	// 2. The Workspaces in the spokes, then the Project and the Rollout from git on the hub.
	for _, r := range lossRegions {
		for _, name := range lossWorkspaces {
			mustCreate(t, ctx, spokes[r.name].Client, variables(name, map[string]string{"region": r.name}, nil))
			mustCreate(t, ctx, spokes[r.name].Client, lossWorkspace(name, repoURL, r.name))
		}
	}
	applyGitOps(t, ctx, hub, gitops)

	// 3. Commit A everywhere, r2 and r3 approved on the first hub.
	for _, r := range lossRegions {
		if r.name != "r1" {
			approveStep(t, ctx, env, hub, r.name, commitA)
		}
		waitRelease(t, ctx, spokes[r.name], "vA")
	}
	waitRestoredRolloutApplied(t, ctx, hub)
	t.Logf("commit A applied in every region (%s since start)", time.Since(began).Round(time.Second))

	// 4. Commit B: applied in r1, approved and applied in r2, waiting for approval in r3.
	commit(map[string]string{"main.tf": strings.Replace(lossModule, `default = "vA"`, `default = "vB"`, 1)})
	commitB := head()
	waitRelease(t, ctx, spokes["r1"], "vB")
	approveStep(t, ctx, env, hub, "r2", commitB)
	waitRelease(t, ctx, spokes["r2"], "vB")
	waitRestoredAwaitingApproval(t, ctx, hub, "r3", commitB, nil)
	waitPlanned(t, ctx, spokes["r3"], commitB)
	before := readLedger(t, ctx, spokes)
	t.Logf("commit B applied in r1 and r2, r3 awaits approval (%s since start); ledger: %s", time.Since(began).Round(time.Second), before)

	// 5. The hub's cluster is gone, its etcd with it.
	if err := hub.Node.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()

	// 6. A new cluster at the hub's address; the hub chart with the same values file; the
	// Project and the Rollout from git again.
	newNode, err := Start(ctx, Options{Name: "magos-hubloss-newhub", Image: env.NodeImage, Network: lossNetwork, Address: lossHubAddr, ImagesDir: env.ImagesDir})
	if err != nil {
		t.Fatal(err)
	}
	hub = newCluster(t, newNode, dir)
	installHub(t, ctx, env, hub, valuesFile)
	applyGitOps(t, ctx, hub, gitops)
	for _, o := range []client.Object{&magosv1.Rollout{}, &magosv1.Project{}} {
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: lossProject}, o); err != nil {
			t.Fatal(err)
		}
	}

	// 7. Each agent pointed at the new hub: a bootstrap kubeconfig the new hub prints, in a new
	// Secret, and helm upgrade naming it (the Pod restarts with the new hub's server and CA).
	for i, r := range lossRegions {
		wg.Go(func() {
			spoke := spokes[r.name]
			bootstrap, err := AgentKubeconfig(ctx, env.Magosctl, hub.Kubeconfig, r.name)
			if err == nil {
				err = spoke.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: restoredSecret, Namespace: system},
					Data: map[string][]byte{"kubeconfig": bootstrap}})
			}
			if err == nil {
				values := AgentValues(env.Tag, r.name)
				values["hub"] = map[string]any{"kubeconfigSecret": map[string]any{"name": restoredSecret}}
				_, err = HelmInstall(ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system, values, true, nil)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// From here on, until r3 is approved on the new hub, the spokes' ledger must not change. It
	// is read on the test's context, not a poll's: a poll's deadline must end that poll with its
	// own reason, not fail a read of the ledger.
	unchanged := func(context.Context) string { return before.changes(readLedger(t, ctx, spokes)) }

	// 8. The agents re-register and the mirrors come back, as many as the spokes' Workspaces.
	waitFleetBack(t, ctx, hub)
	poll(t, ctx, 3*time.Minute, "the mirrors back on the new hub", func(ctx context.Context) (bool, string) {
		if why := unchanged(ctx); why != "" {
			t.Fatalf("while the mirrors came back: %s", why)
		}
		var missing []string
		for _, r := range lossRegions {
			onSpoke, mirrors := &magosv1.WorkspaceList{}, &magosv1.WorkspaceList{}
			if err := spokes[r.name].Client.List(ctx, onSpoke, client.InNamespace(Namespace)); err != nil {
				return false, err.Error()
			}
			if err := hub.Client.List(ctx, mirrors, client.InNamespace(mirror.Namespace(r.name))); err != nil {
				return false, err.Error()
			}
			if len(mirrors.Items) != len(onSpoke.Items) {
				missing = append(missing, fmt.Sprintf("%s: %d mirrors of %d Workspaces", r.name, len(mirrors.Items), len(onSpoke.Items)))
			}
		}
		return len(missing) == 0, strings.Join(missing, "; ")
	})
	t.Logf("the fleet is back on the new hub %s after the loss", time.Since(lost).Round(time.Second))

	// 9. The new hub decides from what the spokes say: r1 and r2 done at B, r3 awaiting a new
	// approval. Nothing applies while it waits, and no region goes back to A.
	waitRestoredAwaitingApproval(t, ctx, hub, "r3", commitB, unchanged)
	r := &magosv1.Rollout{}
	if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: lossProject}, r); err != nil {
		t.Fatal(err)
	}
	if len(r.Spec.Approvals) != 0 {
		t.Fatalf("the re-applied Rollout carries approvals %+v: none was given on the new hub", r.Spec.Approvals)
	}
	if len(r.Status.Revisions) != 1 || r.Status.Revisions[0].Commit != commitB {
		t.Fatalf("the new hub rolls out %+v, want commit B %s", r.Status.Revisions, commitB)
	}
	for _, st := range r.Status.Steps[:2] {
		if st.Phase != magosv1.StepCompleted {
			t.Fatalf("step %s is %s on the new hub, want %s (its Workspaces applied B): %+v", st.Name, st.Phase, magosv1.StepCompleted, r.Status)
		}
	}
	// A negative, watched for a bounded time: nothing applies, nothing goes back.
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if diff := unchanged(ctx); diff != "" {
			return false, fmt.Errorf("while r3 awaited a new approval on the new hub: %s", diff)
		}
		for _, name := range lossWorkspaces {
			ws := &magosv1.Workspace{}
			if err := spokes["r3"].Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, ws); err != nil {
				return false, err
			}
			if ws.Status.Phase != magosv1.PhasePlanned {
				return false, fmt.Errorf("r3/%s is %s while r3 awaits a new approval on the new hub, want Planned: %s", name, ws.Status.Phase, ws.Status.Message)
			}
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatal(err)
	}

	// 10. Approved on the new hub, r3 applies B; the others stay as they were.
	approved := time.Now()
	approveStep(t, ctx, env, hub, "r3", commitB)
	waitRelease(t, ctx, spokes["r3"], "vB")
	waitRestoredRolloutApplied(t, ctx, hub)
	after := readLedger(t, ctx, spokes)
	for key, e := range after {
		b := before[key]
		switch {
		case strings.HasPrefix(key, "r3/"):
			// Before, r3's current run was the plan of B (the Jobs of A's run gone); now it is
			// B's apply, which changed the state once.
			if len(e.applies) != len(b.applies)+1 || e.serial != b.serial+1 || e.release != "vB" {
				t.Fatalf("%s after the approval: %s, want one apply and one state change more than %s, releasing vB", key, e, b)
			}
			if last := e.applyTimes[len(e.applyTimes)-1]; last.Before(approved.Truncate(time.Second)) {
				t.Fatalf("%s applied at %s, before the approval on the new hub at %s", key, last, approved)
			}
			for _, k := range []string{"r1/", "r2/"} {
				for _, name := range lossWorkspaces {
					if earlier := after[k+name]; !earlier.applyTimes[len(earlier.applyTimes)-1].Before(e.applyTimes[len(e.applyTimes)-1]) {
						t.Fatalf("%s applied B no earlier than %s: the steps went out of order", k+name, key)
					}
				}
			}
		case !b.equal(e):
			t.Fatalf("%s changed after the hub was lost: %s, was %s", key, e, b)
		}
	}
	t.Logf("real-node: hub lost and restored; r3 applied B after a new approval; r1 and r2 not applied again; %s in all (%s after the loss)",
		time.Since(began).Round(time.Second), time.Since(lost).Round(time.Second))
}

// restoredSecret is the Secret that holds an agent's bootstrap kubeconfig of the new hub.
const restoredSecret = "magos-hub-kubeconfig-restored"

// installHub installs the hub chart with the values file, as `helm install -f` does.
func installHub(t *testing.T, ctx context.Context, env bedEnv, hub *cluster, valuesFile string) {
	t.Helper()
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	helmInstall(t, ctx, hub, filepath.Join(env.RepoRoot, "charts/magos-hub"), "magos-hub", system, values, false)
}

// applyGitOps creates the objects of the YAML file on the hub, as `kubectl apply -f` does on a
// cluster that has none of them: the Rollout first, so that the Project never runs its
// Workspaces in parallel.
func applyGitOps(t *testing.T, ctx context.Context, hub *cluster, file string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		var o client.Object
		switch head.Kind {
		case "Rollout":
			o = &magosv1.Rollout{}
		case "Project":
			o = &magosv1.Project{}
		default:
			t.Fatalf("%s: unexpected kind %q", file, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, ctx, hub.Client, o)
	}
}

// lossWorkspace is a Workspace of the Project edge in region, polling its ref every 5 s. Its
// scheduled re-plan is an hour away (the default is 3 minutes): every run in the test is one a
// commit started, so that the ledger counts the applies of the rollout alone.
func lossWorkspace(name, repoURL, region string) *magosv1.Workspace {
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"region": region},
			Annotations: map[string]string{keys.GitPollInterval: "5s", keys.ReconcileInterval: "1h"}},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef:      magosv1.ProjectReference{Name: lossProject},
			Source:          magosv1.Source{RepoURL: repoURL, TargetRevision: "main", Path: "."},
			Terraform:       magosv1.TerraformSpec{Version: tofuVersion},
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: name}},
		},
	}
}

// waitFleetBack waits for every spoke's cluster to be Ready on the hub.
func waitFleetBack(t *testing.T, ctx context.Context, hub *cluster) {
	t.Helper()
	names := make([]string, 0, len(lossRegions))
	for _, r := range lossRegions {
		names = append(names, r.name)
	}
	if err := WaitClustersReady(ctx, hub.Client, names, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// stepStatus is the hub's status of the Rollout's step, when it describes the current spec.
func stepStatus(ctx context.Context, hub *cluster, step string) (*magosv1.StepStatus, *magosv1.Rollout, error) {
	r := &magosv1.Rollout{}
	if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: lossProject}, r); err != nil {
		return nil, nil, err
	}
	if r.Status.ObservedGeneration != r.Generation {
		return nil, r, fmt.Errorf("the status is of generation %d, the Rollout is at %d", r.Status.ObservedGeneration, r.Generation)
	}
	for i := range r.Status.Steps {
		if r.Status.Steps[i].Name == step {
			return &r.Status.Steps[i], r, nil
		}
	}
	return nil, r, fmt.Errorf("no step %s in the status", step)
}

// waitRestoredAwaitingApproval waits for the hub to show step awaiting the approval of one plan per
// Workspace of the step, each of commit. A guard (nil for none) that returns a reason fails the
// test at once: something happened that must not while the step waits.
func waitRestoredAwaitingApproval(t *testing.T, ctx context.Context, hub *cluster, step, commit string, guard func(ctx context.Context) string) {
	t.Helper()
	poll(t, ctx, 4*time.Minute, "step "+step+" awaiting approval", func(ctx context.Context) (bool, string) {
		if guard != nil {
			if why := guard(ctx); why != "" {
				t.Fatalf("while step %s should await approval: %s", step, why)
			}
		}
		st, r, err := stepStatus(ctx, hub, step)
		if err != nil {
			return false, err.Error()
		}
		if st.Phase != magosv1.StepAwaitingApproval || len(st.Plans) != len(lossWorkspaces) {
			return false, fmt.Sprintf("step %s %s with %d plans; rollout %s %s: %s", step, st.Phase, len(st.Plans), r.Status.Phase, r.Status.Reason, r.Status.Message)
		}
		for _, p := range st.Plans {
			if p.Revision != commit {
				return false, fmt.Sprintf("the plan of %s is of commit %s, want %s", p.Workspace, p.Revision, commit)
			}
		}
		return true, ""
	})
}

// approveStep approves step with magosctl against the hub once it awaits approval of plans of
// commit.
func approveStep(t *testing.T, ctx context.Context, env bedEnv, hub *cluster, step, commit string) {
	t.Helper()
	waitRestoredAwaitingApproval(t, ctx, hub, step, commit, nil)
	out, err := exec.CommandContext(ctx, env.Magosctl, "--kubeconfig", hub.Kubeconfig, "-n", Namespace, "rollout", "approve", lossProject, "--step", step).CombinedOutput()
	if err != nil {
		t.Fatalf("magosctl rollout approve %s --step %s: %v\n%s", lossProject, step, err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// waitRestoredRolloutApplied waits for the hub's Rollout to be Applied.
func waitRestoredRolloutApplied(t *testing.T, ctx context.Context, hub *cluster) {
	t.Helper()
	poll(t, ctx, 3*time.Minute, "the Rollout Applied", func(ctx context.Context) (bool, string) {
		r := &magosv1.Rollout{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: lossProject}, r); err != nil {
			return false, err.Error()
		}
		return r.Status.ObservedGeneration == r.Generation && r.Status.Phase == magosv1.PhaseApplied,
			fmt.Sprintf("rollout %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
	})
}

// waitRelease waits for every Workspace of the spoke to be Applied with its state recording
// release.
func waitRelease(t *testing.T, ctx context.Context, spoke *cluster, release string) {
	t.Helper()
	poll(t, ctx, 5*time.Minute, spoke.Node.Name+" applying "+release, func(ctx context.Context) (bool, string) {
		for _, name := range lossWorkspaces {
			ws := &magosv1.Workspace{}
			if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, ws); err != nil {
				return false, err.Error()
			}
			if ws.Status.Phase == magosv1.PhaseFailed {
				t.Fatalf("%s/%s Failed: %s", spoke.Node.Name, name, ws.Status.Message)
			}
			st, err := readState(ctx, spoke, name)
			if err != nil || st.release != release || ws.Status.Phase != magosv1.PhaseApplied {
				return false, fmt.Sprintf("%s: %s %s, state %v %v", name, ws.Status.Phase, ws.Status.Message, st, err)
			}
		}
		return true, ""
	})
}

// waitPlanned waits for every Workspace of the spoke to hold a plan of commit (Planned).
func waitPlanned(t *testing.T, ctx context.Context, spoke *cluster, commit string) {
	t.Helper()
	poll(t, ctx, 3*time.Minute, spoke.Node.Name+" planned", func(ctx context.Context) (bool, string) {
		for _, name := range lossWorkspaces {
			ws := &magosv1.Workspace{}
			if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, ws); err != nil {
				return false, err.Error()
			}
			if ws.Status.Phase != magosv1.PhasePlanned || ws.Status.CurrentRevision != commit {
				return false, fmt.Sprintf("%s: %s at %s", name, ws.Status.Phase, ws.Status.CurrentRevision)
			}
		}
		return true, ""
	})
}

// tofuState is what the state Secret of a Workspace records: its serial (one more for each
// apply that changed it) and the release the last apply wrote.
type tofuState struct {
	serial  int
	release string
}

func readState(ctx context.Context, spoke *cluster, workspace string) (tofuState, error) {
	s := &corev1.Secret{}
	if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "tfstate-default-" + workspace}, s); err != nil {
		return tofuState{}, err
	}
	text, err := Gunzip(s.Data["tfstate"])
	if err != nil {
		return tofuState{}, err
	}
	var st struct {
		Serial  int `json:"serial"`
		Outputs map[string]struct {
			Value string `json:"value"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return tofuState{}, err
	}
	return tofuState{serial: st.Serial, release: st.Outputs["release"].Value}, nil
}

// ledgerEntry is what the spoke itself records of a Workspace's applies: its apply Jobs (names
// and when each was created; the agent keeps the Jobs of a Workspace's current run only, so a
// new apply, even of the same commit, shows as another Job name) and its tofu state (a serial
// one higher for every apply that changed it, and the release it recorded).
type ledgerEntry struct {
	tofuState
	applies    []string
	applyTimes []time.Time
}

func (e ledgerEntry) String() string {
	return fmt.Sprintf("{serial %d release %s applies %d}", e.serial, e.release, len(e.applies))
}

func (e ledgerEntry) equal(o ledgerEntry) bool {
	return e.tofuState == o.tofuState && slices.Equal(e.applies, o.applies)
}

// ledger is the ledger of every Workspace of the fleet, by region/name.
type ledger map[string]ledgerEntry

func (l ledger) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k].String())
	}
	return strings.Join(parts, " ")
}

// changes says which entries of now differ from l ("" when none).
func (l ledger) changes(now ledger) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if !l[k].equal(now[k]) {
			out = append(out, fmt.Sprintf("%s was %s, now %s", k, l[k], now[k]))
		}
	}
	return strings.Join(out, "; ")
}

// readLedger reads the ledger from the spokes: the apply Jobs the kubelets ran, in order of
// creation, and the state their applies wrote.
func readLedger(t *testing.T, ctx context.Context, spokes map[string]*cluster) ledger {
	t.Helper()
	l := ledger{}
	for region, spoke := range spokes {
		for _, name := range lossWorkspaces {
			st, err := readState(ctx, spoke, name)
			if err != nil {
				t.Fatalf("the state of %s/%s: %v", region, name, err)
			}
			jobs := &batchv1.JobList{}
			if err := spoke.Client.List(ctx, jobs, client.InNamespace(Namespace),
				client.MatchingLabels{"magosproject.io/workspace": name, "magosproject.io/job-type": "apply"}); err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(jobs.Items, func(a, b batchv1.Job) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
			e := ledgerEntry{tofuState: st}
			for _, j := range jobs.Items {
				e.applies = append(e.applies, j.Name)
				e.applyTimes = append(e.applyTimes, j.CreationTimestamp.Time)
			}
			l[region+"/"+name] = e
		}
	}
	return l
}
