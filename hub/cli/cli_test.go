package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// run executes magosctl with args against the cluster's kubeconfig.
func run(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := cli.NewCommand(&out, &errOut)
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func mustRun(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := run(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("magosctl %v: %v", args, err)
	}
	return out
}

type fixture struct {
	hub *localcluster.Cluster
	ctx context.Context
}

func setup(t *testing.T) fixture {
	t.Helper()
	fleet := testenv.Start(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := fixture{hub: fleet.Hub, ctx: ctx}
	for _, name := range []string{"us-east-1", "eu-west-1"} {
		cl := &magosv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": name}},
			Spec:       magosv1.ClusterSpec{Transport: magosv1.TransportAgent, Namespaces: []string{"default", "web"}},
		}
		if name == "eu-west-1" {
			cl.Spec.Namespaces = []string{magosv1.AllNamespaces}
		}
		f.create(t, cl)
		now := metav1.Now()
		cl.Status.LastHeartbeatTime = &now
		cl.Status.Workspaces = 1
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: magosv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Engaged"})
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: magosv1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: magosv1.ReasonAgentHeartbeating})
		if err := f.hub.Client.Status().Update(ctx, cl); err != nil {
			t.Fatal(err)
		}
		f.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace(name)}})
	}
	r := &magosv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "cdn", Namespace: "default"},
		Spec: magosv1.RolloutSpec{ProjectRef: "cdn", Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
			{Name: "us-east-1", Selector: magosv1.MatchLabels(map[string]string{"region": "us-east-1"})},
			{Name: "eu-west-1", Selector: magosv1.MatchLabels(map[string]string{"region": "eu-west-1"})},
			{Name: "ap-south-1", Selector: magosv1.MatchLabels(map[string]string{"region": "ap-south-1"})},
		}}},
	}
	f.create(t, r)
	r.Status = magosv1.RolloutStatus{Phase: magosv1.PhaseReconciling, Reason: magosv1.ReasonLevelProgressing,
		Message: "Executing step eu-west-1 (0/1 applied)", CurrentStep: 1, CurrentStepName: "eu-west-1",
		ObservedGeneration: r.Generation, AppliedWorkspaces: 1, TotalWorkspaces: 2,
		Steps: []magosv1.StepStatus{{Name: "us-east-1", Phase: magosv1.StepCompleted, Failed: 1, MaxFailures: 1}, {Name: "eu-west-1", Phase: magosv1.StepProgressing}, {Name: "ap-south-1", Phase: magosv1.StepFailed}}}
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: magosv1.ConditionProgressing, Status: metav1.ConditionFalse,
		Reason: magosv1.ReasonProgressDeadlineExceeded, Message: "Step eu-west-1 has not progressed since 2026-12-03T12:00:00Z (progressDeadline 10m0s)"})
	if err := f.hub.Client.Status().Update(ctx, r); err != nil {
		t.Fatal(err)
	}
	f.mirror(t, "us-east-1", "edge", "cdn", magosv1.PhaseApplied, strings.Repeat("a", 40))
	f.mirror(t, "eu-west-1", "edge", "cdn", magosv1.PhasePlanning, "")
	f.mirror(t, "eu-west-1", "other", "another-project", magosv1.PhaseApplied, "")
	return f
}

func (f fixture) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := f.hub.Client.Create(f.ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// workspace creates a Workspace (not a mirror) of the Project cdn in the namespace default.
func (f fixture) workspace(t *testing.T, name string) *magosv1.Workspace {
	t.Helper()
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: "cdn"},
			Source:    magosv1.Source{RepoURL: "file:///repo", TargetRevision: "main"},
			Terraform: magosv1.TerraformSpec{Version: "1.10.6"}},
	}
	f.create(t, ws)
	return ws
}

func (f fixture) mirror(t *testing.T, cluster, name, project string, phase magosv1.Phase, rev string) {
	t.Helper()
	f.mirrorOf(t, cluster, name, project, map[string]string{"region": cluster}, magosv1.WorkspaceStatus{Phase: phase, ObservedRevision: rev})
}

// mirrorOf creates the hub's mirror of the spoke Workspace default/<name> of cluster, with labels,
// in Project project, and writes status on it (its observedGeneration and origin filled in).
func (f fixture) mirrorOf(t *testing.T, cluster, name, project string, labels map[string]string, status magosv1.WorkspaceStatus) {
	t.Helper()
	spoke := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels}}
	m := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: mirror.Namespace(cluster), Name: mirror.Name("default", name), Labels: mirror.Labels(cluster, spoke)},
		Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: project},
			Source:    magosv1.Source{RepoURL: "file:///repo", TargetRevision: "main"},
			Terraform: magosv1.TerraformSpec{Version: "1.10.6"}},
	}
	f.create(t, m)
	m.Status = status
	m.Status.ObservedGeneration = 1
	m.Status.Origin = &magosv1.WorkspaceOrigin{Cluster: cluster, Namespace: "default", Name: name, Generation: 1}
	if err := f.hub.Client.Status().Update(f.ctx, m); err != nil {
		t.Fatal(err)
	}
}

