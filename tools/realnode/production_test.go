package realnode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

const (
	network     = "magos-real"
	subnet      = "10.213.0.0/24"
	hubAddr     = "10.213.0.10"
	spokeAddr   = "10.213.0.11"
	clusterName = "spoke-1"
	system      = "magos-system"
	tofuVersion = "1.10.6"
)

// module is the root module the Workspaces apply: it needs no provider download (the runner
// Pods have no egress to a registry) and records its inputs in state.
const module = `
variable "region" {
  type = string
}
variable "release" {
  type    = string
  default = "v1"
}
variable "api_key" {
  type      = string
  sensitive = true
  default   = ""
}
resource "terraform_data" "release" {
  input = {
    region  = var.region
    release = var.release
    keyed   = var.api_key != ""
  }
}
`

// TestProductionPath installs the hub and the agent with Helm into two real clusters, each a
// node of its own with a real kubelet, and rolls a change out through runner Jobs: the hub and
// the agent run as Pods of the images built here, and every plan and apply is a Job whose Pod
// runs the runner image. What it checks is read from the clusters themselves (Jobs, Pods and
// the tofu state Secret the module wrote), never from Magos' own account of it alone.
func TestProductionPath(t *testing.T) {
	env := requireEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	stats := &summary{}

	gateway := testNetwork(t, ctx, network, subnet)

	// Two clusters, started side by side.
	dir := t.TempDir()
	var hub, spoke *cluster
	{
		var wg sync.WaitGroup
		nodes := map[string]*Node{}
		errs := map[string]error{}
		var mu sync.Mutex
		for name, addr := range map[string]string{"magos-hub": hubAddr, "magos-spoke-1": spokeAddr} {
			wg.Go(func() {
				n, err := Start(ctx, Options{Name: name, Image: env.NodeImage, Network: network, Address: addr, ImagesDir: env.ImagesDir})
				mu.Lock()
				defer mu.Unlock()
				nodes[name], errs[name] = n, err
			})
		}
		wg.Wait()
		for name, err := range errs {
			if err != nil {
				t.Fatalf("node %s: %v", name, err)
			}
		}
		hub, spoke = newCluster(t, nodes["magos-hub"], dir), newCluster(t, nodes["magos-spoke-1"], dir)
		t.Logf("nodes Ready: hub in %s, spoke in %s", hub.Node.ReadyAfter.Round(time.Millisecond), spoke.Node.ReadyAfter.Round(time.Millisecond))
		stats.readyAfter = max(hub.Node.ReadyAfter, spoke.Node.ReadyAfter)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, cl := range []*cluster{hub, spoke} {
				t.Logf("--- %s: Pods\n%s", cl.Node.Name, describePods(context.Background(), cl, system))
				t.Logf("--- %s: default Pods\n%s", cl.Node.Name, describePods(context.Background(), cl, "default"))
				t.Logf("--- %s: kubelet\n%s", cl.Node.Name, cl.Node.Log(context.Background(), "kubelet", 30, "eviction_manager", "cri_stats_provider"))
			}
		}
	})

	// The module, served over HTTP from this machine (the nodes' gateway).
	repos := t.TempDir()
	commit := gitRepo(t, repos, "infra.git", map[string]string{"main.tf": module})
	repoURL := gitServer(t, gateway, repos) + "/infra.git"

	// 1. The hub, installed with Helm as docs/install.md says.
	hubValues := HubValues(env.Tag, map[string]map[string]any{clusterName: {"region": "r1"}})
	helmInstall(t, ctx, hub, filepath.Join(env.RepoRoot, "charts/magos-hub"), "magos-hub", system, hubValues, false)
	stats.releases++

	// 2. The agent's bootstrap kubeconfig, printed by magosctl against the hub.
	bootstrap, err := AgentKubeconfig(ctx, env.Magosctl, hub.Kubeconfig, clusterName)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(bootstrap), "https://"+hubAddr+":6443") {
		t.Fatalf("the bootstrap kubeconfig does not point at the hub's address %s:\n%s", hubAddr, bootstrap)
	}

	// 3. The agent in the spoke, from that Secret.
	if err := BootstrapSecret(ctx, spoke, system, bootstrap); err != nil {
		t.Fatal(err)
	}
	staticVolumes(t, ctx, spoke, 24)
	agentValues := AgentValues(env.Tag, clusterName)
	helmInstall(t, ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system, agentValues, false)
	stats.releases++
	poll(t, ctx, 2*time.Minute, "the cluster Ready on the hub", func(ctx context.Context) (bool, string) {
		c := &magosv1.Cluster{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Name: clusterName}, c); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionReady), fmt.Sprintf("cluster %s: %+v", clusterName, c.Status.Conditions)
	})
	// The charts' own checks, as `helm test` runs them: Pods of the images, on the kubelets.
	helmTest(t, ctx, hub, "magos-hub", system)
	helmTest(t, ctx, spoke, "magos-agent", system)
	stats.pods += 2

	// 4. A Project and a Rollout on the hub, a Workspace in the spoke.
	mustCreate(t, ctx, hub.Client, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: "default"}})
	mustCreate(t, ctx, hub.Client, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "checks", Namespace: "default"}})
	mustCreate(t, ctx, hub.Client, &magosv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: "default"},
		Spec: magosv1.RolloutSpec{ProjectRef: "infra", Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
			{Name: "r1", Selector: magosv1.LabelSelector{MatchLabels: map[string]magosv1.LabelValue{"region": "r1"}}},
		}}},
	})
	ws := workspace("edge", repoURL, "r1")
	// A sensitive literal: it must reach tofu, and never a Job or Pod spec in plain text.
	const apiKey = "sk-literal-7f3a9c1e"
	mustCreate(t, ctx, spoke.Client, variables(ws.Name, map[string]string{"region": "r1"}, map[string]string{"api_key": apiKey}))
	mustCreate(t, ctx, spoke.Client, ws)

	// 5. Pending -> Applied through real Jobs.
	applied := waitApplied(t, ctx, spoke, ws.Name, "")
	t.Logf("edge Applied as run %s", applied.Status.CurrentRunID)
	state := tfState(t, ctx, spoke, ws.Name)
	if !strings.Contains(state, `"region":"r1"`) && !strings.Contains(state, `"region": "r1"`) {
		t.Fatalf("the state Secret does not record the apply's input region=r1:\n%s", state)
	}
	if !strings.Contains(state, `"keyed":true`) && !strings.Contains(state, `"keyed": true`) {
		t.Fatalf("the sensitive api_key did not reach tofu (keyed is not true):\n%s", state)
	}
	checkRunJobs(t, ctx, spoke, ws.Name, applied.Status.CurrentRunID, stats)
	checkRunOutputs(t, ctx, env.Magosctl, hub, spoke, ws.Name, applied.Status.CurrentRunID, apiKey)
	for _, list := range []client.ObjectList{&batchv1.JobList{}, &corev1.PodList{}} {
		if err := spoke.Client.List(ctx, list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), apiKey) {
			t.Fatalf("the sensitive literal appears in plain text in a %T of the spoke", list)
		}
	}
	poll(t, ctx, 2*time.Minute, "the Rollout completes on the hub", func(ctx context.Context) (bool, string) {
		r := &magosv1.Rollout{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "infra"}, r); err != nil {
			return false, err.Error()
		}
		return r.Status.Phase == magosv1.PhaseApplied, fmt.Sprintf("rollout %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
	})
	checkDashboard(t, ctx, hub, ws.Name)

	t.Run("a new commit is planned and applied through new Jobs", func(t *testing.T) {
		commit(map[string]string{"main.tf": strings.Replace(module, `default = "v1"`, `default = "v2"`, 1)})
		next := waitApplied(t, ctx, spoke, ws.Name, applied.Status.CurrentRunID)
		if state := tfState(t, ctx, spoke, ws.Name); !strings.Contains(state, `"v2"`) {
			t.Fatalf("the state does not record release v2 after the new commit:\n%s", state)
		}
		checkRunJobs(t, ctx, spoke, ws.Name, next.Status.CurrentRunID, stats)
	})

	t.Run("a run past its deadline is Failed with the reason", func(t *testing.T) {
		// A quarter of a million HCL evaluations: seconds of work on top of the Pod's start and tofu
		// init, past the plan's deadline of one second, in little memory.
		gitRepo(t, repos, "slow.git", map[string]string{"main.tf": module + `
locals {
  slow = [for i in range(256) : length(join("", [for j in range(1024) : format("%d", i * j)]))]
}
output "slow" {
  value = sum(local.slow)
}
`})
		w := workspace("slow", strings.TrimSuffix(repoURL, "/infra.git")+"/slow.git", "none")
		w.Spec.Plan = &magosv1.JobOverrides{TimeoutSeconds: ptrTo[int64](1)}
		mustCreate(t, ctx, spoke.Client, variables(w.Name, map[string]string{"region": "none"}, nil))
		mustCreate(t, ctx, spoke.Client, w)
		failed := waitFailed(t, ctx, spoke, w.Name)
		if !strings.Contains(strings.ToLower(failed.Status.Message), "timeout") {
			t.Fatalf("the Failed message does not name the timeout: %q", failed.Status.Message)
		}
		stats.jobs++
	})

	t.Run("an OOM-killed runner is Failed with the reason", func(t *testing.T) {
		// 1,024 strings of 1 MiB each: tofu needs far more than the runner's 512Mi limit to
		// plan this, and the kernel kills it.
		gitRepo(t, repos, "oom.git", map[string]string{"main.tf": module + `
locals {
  big = [for i in range(1024) : join("", [for j in range(1024) : format("%01024d", i * 1024 + j)])]
}
output "big" {
  value = length(local.big)
}
`})
		oomURL := strings.TrimSuffix(repoURL, "/infra.git") + "/oom.git"
		w := workspace("hungry", oomURL, "none")
		mustCreate(t, ctx, spoke.Client, variables(w.Name, map[string]string{"region": "none"}, nil))
		mustCreate(t, ctx, spoke.Client, w)
		failed := waitFailed(t, ctx, spoke, w.Name)
		if !strings.Contains(failed.Status.Message, "OOM") {
			t.Fatalf("the Failed message does not say the runner was OOM-killed: %q", failed.Status.Message)
		}
		stats.jobs++
	})

	t.Run("a runner Pod deleted mid-apply: Failed, never applied twice, state intact, retried as a new run", func(t *testing.T) {
		// The slow module keeps the apply busy for seconds: long enough to delete its Pod.
		w := workspace("victim", strings.TrimSuffix(repoURL, "/infra.git")+"/slow.git", "none")
		mustCreate(t, ctx, spoke.Client, variables(w.Name, map[string]string{"region": "none"}, nil))
		mustCreate(t, ctx, spoke.Client, w)
		var victim corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods := &corev1.PodList{}
			if err := spoke.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"magosproject.io/workspace": w.Name, "magosproject.io/job-type": "apply"}); err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					victim = p
					return true, nil
				}
				if p.Status.Phase == corev1.PodSucceeded {
					return false, fmt.Errorf("the apply Pod %s finished before it could be deleted", p.Name)
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		runID := victim.Labels["magosproject.io/run-id"]
		t.Logf("deleting the apply Pod %s of run %s while it runs", victim.Name, runID)
		if err := spoke.Client.Delete(ctx, &victim); err != nil {
			t.Fatal(err)
		}
		failed := waitFailed(t, ctx, spoke, w.Name)
		if failed.Status.CurrentRunID != runID || !strings.Contains(failed.Status.Message, "deleted") {
			t.Fatalf("want run %s Failed saying its Pod was deleted, got run %s: %q", runID, failed.Status.CurrentRunID, failed.Status.Message)
		}
		// Kubernetes did not start a second Pod for that apply, and Magos no second apply Job.
		applyPods := func() int {
			pods := &corev1.PodList{}
			if err := spoke.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"magosproject.io/run-id": runID, "magosproject.io/job-type": "apply"}); err != nil {
				t.Fatal(err)
			}
			return len(pods.Items)
		}
		jobs := &batchv1.JobList{}
		if err := spoke.Client.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{"magosproject.io/run-id": runID, "magosproject.io/job-type": "apply"}); err != nil {
			t.Fatal(err)
		}
		if len(jobs.Items) != 1 || jobs.Items[0].Status.Succeeded != 0 || jobs.Items[0].Status.Active != 0 || applyPods() > 1 {
			t.Fatalf("run %s: %d apply Jobs (want 1, not succeeded, not active), %d apply Pods (want at most the deleted one)", runID, len(jobs.Items), applyPods())
		}
		// Retried as users do (magosctl retry against the spoke): a new run, planned afresh,
		// applies, and the state the interrupted apply left still reads.
		if out, err := exec.CommandContext(ctx, env.Magosctl, "--kubeconfig", spoke.Kubeconfig, "-n", "default", "retry", w.Name).CombinedOutput(); err != nil {
			t.Fatalf("magosctl retry: %v\n%s", err, out)
		}
		next := waitApplied(t, ctx, spoke, w.Name, runID)
		if state := tfState(t, ctx, spoke, w.Name); !strings.Contains(state, "terraform_data") {
			t.Fatalf("the state after the retry has no terraform_data:\n%s", state)
		}
		checkRunJobs(t, ctx, spoke, w.Name, next.Status.CurrentRunID, stats)
		stats.jobs++ // the interrupted apply
	})

	t.Run("runs per minute through Jobs", func(t *testing.T) {
		// Ten Workspaces of the Project without a Rollout, all at once: from the first plan
		// Job created to the last apply Job completed, as the Jobs themselves tell it.
		const n = 10
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("burst-%d", i)
			mustCreate(t, ctx, spoke.Client, variables(names[i], map[string]string{"region": "none"}, nil))
			mustCreate(t, ctx, spoke.Client, workspace(names[i], repoURL, "none"))
		}
		for _, name := range names {
			waitApplied(t, ctx, spoke, name, "")
		}
		jobs := &batchv1.JobList{}
		if err := spoke.Client.List(ctx, jobs, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		var first, last time.Time
		for _, j := range jobs.Items {
			if !strings.HasPrefix(j.Name, "burst-") {
				continue
			}
			if first.IsZero() || j.CreationTimestamp.Time.Before(first) {
				first = j.CreationTimestamp.Time
			}
			if j.Status.CompletionTime != nil && j.Status.CompletionTime.Time.After(last) {
				last = j.Status.CompletionTime.Time
			}
			stats.jobs++
			stats.pods++
		}
		took := last.Sub(first)
		t.Logf("real-node: %d runs (plan + apply Jobs) in %s: %.1f runs/min", n, took.Round(time.Second), n/took.Minutes())
	})

	// The hub's and the agent's memory, as the nodes' kernels count it (one replica each, before the upgrade).
	for _, c := range []struct {
		cl   *cluster
		proc string
	}{{hub, "magos-hub"}, {spoke, "magos-agent"}} {
		rss, err := c.cl.Node.RSS(ctx, c.proc)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("real-node: %s Pod RSS %.1f MiB", c.proc, float64(rss[c.proc])/(1<<20))
	}
	stats.pods += 2 // the hub's and the agent's

	t.Run("the agent renews its hub token and restarts on it once its bootstrap token is gone", func(t *testing.T) {
		// The agent Pod keeps its renewed token in the spoke; the hub itself says whose it is.
		kept := &corev1.Secret{}
		poll(t, ctx, 2*time.Minute, "the agent's kept hub token", func(ctx context.Context) (bool, string) {
			if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: system, Name: "magos-agent-hub-token"}, kept); err != nil {
				return false, err.Error()
			}
			return len(kept.Data["token"]) > 0, "the Secret has no token yet"
		})
		boot, err := clientcmd.Load(bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		for _, ai := range boot.AuthInfos {
			if ai.Token == string(kept.Data["token"]) {
				t.Fatal("the kept token is the bootstrap token: the agent did not renew it")
			}
		}
		cfg, err := clientcmd.NewDefaultClientConfig(*boot, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfg.BearerToken = string(kept.Data["token"])
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the hub refuses the agent's renewed token: %v", err)
		}
		if want := "system:serviceaccount:magos-cluster-" + clusterName + ":magos-agent"; who.Status.UserInfo.Username != want {
			t.Fatalf("the renewed token is %q's, want %q's", who.Status.UserInfo.Username, want)
		}
		// The bootstrap token gone (its Secret now holds a token the hub refuses), the agent
		// Pod restarted: the new Pod must reach the hub with the kept token alone.
		for _, ai := range boot.AuthInfos {
			ai.Token = "revoked"
		}
		broken, err := clientcmd.Write(*boot)
		if err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{}
		if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: system, Name: "magos-hub-kubeconfig"}, sec); err != nil {
			t.Fatal(err)
		}
		sec.Data["kubeconfig"] = broken
		if err := spoke.Client.Update(ctx, sec); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		if err := spoke.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "magos-agent"}); err != nil {
			t.Fatal(err)
		}
		stats.pods++
		poll(t, ctx, 3*time.Minute, "the old agent Pod gone and a new one running", func(ctx context.Context) (bool, string) {
			pods := &corev1.PodList{}
			if err := spoke.Client.List(ctx, pods, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "magos-agent"}); err != nil {
				return false, err.Error()
			}
			running := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil || p.CreationTimestamp.Time.Before(restarted.Add(-time.Second)) && p.Status.Phase == corev1.PodRunning {
					return false, "the old agent Pod is still there"
				}
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running > 0, DescribePods(ctx, spoke, system)
		})
		restarted = time.Now()
		poll(t, ctx, 3*time.Minute, "a heartbeat from the restarted agent", func(ctx context.Context) (bool, string) {
			c := &magosv1.Cluster{}
			if err := hub.Client.Get(ctx, client.ObjectKey{Name: clusterName}, c); err != nil {
				return false, err.Error()
			}
			hb := c.Status.LastHeartbeatTime
			return hb != nil && hb.After(restarted) && meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionReady),
				fmt.Sprintf("heartbeat %v, conditions %+v\n%s", hb, c.Status.Conditions, DescribePods(ctx, spoke, system))
		})
	})

	t.Run("cut off from the hub, the spoke applies no new commit; healed, the Rollout completes it", func(t *testing.T) {
		// A real partition: the spoke node drops every packet to the hub's address (its own
		// firewall, not Magos), while git and its own API server stay reachable.
		block := func(op string) {
			t.Helper()
			for _, chain := range []string{"OUTPUT", "FORWARD"} {
				if out, err := spoke.Node.Exec(ctx, "iptables", op, chain, "-d", hubAddr, "-j", "DROP"); err != nil {
					t.Fatalf("iptables %s %s: %v %s", op, chain, err, out)
				}
			}
		}
		before := &magosv1.Workspace{}
		if err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(ws), before); err != nil {
			t.Fatal(err)
		}
		block("-I")
		healed := false
		defer func() {
			if !healed {
				block("-D")
			}
		}()
		poll(t, ctx, 2*time.Minute, "the hub sees the spoke unavailable", func(ctx context.Context) (bool, string) {
			c := &magosv1.Cluster{}
			if err := hub.Client.Get(ctx, client.ObjectKey{Name: clusterName}, c); err != nil {
				return false, err.Error()
			}
			return !meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionAvailable), fmt.Sprintf("%+v", c.Status.Conditions)
		})
		cut := time.Now()
		commit(map[string]string{"main.tf": strings.Replace(module, `default = "v1"`, `default = "v4"`, 1)})
		// The agent detects the commit on its own (git is reachable): give it a few polls,
		// then check from the spoke that no apply Job started while it was cut off.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 40*time.Second, true, func(ctx context.Context) (bool, error) {
			jobs := &batchv1.JobList{}
			if err := spoke.Client.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{"magosproject.io/workspace": ws.Name, "magosproject.io/job-type": "apply"}); err != nil {
				return false, nil
			}
			for _, j := range jobs.Items {
				if j.CreationTimestamp.Time.After(cut) {
					return false, fmt.Errorf("apply Job %s started while the spoke was cut off from the hub", j.Name)
				}
			}
			return false, nil
		})
		if err != nil && !wait.Interrupted(err) {
			t.Fatal(err)
		}
		if cur := tfState(t, ctx, spoke, ws.Name); strings.Contains(cur, `"v4"`) {
			t.Fatal("release v4 was applied while the spoke was cut off from the hub")
		}
		block("-D")
		healed = true
		after := waitApplied(t, ctx, spoke, ws.Name, before.Status.CurrentRunID)
		for after.Status.ObservedRevision == before.Status.ObservedRevision {
			after = waitApplied(t, ctx, spoke, ws.Name, after.Status.CurrentRunID)
		}
		if cur := tfState(t, ctx, spoke, ws.Name); !strings.Contains(cur, `"v4"`) {
			t.Fatalf("the state does not record release v4 after the partition healed:\n%s", cur)
		}
		stats.jobs += 2
	})

	t.Run("helm upgrade of both charts keeps a running Rollout going", func(t *testing.T) {
		// A new commit starts rolling out; both releases are upgraded while it does (the hub to
		// two replicas, leader election choosing one); the Rollout still ends Applied on it.
		before := &magosv1.Workspace{}
		if err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(ws), before); err != nil {
			t.Fatal(err)
		}
		commit(map[string]string{"main.tf": strings.Replace(module, `default = "v1"`, `default = "v3"`, 1)})
		hubValues["replicaCount"] = 2
		helmInstall(t, ctx, hub, filepath.Join(env.RepoRoot, "charts/magos-hub"), "magos-hub", system, hubValues, true)
		agentValues["log"] = map[string]any{"level": "debug"}
		helmInstall(t, ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system, agentValues, true)
		stats.releases += 2
		stats.pods += 3 // two hub replicas and the new agent
		next := waitApplied(t, ctx, spoke, ws.Name, before.Status.CurrentRunID)
		for next.Status.ObservedRevision == before.Status.ObservedRevision {
			next = waitApplied(t, ctx, spoke, ws.Name, next.Status.CurrentRunID)
		}
		if state := tfState(t, ctx, spoke, ws.Name); !strings.Contains(state, `"v3"`) {
			t.Fatalf("the state does not record release v3 after the upgrade:\n%s", state)
		}
		poll(t, ctx, 3*time.Minute, "the Rollout completes on the new commit", func(ctx context.Context) (bool, string) {
			r := &magosv1.Rollout{}
			if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "infra"}, r); err != nil {
				return false, err.Error()
			}
			onCommit := len(r.Status.Revisions) > 0 && r.Status.Revisions[0].Commit == next.Status.ObservedRevision
			return r.Status.Phase == magosv1.PhaseApplied && onCommit, fmt.Sprintf("rollout %s %s: %s %+v", r.Status.Phase, r.Status.Reason, r.Status.Message, r.Status.Revisions)
		})
	})

	t.Run("magosctl rollout rollback puts the previous commit back through runner Jobs, and the Rollout holds it", func(t *testing.T) {
		before := &magosv1.Workspace{}
		if err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(ws), before); err != nil {
			t.Fatal(err)
		}
		applied := before.Status.AppliedRevisions
		if applied == nil || len(applied.Commits) < 2 {
			t.Fatalf("edge applied %+v: want at least two commits to roll back between", applied)
		}
		previous := applied.Commits[len(applied.Commits)-2]
		if out, err := exec.CommandContext(ctx, env.Magosctl, "--kubeconfig", hub.Kubeconfig, "-n", "default", "rollout", "rollback", "infra",
			"--reason", "real-node test").CombinedOutput(); err != nil || !strings.Contains(string(out), previous) {
			t.Fatalf("magosctl rollout rollback: %v\n%s\nwant it to name %s", err, out, previous)
		}
		poll(t, ctx, 5*time.Minute, "the Rollout rolled back", func(ctx context.Context) (bool, string) {
			r := &magosv1.Rollout{}
			if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "infra"}, r); err != nil {
				return false, err.Error()
			}
			return r.Status.ObservedGeneration == r.Generation && r.Status.Reason == magosv1.ReasonRolledBack,
				fmt.Sprintf("rollout %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		})
		after := &magosv1.Workspace{}
		if err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(ws), after); err != nil {
			t.Fatal(err)
		}
		// The run that applied it (the agent may have minted another since, for the ref's head,
		// which waits for a grant the Rollout does not give while it holds the rollback).
		var rolledBack string
		for _, rec := range after.Status.Runs {
			if rec.Revision == previous && rec.Phase == magosv1.PhaseApplied && rec.RunID != before.Status.CurrentRunID {
				rolledBack = rec.RunID
				break
			}
		}
		if after.Status.ObservedRevision != previous || rolledBack == "" {
			t.Fatalf("edge is at %s (runs %+v), want %s applied by a new run", after.Status.ObservedRevision, after.Status.Runs, previous)
		}
		// The tofu state, which the module's backend wrote in the spoke, is release v4's again.
		if state := tfState(t, ctx, spoke, ws.Name); !strings.Contains(state, `"v4"`) || strings.Contains(state, `"v3"`) {
			t.Fatalf("the state does not record release v4 after the rollback:\n%s", state)
		}
		checkRunJobs(t, ctx, spoke, ws.Name, rolledBack, stats)
	})

	t.Run("a step's verification runs as a Job on the kubelet: a passing check lets its Workspace be Applied, a failing one fails it and halts the Rollout", func(t *testing.T) {
		const checkImage = "magos.local/envcheck:1"
		if err := spoke.Node.LoadImage(ctx, scratchImage(t, ctx, checkImage, "envcheck", envcheckProgram, `["/usr/local/bin/envcheck"]`)); err != nil {
			t.Fatalf("loading %s into %s: %v", checkImage, spoke.Node.Name, err)
		}
		gitRepo(t, repos, "verified.git", map[string]string{"main.tf": module + `
output "region" {
  value = var.region
}
`})
		verifiedURL := strings.TrimSuffix(repoURL, "/infra.git") + "/verified.git"
		mustCreate(t, ctx, hub.Client, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "verified", Namespace: "default"}})
		mustCreate(t, ctx, hub.Client, &magosv1.Rollout{
			ObjectMeta: metav1.ObjectMeta{Name: "verified", Namespace: "default"},
			Spec: magosv1.RolloutSpec{ProjectRef: "verified", Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{{
				Name:     "checked",
				Selector: magosv1.LabelSelector{MatchExpressions: []magosv1.LabelSelectorRequirement{{Key: "region", Operator: "In", Values: []string{"ok", "bad"}}}},
				Verification: &magosv1.StepVerification{
					Expression: `outputs.region in ["ok", "bad"]`,
					Job:        &magosv1.VerificationJob{Image: checkImage, Args: []string{"OUTPUT_REGION=ok", "MAGOS_NAMESPACE=default"}, Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
				},
			}}}},
		})
		for _, region := range []string{"ok", "bad"} {
			w := workspace("checked-"+region, verifiedURL, region)
			w.Spec.ProjectRef.Name = "verified"
			mustCreate(t, ctx, spoke.Client, variables(w.Name, map[string]string{"region": region}, nil))
			mustCreate(t, ctx, spoke.Client, w)
		}
		ok := waitApplied(t, ctx, spoke, "checked-ok", "")
		if v := ok.Status.Verification; v == nil || v.Result != magosv1.VerificationPassed {
			t.Fatalf("checked-ok is Applied with verification %+v, want Passed", v)
		}
		bad := waitFailed(t, ctx, spoke, "checked-bad")
		if bad.Status.Reason != magosv1.ReasonVerificationFailed || !strings.Contains(bad.Status.Message, "code 3") {
			t.Fatalf("checked-bad: %s/%s %q, want VerificationFailed naming exit code 3", bad.Status.Phase, bad.Status.Reason, bad.Status.Message)
		}
		// The kubelet's own account: one verify Job per Workspace, of the check image, which
		// succeeded for ok and failed for bad.
		for _, w := range []*magosv1.Workspace{ok, bad} {
			jobs := &batchv1.JobList{}
			if err := spoke.Client.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{"magosproject.io/run-id": w.Status.CurrentRunID, "magosproject.io/job-type": "verify"}); err != nil {
				t.Fatal(err)
			}
			if len(jobs.Items) != 1 {
				t.Fatalf("%s: %d verify Jobs for run %s, want 1", w.Name, len(jobs.Items), w.Status.CurrentRunID)
			}
			j := jobs.Items[0]
			if img := j.Spec.Template.Spec.Containers[0].Image; img != checkImage {
				t.Errorf("%s: the verify Job runs %s, want %s", w.Name, img, checkImage)
			}
			wantOK := w.Name == "checked-ok"
			if (j.Status.Succeeded == 1) != wantOK || (j.Status.Failed > 0) == wantOK {
				t.Errorf("%s: verify Job succeeded=%d failed=%d", w.Name, j.Status.Succeeded, j.Status.Failed)
			}
			stats.jobs++
			stats.pods++
		}
		poll(t, ctx, 2*time.Minute, "the Rollout verified halts at its step", func(ctx context.Context) (bool, string) {
			r := &magosv1.Rollout{}
			if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "verified"}, r); err != nil {
				return false, err.Error()
			}
			return r.Status.Phase == magosv1.PhaseFailed && r.Status.Reason == magosv1.ReasonStepFailed, fmt.Sprintf("rollout %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		})
	})

	t.Run("a runner that exits 0 without a result: the plan Job completes, the run is Failed, nothing applied", func(t *testing.T) {
		// The agent upgraded to run its Jobs with a runner that exits 0 and writes nothing, the
		// kubelet's own account of that Job: Complete, and no termination message. The agent
		// must count such a run Failed, never go on to apply it. It runs last: while the silent
		// runner is in place, other Workspaces' drift re-plans fail as well.
		const silentImage = "magos-silent-runner:1"
		if err := spoke.Node.LoadImage(ctx, silentRunnerImage(t, ctx, silentImage)); err != nil {
			t.Fatalf("loading %s into %s: %v", silentImage, spoke.Node.Name, err)
		}
		silentValues := maps.Clone(agentValues)
		runnerValues := maps.Clone(agentValues["runner"].(map[string]any))
		repo, tag, _ := strings.Cut(silentImage, ":")
		runnerValues["image"] = map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"}
		silentValues["runner"] = runnerValues
		helmInstall(t, ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system, silentValues, true)
		stats.releases++
		stats.pods++ // the upgraded agent

		w := workspace("silent", repoURL, "none")
		mustCreate(t, ctx, spoke.Client, variables(w.Name, map[string]string{"region": "none"}, nil))
		mustCreate(t, ctx, spoke.Client, w)
		// Settled either way: a run counted a success must fail the test at once, not time out.
		failed := &magosv1.Workspace{}
		poll(t, ctx, 5*time.Minute, "Workspace "+w.Name+" settled", func(ctx context.Context) (bool, string) {
			if err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(w), failed); err != nil {
				return false, err.Error()
			}
			return failed.Status.Phase == magosv1.PhaseFailed || failed.Status.Phase == magosv1.PhaseApplied,
				fmt.Sprintf("phase %s: %s", failed.Status.Phase, failed.Status.Message)
		})
		runID := failed.Status.CurrentRunID
		if failed.Status.Phase != magosv1.PhaseFailed {
			t.Fatalf("run %s, whose runner exited 0 without a result, is %s, want Failed: %q", runID, failed.Status.Phase, failed.Status.Message)
		}
		t.Logf("%s Failed: %s", w.Name, failed.Status.Message)
		for _, want := range []string{"completed but left no result", "the runner exited with code 0", "without writing a result", "the run is counted Failed"} {
			if !strings.Contains(failed.Status.Message, want) {
				t.Errorf("the Failed message of run %s does not say %q: %q", runID, want, failed.Status.Message)
			}
		}
		// From the spoke: the run's one plan Job Complete, its Pod the silent runner that
		// exited 0 and left no termination message; no apply Job of the Workspace; no state.
		jobs := &batchv1.JobList{}
		if err := spoke.Client.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{"magosproject.io/workspace": w.Name}); err != nil {
			t.Fatal(err)
		}
		var plans int
		for _, j := range jobs.Items {
			op := j.Labels["magosproject.io/job-type"]
			if op == "apply" {
				t.Errorf("the silent run's Workspace has an apply Job %s (run %s): a run without a result went on to apply", j.Name, j.Labels["magosproject.io/run-id"])
			}
			if j.Labels["magosproject.io/run-id"] != runID || op != "plan" {
				continue
			}
			plans++
			if j.Status.Succeeded != 1 || !jobComplete(&j) {
				t.Errorf("the plan Job %s of run %s did not complete: succeeded=%d failed=%d %+v", j.Name, runID, j.Status.Succeeded, j.Status.Failed, j.Status.Conditions)
			}
			pods := &corev1.PodList{}
			if err := spoke.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"job-name": j.Name}); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 1 {
				t.Fatalf("the plan Job %s has %d Pods, want 1", j.Name, len(pods.Items))
			}
			p := pods.Items[0]
			if img := p.Spec.Containers[0].Image; img != silentImage {
				t.Errorf("the plan Job %s ran image %s, want %s", j.Name, img, silentImage)
			}
			cs := p.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 0 || cs[0].State.Terminated.Message != "" {
				t.Errorf("the plan Job %s: want the runner terminated with exit code 0 and no termination message, got %+v", j.Name, cs)
			}
			stats.jobs++
			stats.pods++
		}
		if plans != 1 {
			t.Fatalf("run %s of %s had %d plan Jobs, want 1", runID, w.Name, plans)
		}
		if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tfstate-default-" + w.Name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the Workspace %s has a state Secret after a run without a result (want none: nothing applied): %v", w.Name, err)
		}
		if t.Failed() {
			return
		}

		// The real runner back: the run retried as users do succeeds through plan and apply Jobs.
		helmInstall(t, ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system, agentValues, true)
		stats.releases++
		stats.pods++ // the agent again
		if out, err := exec.CommandContext(ctx, env.Magosctl, "--kubeconfig", spoke.Kubeconfig, "-n", "default", "retry", w.Name).CombinedOutput(); err != nil {
			t.Fatalf("magosctl retry: %v\n%s", err, out)
		}
		next := waitApplied(t, ctx, spoke, w.Name, runID)
		if state := tfState(t, ctx, spoke, w.Name); !strings.Contains(state, "terraform_data") {
			t.Fatalf("the state after the real runner's run has no terraform_data:\n%s", state)
		}
		checkRunJobs(t, ctx, spoke, w.Name, next.Status.CurrentRunID, stats)
	})

	writeSummary(t, stats)
}