func TestClusters(t *testing.T) {
	f := setup(t)
	out := mustRun(t, f.hub.Kubeconfig, "clusters")
	for _, want := range []string{"NAME", "eu-west-1", "us-east-1", "agent", "AgentHeartbeating", "region=us-east-1", "NAMESPACES", "default,web", "*"} {
		if !strings.Contains(out, want) {
			t.Errorf("clusters output lacks %q:\n%s", want, out)
		}
	}
	var list magosv1.ClusterList
	if err := json.Unmarshal([]byte(mustRun(t, f.hub.Kubeconfig, "clusters", "-o", "json")), &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("-o json: %v, %d items", err, len(list.Items))
	}
	if out := mustRun(t, f.hub.Kubeconfig, "clusters", "-o", "yaml"); !strings.Contains(out, "kind: ClusterList") && !strings.Contains(out, "items:") {
		t.Errorf("-o yaml: %s", out)
	}
	if out := mustRun(t, f.hub.Kubeconfig, "clusters", "-o", "wide"); !strings.Contains(out, "AGENT VERSION") || !strings.Contains(out, "CLOCK OFFSET") || !strings.Contains(out, "us-east-1") {
		t.Errorf("-o wide lacks the agent's version:\n%s", out)
	}
	if out := mustRun(t, f.hub.Kubeconfig, "clusters", "-o", "name"); out != "cluster.magosproject.io/eu-west-1\ncluster.magosproject.io/us-east-1\n" {
		t.Errorf("-o name: %q", out)
	}
	if out := mustRun(t, f.hub.Kubeconfig, "clusters", "-o", "jsonpath={.items[*].metadata.name}"); out != "eu-west-1 us-east-1" {
		t.Errorf("-o jsonpath: %q", out)
	}
	if _, err := run(t, f.hub.Kubeconfig, "clusters", "-o", "table"); err == nil || !strings.Contains(err.Error(), `--output "table": want one of json, yaml`) {
		t.Errorf("bad --output: %v", err)
	}
}

func TestRolloutStatus(t *testing.T) {
	f := setup(t)
	out := mustRun(t, f.hub.Kubeconfig, "rollout", "status", "cdn", "-n", "default")
	for _, want := range []string{
		"Rollout default/cdn: Reconciling (LevelProgressing), 1/2 Workspaces applied",
		"Executing step eu-west-1",
		"ProgressDeadlineExceeded: Step eu-west-1 has not progressed since 2026-12-03T12:00:00Z (progressDeadline 10m0s)",
		"STEP", "us-east-1   Completed, 1/1 failures tolerated", "default/edge", "Applied", "aaaaaaaaaaaa",
		"eu-west-1   Progressing", "Planning",
		"ap-south-1  Failed", "(no Workspace matches)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "default/other") {
		t.Errorf("a Workspace of another project is listed:\n%s", out)
	}
	var r magosv1.Rollout
	if err := json.Unmarshal([]byte(mustRun(t, f.hub.Kubeconfig, "rollout", "status", "cdn", "-o", "json")), &r); err != nil || r.Name != "cdn" {
		t.Fatalf("-o json: %v %q", err, r.Name)
	}
}

func TestRolloutWatchEndsWithTheRollout(t *testing.T) {
	f := setup(t)
	key := client.ObjectKey{Namespace: "default", Name: "cdn"}
	set := func(phase magosv1.Phase, reason string) {
		var r magosv1.Rollout
		if err := f.hub.Client.Get(f.ctx, key, &r); err != nil {
			t.Fatal(err)
		}
		r.Status.Phase, r.Status.Reason, r.Status.Message = phase, reason, "m"
		if err := f.hub.Client.Status().Update(f.ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	set(magosv1.PhaseFailed, magosv1.ReasonStepFailed)
	var buf bytes.Buffer
	err := cli.WatchRollout(f.ctx, f.hub.Config, key, &buf, cli.WatchOptions{Redraw: 10 * time.Millisecond})
	if !errors.Is(err, cli.ErrRolloutFailed) || !strings.Contains(err.Error(), "StepFailed") {
		t.Fatalf("watch on a failed rollout: %v", err)
	}
	set(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted)
	if _, err := run(t, f.hub.Kubeconfig, "rollout", "status", "cdn", "-n", "default", "--watch"); err != nil {
		t.Fatalf("watch on a completed rollout: %v", err)
	}
}

// TestRolloutWatchFollowsTheHub watches a Rollout while a mirror changes phase: the watch
// redraws with the new phase, and reads the Workspaces from the hub with one list and one
// watch, though it redraws every 10 ms (polling would list them on every redraw).
func TestRolloutWatchFollowsTheHub(t *testing.T) {
	f := setup(t)
	key := client.ObjectKey{Namespace: "default", Name: "cdn"}
	workspaces := func(watch bool) func(*http.Request) bool {
		return func(r *http.Request) bool {
			return strings.HasSuffix(r.URL.Path, "/workspaces") && (r.URL.Query().Get("watch") == "true") == watch
		}
	}
	cfg, lists := testenv.CountRequests(f.hub.Config, workspaces(false))
	cfg, watches := testenv.CountRequests(cfg, workspaces(true))
	ctx, cancel := context.WithCancel(f.ctx)
	out := &testenv.Buffer{}
	stop := testenv.Background(t, ctx, "rollout watch", func(ctx context.Context) error {
		err := cli.WatchRollout(ctx, cfg, key, out, cli.WatchOptions{Redraw: 10 * time.Millisecond})
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(out.String(), "Planning") {
			return fmt.Errorf("no status drawn yet:\n%s", out.String())
		}
		return nil
	})
	m := &magosv1.Workspace{}
	if err := f.hub.Client.Get(f.ctx, client.ObjectKey{Namespace: mirror.Namespace("eu-west-1"), Name: mirror.Name("default", "edge")}, m); err != nil {
		t.Fatal(err)
	}
	m.Status.Phase = magosv1.PhaseApplying
	if err := f.hub.Client.Status().Update(f.ctx, m); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(out.String(), "Applying") {
			return fmt.Errorf("the watch did not redraw the new phase:\n%s", out.String())
		}
		return nil
	})
	// A measurement window, not a synchronisation: about 100 redraws, none of which may read the hub.
	<-time.After(time.Second)
	cancel()
	stop()
	if lists, watches := lists.Load(), watches.Load(); lists > 2 || watches > 2 {
		t.Errorf("the watch read the Workspaces with %d lists and %d watches, want 1 of each", lists, watches)
	}
}

func TestPauseResume(t *testing.T) {
	f := setup(t)
	key := client.ObjectKey{Namespace: "default", Name: "cdn"}
	for _, tc := range []struct {
		verb string
		want bool
	}{{"pause", true}, {"resume", false}} {
		if out := mustRun(t, f.hub.Kubeconfig, "rollout", tc.verb, "cdn", "-n", "default"); !strings.Contains(out, tc.verb) {
			t.Errorf("%s output: %s", tc.verb, out)
		}
		var r magosv1.Rollout
		if err := f.hub.Client.Get(f.ctx, key, &r); err != nil {
			t.Fatal(err)
		}
		if r.Spec.Paused != tc.want || r.Annotations[keys.PausedBy] != "magos-test-admin" {
			t.Errorf("after %s: paused = %v, %s = %q", tc.verb, r.Spec.Paused, keys.PausedBy, r.Annotations[keys.PausedBy])
		}
	}
}

func TestRetryAndApprove(t *testing.T) {
	f := setup(t)
	ws := f.workspace(t, "api")
	mustRun(t, f.hub.Kubeconfig, "retry", "api", "-n", "default")
	mustRun(t, f.hub.Kubeconfig, "approve", "api", "-n", "default")
	var got magosv1.Workspace
	if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(ws), &got); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, got.Annotations[keys.ReconcileRequest]); err != nil {
		t.Errorf("reconcile-request = %q: %v", got.Annotations[keys.ReconcileRequest], err)
	}
	if got.Annotations[keys.Approved] != "true" {
		t.Errorf("approved = %q", got.Annotations[keys.Approved])
	}
	_, err := run(t, f.hub.Kubeconfig, "retry", mirror.Name("default", "edge"), "-n", "magos-cluster-us-east-1")
	if err == nil || !strings.Contains(err.Error(), "mirror of default/edge in cluster us-east-1: run this against that cluster") ||
		!strings.Contains(err.Error(), "-n default --cluster us-east-1") {
		t.Errorf("retry on a mirror: %v", err)
	}
	// A mirror in us-east-1's namespace whose cluster label claims eu-west-1: its cluster is
	// where it lives, never what its label says, so the hub neither believes nor repeats it.
	liar := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: "magos-cluster-us-east-1", Name: mirror.Name("default", "liar"), Labels: map[string]string{
			"magosproject.io/mirror": "true", "magosproject.io/cluster": "eu-west-1",
			"magosproject.io/origin-namespace": "default", "magosproject.io/origin-name": "liar"}},
		Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: "cdn"},
			Source:    magosv1.Source{RepoURL: "file:///repo", TargetRevision: "main"},
			Terraform: magosv1.TerraformSpec{Version: "1.10.6"}},
	}
	f.create(t, liar)
	_, err = run(t, f.hub.Kubeconfig, "retry", liar.Name, "-n", liar.Namespace)
	if err == nil || !strings.Contains(err.Error(), "labelled a hub mirror, one the hub does not believe") || strings.Contains(err.Error(), "--cluster eu-west-1") {
		t.Errorf("retry on a mirror whose cluster label lies: %v", err)
	}
	var after magosv1.Workspace
	if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(liar), &after); err != nil || after.Annotations[keys.ReconcileRequest] != "" {
		t.Errorf("retry on a mirror whose cluster label lies annotated it (%v): %v", err, after.Annotations)
	}
	if _, err := run(t, f.hub.Kubeconfig, "retry", "missing", "-n", "default"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("retry of a missing Workspace: %v", err)
	}
}