// waitFailed waits for the Workspace to be Failed.
func waitFailed(t *testing.T, ctx context.Context, cl *cluster, name string) *magosv1.Workspace {
	t.Helper()
	ws := &magosv1.Workspace{}
	poll(t, ctx, 5*time.Minute, "Workspace "+name+" Failed", func(ctx context.Context) (bool, string) {
		if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, ws); err != nil {
			return false, err.Error()
		}
		return ws.Status.Phase == magosv1.PhaseFailed, fmt.Sprintf("phase %s: %s", ws.Status.Phase, ws.Status.Message)
	})
	t.Logf("%s Failed: %s", name, ws.Status.Message)
	return ws
}

// checkDashboard reads the Rollout infra from the hub's dashboard as a person would: through the
// chart's Service (a NodePort on the hub's node, kube-proxy forwarding to the hub's Pod), signed
// in with the token of a ServiceAccount that may read Magos objects in default. The grid shows
// the spoke's Workspace Applied.
func checkDashboard(t *testing.T, ctx context.Context, hub *cluster, workspace string) {
	t.Helper()
	svc := &corev1.Service{}
	if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: system, Name: "magos-hub-dashboard"}, svc); err != nil {
		t.Fatalf("the dashboard Service: %v", err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("the dashboard Service has ports %+v, want one NodePort", svc.Spec.Ports)
	}
	const viewer = "dashboard-viewer"
	mustCreate(t, ctx, hub.Client, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: viewer}})
	mustCreate(t, ctx, hub.Client, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: viewer},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{magosv1.GroupVersion.Group}, Resources: []string{"rollouts", "workspaces"}, Verbs: []string{"get", "list"}}}})
	mustCreate(t, ctx, hub.Client, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: viewer},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: viewer},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: viewer}}})
	cfg, err := clientcmd.BuildConfigFromFlags("", hub.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, viewer, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:%d/api/v1/namespaces/default/rollouts/infra", hub.Node.Address, svc.Spec.Ports[0].NodePort)
	poll(t, ctx, 2*time.Minute, "the dashboard shows the Workspace applied", func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var grid struct {
			Phase string `json:"phase"`
			Steps []struct {
				Workspaces []struct{ Cluster, Name, Phase string } `json:"workspaces"`
			} `json:"steps"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &grid) != nil {
			return false, fmt.Sprintf("GET %s: %d %s", url, res.StatusCode, body)
		}
		for _, s := range grid.Steps {
			for _, w := range s.Workspaces {
				if w.Cluster == clusterName && w.Name == workspace && w.Phase == string(magosv1.PhaseApplied) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("the grid (phase %s) does not show %s/%s Applied: %s", grid.Phase, clusterName, workspace, body)
	})
	t.Logf("dashboard: %s shows %s/%s Applied", url, clusterName, workspace)
}

func mustCreate(t *testing.T, ctx context.Context, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(ctx, o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// workspace is a Workspace of the Project infra (the Rollout's, when region is r1) or, for
// region "none", of the Project checks, which has no Rollout: its Workspaces run on their own.
func workspace(name, repoURL, region string) *magosv1.Workspace {
	project := "infra"
	if region == "none" {
		project = "checks"
	}
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"region": region}},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef:      magosv1.ProjectReference{Name: project},
			Source:          magosv1.Source{RepoURL: repoURL, TargetRevision: "main", Path: "."},
			Terraform:       magosv1.TerraformSpec{Version: tofuVersion},
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: name}},
		},
	}
}

// variables is the VariableSet of a Workspace (named after it): plain values and sensitive
// literals.
func variables(name string, plain, sensitive map[string]string) *magosv1.VariableSet {
	vs := &magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	for k, v := range plain {
		vs.Spec.Variables = append(vs.Spec.Variables, magosv1.Variable{Name: k, Value: ptrTo(v)})
	}
	for k, v := range sensitive {
		vs.Spec.Variables = append(vs.Spec.Variables, magosv1.Variable{Name: k, Value: ptrTo(v), Sensitive: true})
	}
	return vs
}

// checkRunOutputs checks, through magosctl as users read them, that the run's plan text and
// apply log were kept from the real runner Pods' logs (read by the agent through the API server
// from the kubelet) without the sensitive value, and that the hub lists the run and shows the
// same plan text (the agent's copy).
func checkRunOutputs(t *testing.T, ctx context.Context, magosctlPath string, hub, spoke *cluster, name, runID, secret string) {
	t.Helper()
	magosctl := func(kubeconfig string, args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, magosctlPath, append([]string{"--kubeconfig", kubeconfig, "-n", "default"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("magosctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	plan := magosctl(spoke.Kubeconfig, "plan", name, "--run", runID)
	if !strings.Contains(plan, "will be created") || !strings.Contains(plan, "Plan: ") {
		t.Fatalf("magosctl plan %s --run %s printed no plan:\n%s", name, runID, plan)
	}
	apply := magosctl(spoke.Kubeconfig, "logs", name, "--run", runID, "--operation", "apply")
	if !strings.Contains(apply, "Apply complete!") {
		t.Fatalf("magosctl logs %s --run %s --operation apply printed no apply:\n%s", name, runID, apply)
	}
	if strings.Contains(plan+apply, secret) {
		t.Fatalf("the plan text or apply log of run %s shows the sensitive value", runID)
	}
	poll(t, ctx, time.Minute, "the hub lists run "+runID, func(ctx context.Context) (bool, string) {
		out, err := exec.CommandContext(ctx, magosctlPath, "--kubeconfig", hub.Kubeconfig, "-n", "default", "runs", name, "--cluster", clusterName).CombinedOutput()
		return err == nil && strings.Contains(string(out), runID+" ") && strings.Contains(string(out), "Applied"), string(out)
	})
	// The agent's copy on the hub, made under the hub chart's RBAC and scope policy: the same
	// plan text, read from the hub.
	fromHub := magosctl(hub.Kubeconfig, "plan", name, "--run", runID, "--cluster", clusterName)
	if fromHub != plan {
		t.Fatalf("magosctl plan %s --run %s --cluster %s from the hub printed:\n%s\nwant what the spoke printed:\n%s", name, runID, clusterName, fromHub, plan)
	}
}

// waitApplied waits for the Workspace to be Applied by a run other than notRun.
func waitApplied(t *testing.T, ctx context.Context, cl *cluster, name, notRun string) *magosv1.Workspace {
	t.Helper()
	ws := &magosv1.Workspace{}
	poll(t, ctx, 5*time.Minute, "Workspace "+name+" Applied", func(ctx context.Context) (bool, string) {
		if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, ws); err != nil {
			return false, err.Error()
		}
		if ws.Status.Phase == magosv1.PhaseFailed && ws.Status.CurrentRunID != notRun {
			t.Fatalf("Workspace %s Failed: %s\n%s", name, ws.Status.Message, describePods(ctx, cl, "default"))
		}
		return ws.Status.Phase == magosv1.PhaseApplied && ws.Status.CurrentRunID != notRun,
			fmt.Sprintf("phase %s run %s: %s", ws.Status.Phase, ws.Status.CurrentRunID, ws.Status.Message)
	})
	return ws
}

// tfState returns the tofu state the module's kubernetes backend wrote in the spoke, decoded
// (the backend stores it gzipped in a Secret named tfstate-default-<suffix>).
func tfState(t *testing.T, ctx context.Context, cl *cluster, workspace string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tfstate-default-" + workspace}, s); err != nil {
		t.Fatalf("the state Secret of %s: %v", workspace, err)
	}
	return gunzip(t, s.Data["tfstate"])
}

// checkRunJobs checks the run's Jobs and their Pods as the kubelet ran them: a plan and an
// apply Job, each Complete, whose Pod ran the runner image as the non-root user with a
// read-only root filesystem, through the Job's own ServiceAccount, and left its result in
// the termination message.
func checkRunJobs(t *testing.T, ctx context.Context, cl *cluster, workspace, runID string, stats *summary) {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := cl.Client.List(ctx, jobs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, j := range jobs.Items {
		if j.Labels["magosproject.io/run-id"] != runID {
			continue
		}
		ops = append(ops, j.Labels["magosproject.io/job-type"])
		if j.Status.Succeeded != 1 {
			t.Errorf("Job %s: succeeded=%d failed=%d", j.Name, j.Status.Succeeded, j.Status.Failed)
		}
		pods := &corev1.PodList{}
		if err := cl.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"job-name": j.Name}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Fatalf("Job %s has %d Pods, want 1", j.Name, len(pods.Items))
		}
		p := pods.Items[0]
		c := p.Spec.Containers[0]
		if !strings.HasPrefix(c.Image, "magos-runner:") {
			t.Errorf("Job %s runs image %s, want magos-runner", j.Name, c.Image)
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("Job %s: the runner's root filesystem is not read-only", j.Name)
		}
		if psc := p.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("Job %s: the runner does not run as a non-root user", j.Name)
		}
		if p.Spec.ServiceAccountName != "magos-job" {
			t.Errorf("Job %s runs as ServiceAccount %s, want magos-job", j.Name, p.Spec.ServiceAccountName)
		}
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 0 {
			t.Fatalf("Job %s: the runner did not end cleanly: %+v", j.Name, cs)
		}
		if msg := cs[0].State.Terminated.Message; !strings.Contains(msg, runID) {
			t.Errorf("Job %s: the termination message does not carry the run's result: %q", j.Name, msg)
		}
		// Pod start latency: created to the runner running.
		stats.podStart = append(stats.podStart, cs[0].State.Terminated.StartedAt.Sub(p.CreationTimestamp.Time))
		stats.pods++
		stats.jobs++
	}
	sort.Strings(ops)
	if !slices.Equal(ops, []string{"apply", "plan"}) {
		t.Fatalf("run %s of %s had Jobs %v, want one plan and one apply", runID, workspace, ops)
	}
}

// jobComplete says whether the Job has the condition Complete.
func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// silentRunnerImage builds an image named ref whose runner exits 0 and writes nothing: no
// result file, so no termination message. It sits where the runner image has the real one
// (/usr/local/bin/magos-agent, which the Job's command [magos-agent, runner] finds on the
// PATH). It returns the image saved as a tarball, for Node.LoadImage.
func silentRunnerImage(t *testing.T, ctx context.Context, ref string) string {
	t.Helper()
	return scratchImage(t, ctx, ref, "magos-agent",
		"// Command magos-agent is a silent runner: it exits 0 and writes nothing.\npackage main\n\nfunc main() {}\n",
		`["/usr/local/bin/magos-agent", "runner"]`)
}

// envcheckProgram is the check a step's verification Job runs in the real-node test: every
// argument NAME=VALUE must be the value of NAME in its environment; it prints what it saw and
// exits 3 on the first mismatch.
const envcheckProgram = `// Command envcheck compares its environment with its arguments NAME=VALUE.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	for _, arg := range os.Args[1:] {
		name, want, _ := strings.Cut(arg, "=")
		got := os.Getenv(name)
		fmt.Printf("envcheck: %s=%q\n", name, got)
		if got != want {
			fmt.Printf("envcheck: %s is %q, want %q\n", name, got, want)
			os.Exit(3)
		}
	}
	fmt.Println("envcheck: ok for", os.Getenv("MAGOS_WORKSPACE"), "run", os.Getenv("MAGOS_RUN_ID"))
}
`

// scratchImage builds, with the Docker Engine's legacy builder from scratch (nothing pulled),
// an image named ref holding one static program, built from the Go source program, at
// /usr/local/bin/<binary>, with entrypoint (a JSON array) as its ENTRYPOINT. It returns the
// image saved as a tarball, for Node.LoadImage.
func scratchImage(t *testing.T, ctx context.Context, ref, binary, program, entrypoint string) string {
	t.Helper()
	dir := t.TempDir()
	src, bctx := filepath.Join(dir, "src"), filepath.Join(dir, "context")
	for _, d := range []string{src, bctx} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(src, "main.go"):     program,
		filepath.Join(bctx, "Dockerfile"): "FROM scratch\nCOPY " + binary + " /usr/local/bin/" + binary + "\nENV PATH=/usr/local/bin\nUSER 65532:65532\nENTRYPOINT " + entrypoint + "\n",
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(bctx, binary), "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", binary, err, out)
	}
	img := exec.CommandContext(ctx, "docker", "build", "-q", "-t", ref, bctx)
	img.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := img.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", ref, err, out)
	}
	t.Cleanup(func() { _, _ = docker(context.WithoutCancel(ctx), "rmi", ref) })
	tarball := filepath.Join(dir, binary+".tar")
	if _, err := docker(ctx, "save", "-o", tarball, ref); err != nil {
		t.Fatal(err)
	}
	return tarball
}

// summary is what the run measured, for the closing line and the notes.
type summary struct {
	pods, jobs, releases int
	readyAfter           time.Duration
	podStart             []time.Duration
}

// writeSummary prints the closing line `real-node: pods=N jobs=J helm-releases=R ok` to the
// file `make test-real` names, and the measurements to the log.
func writeSummary(t *testing.T, s *summary) {
	t.Helper()
	slices.Sort(s.podStart)
	t.Logf("node ready after %s; runner Pod start p50 %s max %s over %d Pods", s.readyAfter.Round(time.Millisecond),
		percentile(s.podStart, 50), percentile(s.podStart, 100), len(s.podStart))
	line := fmt.Sprintf("real-node: pods=%d jobs=%d helm-releases=%d ok\n", s.pods, s.jobs, s.releases)
	if p := os.Getenv("MAGOS_REAL_SUMMARY"); p != "" && !t.Failed() {
		if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*p + 99) / 100
	return d[max(0, min(len(d)-1, i-1))].Round(time.Millisecond)
}

func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	s, err := Gunzip(b)
	if err != nil {
		t.Fatalf("the state is not gzip: %v (%s)", err, base64.StdEncoding.EncodeToString(b[:min(len(b), 32)]))
	}
	return s
}