func TestAgentKubeconfig(t *testing.T) {
	f := setup(t)
	_, err := run(t, f.hub.Kubeconfig, "agent-kubeconfig", "nowhere")
	if err == nil || !strings.Contains(err.Error(), "registered as an agent cluster") {
		t.Fatalf("unregistered cluster: %v", err)
	}
	// What the hub's registry creates for an agent cluster (the registry's own tests cover
	// that it does): the ServiceAccount the token is for.
	f.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: mirror.Namespace("us-east-1"), Name: registry.AgentServiceAccount}})
	out := mustRun(t, f.hub.Kubeconfig, "agent-kubeconfig", "us-east-1", "--server", "https://hub.example.com:6443")
	cfg, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || ctx.Namespace != mirror.Namespace("us-east-1") {
		t.Fatalf("context %+v, want namespace %s", ctx, mirror.Namespace("us-east-1"))
	}
	if cfg.Clusters[ctx.Cluster].Server != "https://hub.example.com:6443" || cfg.AuthInfos[ctx.AuthInfo].Token == "" {
		t.Fatalf("server %q, token set %v", cfg.Clusters[ctx.Cluster].Server, cfg.AuthInfos[ctx.AuthInfo].Token != "")
	}
	// A bootstrap token lives 24 hours by default (the agent renews its own), --duration sets it.
	for flags, want := range map[string]time.Duration{"": 24 * time.Hour, "--duration=2h": 2 * time.Hour} {
		args := []string{"agent-kubeconfig", "us-east-1"}
		if flags != "" {
			args = append(args, flags)
		}
		cfg, err := clientcmd.Load([]byte(mustRun(t, f.hub.Kubeconfig, args...)))
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenLifetime(t, cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token); got != want {
			t.Errorf("agent-kubeconfig %s: token lifetime %s, want %s", flags, got, want)
		}
	}
}

// tokenLifetime reads a ServiceAccount token's issued-at and expiry claims (unverified: the test
// only reads what the API server wrote).
func tokenLifetime(t *testing.T, token string) time.Duration {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the token is not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct{ Iat, Exp int64 }
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return time.Duration(claims.Exp-claims.Iat) * time.Second
}

// TestRolloutApprove: `rollout approve` refuses a step that does not require approval or does not
// await it, and otherwise writes an approval of exactly the plans the status lists, in the name
// the API server knows the caller by; `rollout status` shows what the step waits for.
func TestRolloutApprove(t *testing.T) {
	f := setup(t)
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gate"}, Spec: magosv1.RolloutSpec{ProjectRef: "gate",
		Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
			{Name: "dev", Selector: magosv1.MatchLabels(map[string]string{"env": "dev"})},
			{Name: "prod", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"}), RequireApproval: true},
		}}}}
	f.create(t, ro)
	setStatus := func(phase string, plans ...magosv1.PlanStatus) {
		t.Helper()
		ro.Status = magosv1.RolloutStatus{ObservedGeneration: ro.Generation, Phase: magosv1.PhaseReconciling, CurrentStep: 1, CurrentStepName: "prod",
			Steps: []magosv1.StepStatus{{Name: "dev", Phase: magosv1.StepCompleted}, {Name: "prod", Phase: phase, Plans: plans}}}
		if err := f.hub.Client.Status().Update(f.ctx, ro); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(magosv1.StepProgressing)
	for _, tc := range []struct{ step, want string }{
		{"dev", "step dev does not require approval"},
		{"nope", `no step "nope" (steps: dev, prod)`},
		{"prod", "step prod is not awaiting approval (it is Progressing)"},
	} {
		if _, err := run(t, f.hub.Kubeconfig, "rollout", "approve", "gate", "--step", tc.step, "-n", "default"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("approve --step %s: %v, want an error saying %q", tc.step, err, tc.want)
		}
	}
	plans := []magosv1.PlanStatus{
		{Workspace: "eu-west-1/default/app", Run: "r1", Revision: "0123456789abcdef0123456789abcdef01234567", Digest: "a1b2c3d4e5f6", Add: 1},
		{Workspace: "us-east-1/default/app", Run: "r2", Revision: "0123456789abcdef0123456789abcdef01234567", Digest: "0f0f0f0f0f0f", Destroy: 2},
	}
	setStatus(magosv1.StepAwaitingApproval, plans...)
	status := mustRun(t, f.hub.Kubeconfig, "rollout", "status", "gate", "-n", "default")
	for _, want := range []string{"step prod awaits approval of 2 plan(s) (magosctl rollout approve gate --step prod)",
		"eu-west-1/default/app  plan a1b2c3d4e5f6 of commit 0123456789ab: 1 to add, 0 to change, 0 to destroy", "AwaitingApproval (2 plan(s))"} {
		if !strings.Contains(status, want) {
			t.Errorf("rollout status lacks %q:\n%s", want, status)
		}
	}
	// Rejecting first: a reason is required; the rejection names the plans, the reason and who.
	if _, err := run(t, f.hub.Kubeconfig, "rollout", "reject", "gate", "--step", "prod", "-n", "default"); err == nil || !strings.Contains(err.Error(), `"reason" not set`) {
		t.Errorf("reject without --reason: %v", err)
	}
	out := mustRun(t, f.hub.Kubeconfig, "rollout", "reject", "gate", "--step", "prod", "--reason", "destroys the queue", "-n", "default")
	if !strings.Contains(out, "step prod rejected by magos-test-admin (2 plan(s)): destroys the queue") {
		t.Errorf("reject output: %s", out)
	}
	if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
		t.Fatal(err)
	}
	if x := ro.Spec.Rejections; len(x) != 1 || x[0].RejectedBy != "magos-test-admin" || x[0].Reason != "destroys the queue" || len(x[0].Plans) != 2 || x[0].Plans[1].Digest != plans[1].Digest {
		t.Errorf("rejections %+v, want prod's two plans rejected by magos-test-admin", x)
	}
	setStatus(magosv1.StepAwaitingApproval, plans...) // the hub decided the new spec
	out = mustRun(t, f.hub.Kubeconfig, "rollout", "approve", "gate", "--step", "prod", "-n", "default")
	if !strings.Contains(out, "step prod approved by magos-test-admin (2 plan(s))") {
		t.Errorf("approve output: %s", out)
	}
	var got magosv1.Rollout
	if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(ro), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Approvals) != 1 || len(got.Spec.Rejections) != 0 {
		t.Fatalf("approvals %+v, rejections %+v: want one approval, the rejection gone", got.Spec.Approvals, got.Spec.Rejections)
	}
	a := got.Spec.Approvals[0]
	if a.Step != "prod" || a.ApprovedBy != "magos-test-admin" || a.ApprovedAt.IsZero() || len(a.Plans) != 2 ||
		a.Plans[0] != (magosv1.ApprovedPlan{Workspace: plans[0].Workspace, Revision: plans[0].Revision, Digest: plans[0].Digest}) ||
		a.Plans[1].Digest != plans[1].Digest {
		t.Errorf("approval %+v, want prod's two plans approved by magos-test-admin", a)
	}
	// The status now describes an older generation: approving again waits for the hub.
	if _, err := run(t, f.hub.Kubeconfig, "rollout", "approve", "gate", "--step", "prod", "-n", "default"); err == nil || !strings.Contains(err.Error(), "has not decided the Rollout's latest spec yet") {
		t.Errorf("approve on a stale status: %v", err)
	}
}

// TestRetryAndApproveFromTheHub: with --cluster, retry and approve write a request naming the
// mirror's current run, in the caller's own name, and refuse a run that cannot take it.
func TestRetryAndApproveFromTheHub(t *testing.T) {
	f := setup(t)
	setRun := func(cluster string, phase magosv1.Phase, run string) {
		t.Helper()
		var m magosv1.Workspace
		key := client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name("default", "edge")}
		if err := f.hub.Client.Get(f.ctx, key, &m); err != nil {
			t.Fatal(err)
		}
		m.Status.Phase, m.Status.CurrentRunID = phase, run
		if err := f.hub.Client.Status().Update(f.ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	annotations := func(cluster string) map[string]string {
		t.Helper()
		var m magosv1.Workspace
		if err := f.hub.Client.Get(f.ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name("default", "edge")}, &m); err != nil {
			t.Fatal(err)
		}
		return m.Annotations
	}
	setRun("us-east-1", magosv1.PhaseFailed, "20261203T120000-aaaaaaaa")
	setRun("eu-west-1", magosv1.PhasePlanning, "20261203T120000-bbbbbbbb")

	out := mustRun(t, f.hub.Kubeconfig, "retry", "edge", "--cluster", "us-east-1", "-n", "default")
	if !strings.Contains(out, "retry of run 20261203T120000-aaaaaaaa requested by magos-test-admin") {
		t.Errorf("retry output: %s", out)
	}
	if a := annotations("us-east-1"); a[keys.RetryRun] != "20261203T120000-aaaaaaaa" || a[keys.RequestedBy] != "magos-test-admin" {
		t.Errorf("mirror annotations %v, want the retry of the failed run by magos-test-admin", a)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"retry", "edge", "--cluster", "eu-west-1"}, "is Planning (run 20261203T120000-bbbbbbbb): only a run that ended can be retried"},
		{[]string{"approve", "edge", "--cluster", "eu-west-1"}, "only a Planned run can be approved"},
		{[]string{"retry", "nope", "--cluster", "us-east-1"}, "the hub has no mirror of it"},
		{[]string{"retry", "edge"}, "from the hub, name its cluster: --cluster"},
	} {
		if _, err := run(t, f.hub.Kubeconfig, append(tc.args, "-n", "default")...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("magosctl %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	if a := annotations("eu-west-1"); a[keys.RetryRun] != "" || a[keys.ApproveRun] != "" {
		t.Errorf("refused requests left annotations %v", a)
	}
	setRun("eu-west-1", magosv1.PhasePlanned, "20261203T120000-bbbbbbbb")
	mustRun(t, f.hub.Kubeconfig, "approve", "edge", "--cluster", "eu-west-1", "-n", "default")
	if a := annotations("eu-west-1"); a[keys.ApproveRun] != "20261203T120000-bbbbbbbb" || a[keys.RequestedBy] != "magos-test-admin" {
		t.Errorf("mirror annotations %v, want the approval of the planned run by magos-test-admin", a)
	}
}

// TestRolloutAcceptDrift: accept-drift writes, in the caller's own name, an acceptance naming
// the Workspace and the digest of its current drift as the hub's mirror shows it, for one
// Workspace or every Workspace a step lists as drifted; it refuses a Workspace that has not
// drifted at the commit it applied, one the hub does not mirror, and one of another Project.
// rollout status shows each Workspace's drift and each step's drifted Workspaces.
// TestRolloutStatusShowsThePreview: with planFirst, `rollout status` sums each step's preview by
// cluster, saying how many of the plans' changes revert drift (driftReverted, kept by the API
// server), and names a plan that changed since the preview, with its own drift reverts.
func TestRolloutStatusShowsThePreview(t *testing.T) {
	f := setup(t)
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "first"}, Spec: magosv1.RolloutSpec{ProjectRef: "first",
		PlanFirst: true, Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
			{Name: "prod", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"})},
		}}}}
	f.create(t, ro)
	const rev = "0123456789abcdef0123456789abcdef01234567"
	planned := func(ws string, s magosv1.PlanSummary) magosv1.PreviewPlan {
		return magosv1.PreviewPlan{Workspace: ws, Revision: rev, Result: magosv1.PreviewPlanned, PlanSummary: s}
	}
	changed := planned("eu-west-1/default/b", magosv1.PlanSummary{Digest: "p2", Add: 1, Change: 2, DriftReverted: 2})
	changed.Previewed = &magosv1.PlanSummary{Digest: "p1", Add: 1, Change: 1, DriftReverted: 1}
	ro.Status = magosv1.RolloutStatus{ObservedGeneration: ro.Generation, Phase: magosv1.PhaseReconciling, CurrentStepName: "prod",
		Steps: []magosv1.StepStatus{{Name: "prod", Phase: magosv1.StepPreviewing, Preview: []magosv1.PreviewPlan{
			planned("eu-west-1/default/a", magosv1.PlanSummary{Digest: "pa", Add: 3, Change: 1, Destroy: 1, DriftReverted: 2}),
			changed,
			planned("us-east-1/default/c", magosv1.PlanSummary{Digest: "pc", Add: 1}),
		}}}}
	if err := f.hub.Client.Status().Update(f.ctx, ro); err != nil {
		t.Fatal(err)
	}
	status := mustRun(t, f.hub.Kubeconfig, "rollout", "status", "first", "-n", "default")
	for _, want := range []string{
		"step prod, cluster eu-west-1: 2/2 planned: 4 to add, 3 to change, 1 to destroy, 4 revert drift\n",
		"step prod, cluster us-east-1: 1/1 planned: 1 to add, 0 to change, 0 to destroy\n",
		"the plan of eu-west-1/default/b changed since the preview: previewed plan p1 (+1 ~1 -0, 1 revert drift), now plan p2 (+1 ~2 -0, 2 revert drift)",
	} {
		if !strings.Contains(status, want) {
			t.Errorf("rollout status lacks %q:\n%s", want, status)
		}
	}
}

func TestRolloutAcceptDrift(t *testing.T) {
	f := setup(t)
	const applied, older = "0123456789abcdef0123456789abcdef01234567", "fedcba9876543210fedcba9876543210fedcba98"
	driftMirror := func(cluster, name, project string, drift *magosv1.DriftStatus) {
		t.Helper()
		f.mirrorOf(t, cluster, name, project, map[string]string{"env": "prod"},
			magosv1.WorkspaceStatus{Phase: magosv1.PhaseApplied, ObservedRevision: applied, Drift: drift})
	}
	drifted := func(rev, digest string) *magosv1.DriftStatus {
		return &magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: rev, PlanDigest: digest}
	}
	driftMirror("us-east-1", "guard-a", "guard", drifted(applied, "d1g3st"))
	driftMirror("eu-west-1", "guard-b", "guard", &magosv1.DriftStatus{Result: magosv1.DriftResultNone, Revision: applied, PlanDigest: "n0"})
	driftMirror("eu-west-1", "guard-c", "guard", drifted(older, "0ld"))
	driftMirror("eu-west-1", "guard-d", "guard", nil)
	driftMirror("eu-west-1", "alien", "another-project", drifted(applied, "al1en"))

	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "guard"}, Spec: magosv1.RolloutSpec{ProjectRef: "guard",
		Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
			{Name: "prod", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"}), Drift: magosv1.DriftBlock},
		}}}}
	f.create(t, ro)
	ro.Status = magosv1.RolloutStatus{ObservedGeneration: ro.Generation, Phase: magosv1.PhaseReconciling, Reason: magosv1.ReasonDriftDetected,
		CurrentStepName: "prod", Steps: []magosv1.StepStatus{{Name: "prod", Phase: magosv1.StepDriftBlocked, Drifted: []string{"us-east-1/default/guard-a"}}}}
	if err := f.hub.Client.Status().Update(f.ctx, ro); err != nil {
		t.Fatal(err)
	}

	status := mustRun(t, f.hub.Kubeconfig, "rollout", "status", "guard", "-n", "default")
	for _, want := range []string{
		"step prod: 1 Workspace(s) drifted from the commit they applied: us-east-1/default/guard-a (blocked: magosctl rollout accept-drift guard --step prod)",
		"DriftBlocked (1 drifted)", "DRIFT", "Drifted", "NoDrift",
	} {
		if !strings.Contains(status, want) {
			t.Errorf("rollout status lacks %q:\n%s", want, status)
		}
	}
	for _, line := range strings.Split(status, "\n") {
		if strings.Contains(line, "default/guard-d") && !strings.HasSuffix(strings.TrimSpace(line), "-") {
			t.Errorf("a Workspace never checked shows drift: %q", line)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workspace", "us-east-1/default/nope"}, "workspace default/nope of cluster us-east-1: the hub has no mirror of it"},
		{[]string{"--workspace", "eu-west-1/default/guard-b"}, "workspace eu-west-1/default/guard-b is not drifted at the commit it applied (0123456789ab): its last drift check says NoDrift of commit 0123456789ab"},
		{[]string{"--workspace", "eu-west-1/default/guard-c"}, "workspace eu-west-1/default/guard-c is not drifted at the commit it applied (0123456789ab): its last drift check says Drifted of commit fedcba987654"},
		{[]string{"--workspace", "eu-west-1/default/guard-d"}, "workspace eu-west-1/default/guard-d is not drifted: no drift check has run"},
		{[]string{"--workspace", "eu-west-1/default/alien"}, `workspace eu-west-1/default/alien belongs to Project "another-project", not to the Rollout's "guard"`},
		{[]string{"--workspace", "eu-west-1/web/x"}, "workspace eu-west-1/web/x is not of the Rollout: its Workspaces live in namespace default"},
		{[]string{"--workspace", "guard-a"}, `workspace "guard-a": want CLUSTER/NAMESPACE/NAME`},
		{[]string{"--step", "nope"}, `no step "nope" (steps: prod)`},
		{nil, "at least one of the flags in the group [workspace step] is required"},
	} {
		args := append([]string{"rollout", "accept-drift", "guard", "-n", "default"}, tc.args...)
		if _, err := run(t, f.hub.Kubeconfig, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("accept-drift %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}

	out := mustRun(t, f.hub.Kubeconfig, "rollout", "accept-drift", "guard", "--step", "prod", "-n", "default")
	if !strings.Contains(out, "drift of 1 Workspace(s) accepted by magos-test-admin") || !strings.Contains(out, "us-east-1/default/guard-a  drift d1g3st") {
		t.Errorf("accept-drift output: %s", out)
	}
	var got magosv1.Rollout
	if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(ro), &got); err != nil {
		t.Fatal(err)
	}
	if as := got.Spec.DriftAcceptances; len(as) != 1 || as[0].Workspace != "us-east-1/default/guard-a" || as[0].Digest != "d1g3st" ||
		as[0].AcceptedBy != "magos-test-admin" || as[0].AcceptedAt.IsZero() {
		t.Errorf("drift acceptances %+v, want guard-a's drift d1g3st accepted by magos-test-admin", as)
	}
	// The status now describes an older generation: --step waits for the hub; --workspace reads
	// the mirror, and replaces the Workspace's acceptance.
	if _, err := run(t, f.hub.Kubeconfig, "rollout", "accept-drift", "guard", "--step", "prod", "-n", "default"); err == nil || !strings.Contains(err.Error(), "has not decided the Rollout's latest spec yet") {
		t.Errorf("accept-drift --step on a stale status: %v", err)
	}
	mustRun(t, f.hub.Kubeconfig, "rollout", "accept-drift", "guard", "--workspace", "us-east-1/default/guard-a", "-n", "default")
	if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(ro), &got); err != nil {
		t.Fatal(err)
	}
	if as := got.Spec.DriftAcceptances; len(as) != 1 || as[0].Digest != "d1g3st" {
		t.Errorf("drift acceptances %+v, want guard-a's one", as)
	}
}

// TestRolloutRollback: magosctl rollout rollback writes spec.rollback in the caller's name,
// with, by default, the newest commit every Workspace of the source applied before the one
// rolled out (from the hub's mirrors); --to picks another by its prefix; the command refuses a
// commit nobody applied, a Rollout that rolls back already, and --cancel with --to; --cancel
// removes it; rollout status says it rolls back.
func TestRolloutRollback(t *testing.T) {
	f := setup(t)
	const v1, v2, v3 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222", "3333333333333333333333333333333333333333"
	for _, m := range []struct {
		cluster, name string
		applied       []string
	}{{"us-east-1", "back-a", []string{v1, v2, v3}}, {"eu-west-1", "back-b", []string{v1, v3}}} {
		f.mirrorOf(t, m.cluster, m.name, "back", map[string]string{"env": "prod"}, magosv1.WorkspaceStatus{
			Phase: magosv1.PhaseApplied, ObservedRevision: v3,
			AppliedRevisions: &magosv1.AppliedRevisions{Source: gitrepo.SourceKey("file:///repo", "main"), Commits: m.applied}})
	}
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "back"}, Spec: magosv1.RolloutSpec{ProjectRef: "back",
		Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{{Name: "prod", Selector: magosv1.MatchLabels(map[string]string{"env": "prod"})}}}}}
	f.create(t, ro)
	ro.Status = magosv1.RolloutStatus{ObservedGeneration: ro.Generation, Phase: magosv1.PhaseApplied, Reason: magosv1.ReasonRolloutCompleted,
		Revisions: []magosv1.RolloutRevision{{RepoURL: "file:///repo", TargetRevision: "main", Commit: v3, Since: metav1.Now()}}}
	if err := f.hub.Client.Status().Update(f.ctx, ro); err != nil {
		t.Fatal(err)
	}
	rollback := func() *magosv1.RolloutRollback {
		t.Helper()
		var r magosv1.Rollout
		if err := f.hub.Client.Get(f.ctx, client.ObjectKeyFromObject(ro), &r); err != nil {
			t.Fatal(err)
		}
		return r.Spec.Rollback
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "abcdef0"}, `no Workspace of project default/back applied a commit "abcdef0"`},
		{[]string{"--cancel", "--to", v1}, "--cancel takes neither --to nor --reason"},
		{[]string{"--cancel"}, "rollout default/back does not roll back"},
	} {
		args := append([]string{"rollout", "rollback", "back", "-n", "default"}, tc.args...)
		if _, err := run(t, f.hub.Kubeconfig, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rollback %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	out := mustRun(t, f.hub.Kubeconfig, "rollout", "rollback", "back", "-n", "default", "--reason", "bad release")
	rb := rollback()
	if rb == nil || len(rb.Commits) != 1 || rb.Commits[0].Commit != v1 || rb.Commits[0].RepoURL != "file:///repo" || rb.Commits[0].TargetRevision != "main" ||
		rb.RequestedBy == "" || rb.Reason != "bad release" {
		t.Fatalf("spec.rollback %+v, want %s (the newest commit both applied before %s) in the caller's name", rb, v1, v3)
	}
	if !strings.Contains(out, "to commit "+v1) || !strings.Contains(out, rb.RequestedBy) {
		t.Errorf("rollback printed %q", out)
	}
	if status := mustRun(t, f.hub.Kubeconfig, "rollout", "status", "back", "-n", "default"); !strings.Contains(status, "rolling back to commit 111111111111") {
		t.Errorf("rollout status does not say it rolls back:\n%s", status)
	}
	if _, err := run(t, f.hub.Kubeconfig, "rollout", "rollback", "back", "-n", "default"); err == nil || !strings.Contains(err.Error(), "already rolls back") {
		t.Errorf("a second rollback: %v, want a refusal", err)
	}
	mustRun(t, f.hub.Kubeconfig, "rollout", "rollback", "back", "-n", "default", "--cancel")
	if rb := rollback(); rb != nil {
		t.Fatalf("spec.rollback %+v after --cancel", rb)
	}
	mustRun(t, f.hub.Kubeconfig, "rollout", "rollback", "back", "-n", "default", "--to", v2[:10])
	if rb := rollback(); rb == nil || rb.Commits[0].Commit != v2 {
		t.Fatalf("spec.rollback %+v, want %s (--to %s, applied by one Workspace)", rb, v2, v2[:10])
	}
}
