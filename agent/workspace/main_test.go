package workspace_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/magosfleet/magos/agent/app"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// The shared test world: one spoke API server, one agent running local runs with the
// magos-agent binary built from this checkout, and a real tofu.
var (
	spoke    *localcluster.Cluster
	agentBin string
	tofuPath string
	testDir  string
	logPath  string
	apiCalls atomic.Int64 // requests the shared agent sent to the API server
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var err error
	testDir, err = os.MkdirTemp("", "magos-agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(testDir)
	logPath = filepath.Join(testDir, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	logger := ctrlzap.New(ctrlzap.UseDevMode(true), ctrlzap.WriteTo(logFile))

	agentBin = filepath.Join(testDir, "magos-agent")
	root, err := localcluster.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	build := exec.Command("go", "build", "-o", agentBin, "./agent/cmd/magos-agent")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building magos-agent:", err)
		return 1
	}
	if tofuPath, err = localcluster.Tofu(); err != nil {
		fmt.Fprintln(os.Stderr, "test assets:", err)
		return 1
	}
	return testenv.RunMain(m, testenv.MainOptions{
		Fleet:  localcluster.Options{NoHub: true, Spokes: []string{"spoke"}},
		Logger: &logger,
		Setup:  startSharedAgent,
	})
}

// startSharedAgent starts the agent the tests share on the spoke. After the tests, it prints the
// end of the agent's log when one failed, and keeps it in $MAGOS_AGENT_TEST_LOG when set.
func startSharedAgent(e *testenv.MainEnv) error {
	spoke = e.Fleet.Spokes["spoke"]
	// The agent's own namespace, where it keeps the key of planned inputs.
	if err := createWithRetry(context.Background(), spoke.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}); err != nil {
		return fmt.Errorf("creating the agent's namespace: %w", err)
	}
	cfg := rest.CopyConfig(spoke.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt} })
	mgr, err := newAgent(cfg, filepath.Join(testDir, "data"), nil)
	if err != nil {
		return fmt.Errorf("building the agent: %w", err)
	}
	// Registered first, run last: once the agent has stopped.
	e.Cleanup(func(code int) {
		if code != 0 {
			dumpLog()
		}
		if keep := os.Getenv("MAGOS_AGENT_TEST_LOG"); keep != "" {
			if b, err := os.ReadFile(logPath); err == nil {
				_ = os.WriteFile(keep, b, 0o600)
			}
		}
	})
	e.Background("agent", mgr.Start)
	return nil
}

// dumpLog prints the end of the agent's log, for failures.
func dumpLog() {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return
	}
	if len(b) > 60000 {
		b = b[len(b)-60000:]
	}
	fmt.Fprintf(os.Stderr, "---- agent log (end) ----\n%s\n", b)
}

type countingTransport struct{ next http.RoundTripper }

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	apiCalls.Add(1)
	return c.next.RoundTrip(r)
}

// agentNamespace is the shared agent's own namespace.
const agentNamespace = "magos-system"

// newAgent builds an agent running local runs for the cluster cfg reaches.
func newAgent(cfg *rest.Config, dataDir string, mutate func(*app.Options)) (manager.Manager, error) {
	opts := app.Options{
		Config: cfg,
		Runner: app.RunnerOptions{
			Mode:       app.RunnerLocal,
			Command:    []string{agentBin, "runner"},
			DataDir:    dataDir,
			Kubeconfig: spoke.Kubeconfig,
			BinaryPath: tofuPath,
		},
		MinGitPollInterval: time.Second,
		SkipNameValidation: true,
		Logger:             ctrl.Log.WithName("agent"),
		InputsKeySecret:    types.NamespacedName{Namespace: agentNamespace, Name: "magos-agent-inputs-key"},
	}
	if mutate != nil {
		mutate(&opts)
	}
	return app.NewManager(opts)
}

// tofuVersion is the OpenTofu version the tests' Workspaces ask for: the one
// tools/provision-assets.sh builds (TOFU_VERSION).
const tofuVersion = "1.10.6"

// Test modules (no providers: they run offline).
const (
	moduleOK = `variable "greeting" {
  type    = string
  default = "hello"
}
resource "terraform_data" "this" {
  input = var.greeting
}
output "greeting" {
  value = terraform_data.this.output
}
`
	// modulePlanFails does not even plan.
	modulePlanFails = `output "broken" {
  value = var.missing
}
`
	// moduleApplyFails plans (the postcondition's value is unknown until apply) and then fails.
	moduleApplyFails = `resource "terraform_data" "this" {
  input = "a"
  lifecycle {
    postcondition {
      condition     = self.output == "b"
      error_message = "the output must be b for this test"
    }
  }
}
`
	// moduleEmpty changes nothing (the benchmark's trivial run).
	moduleEmpty = `output "answer" {
  value = 42
}
`
)

// newNamespace creates a namespace for one test.
func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ws-"}}
	ctx := context.Background()
	if err := createWithRetry(ctx, spoke.Client, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// createWithRetry creates obj, riding out the throttling of a fresh API server.
func createWithRetry(ctx context.Context, c client.Client, obj client.Object) error {
	return localcluster.Poll(30*time.Second, func() error { return c.Create(ctx, obj) })
}

// newRepo creates a git repository with one commit of files, returning it and the commit.
func newRepo(t testing.TB, files map[string]string) (*gitrepotest.Repo, string) {
	t.Helper()
	repo := gitrepotest.New(t)
	return repo, repo.Commit(t, "initial", files)
}

// newWorkspace creates a Workspace running repo's main branch.
func newWorkspace(t testing.TB, c client.Client, ns, name, repoURL string, mutate func(*magosv1.Workspace)) types.NamespacedName {
	t.Helper()
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: "demo"},
			Source:     magosv1.Source{RepoURL: repoURL, TargetRevision: "main", Path: "."},
			Terraform:  magosv1.TerraformSpec{Binary: magosv1.BinaryOpenTofu, Version: tofuVersion},
		},
	}
	if mutate != nil {
		mutate(ws)
	}
	if err := createWithRetry(context.Background(), c, ws); err != nil {
		t.Fatalf("creating Workspace %s/%s: %v", ns, name, err)
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}

func getWorkspace(c client.Client, key types.NamespacedName) (*magosv1.Workspace, error) {
	ws := &magosv1.Workspace{}
	return ws, c.Get(context.Background(), key, ws)
}

// waitFor waits until check passes on the Workspace and returns it.
func waitFor(t testing.TB, c client.Client, key types.NamespacedName, timeout time.Duration, check func(*magosv1.Workspace) error) *magosv1.Workspace {
	t.Helper()
	var last *magosv1.Workspace
	testenv.Eventually(t, timeout, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		last = ws
		if err := check(ws); err != nil {
			return fmt.Errorf("%w (phase %s/%s: %s)", err, ws.Status.Phase, ws.Status.Reason, ws.Status.Message)
		}
		return nil
	})
	return last
}

// inPhase checks phase and reason ("" reason: any).
func inPhase(phase magosv1.Phase, reason string) func(*magosv1.Workspace) error {
	return func(ws *magosv1.Workspace) error {
		if ws.Status.Phase != phase || (reason != "" && ws.Status.Reason != reason) {
			return fmt.Errorf("want %s/%s", phase, reason)
		}
		return nil
	}
}

// pendingRun waits for a Pending Workspace with a run ID other than notRun and returns it.
func pendingRun(t testing.TB, c client.Client, key types.NamespacedName, reason, notRun string) *magosv1.Workspace {
	t.Helper()
	return waitFor(t, c, key, 60*time.Second, func(ws *magosv1.Workspace) error {
		if err := inPhase(magosv1.PhasePending, reason)(ws); err != nil {
			return err
		}
		if ws.Status.CurrentRunID == "" || ws.Status.CurrentRunID == notRun {
			return fmt.Errorf("no new run ID yet")
		}
		return nil
	})
}

// grant writes a hub decision for runID, as the hub (or the agent's hub sync) does.
func grant(t testing.TB, c client.Client, key types.NamespacedName, runID string) {
	t.Helper()
	annotate(t, c, key, map[string]any{keys.ExecutionAllowed: "true", keys.GrantedRun: runID, keys.GrantedBy: keys.GrantedByRollout})
}

// annotate merge-patches annotations (a nil value removes the key).
func annotate(t testing.TB, c client.Client, key types.NamespacedName, values map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": values}})
	if err != nil {
		t.Fatal(err)
	}
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	testenv.Eventually(t, 30*time.Second, func() error {
		return c.Patch(context.Background(), ws, client.RawPatch(types.MergePatchType, patch))
	})
}

// runToApplied grants the Workspace's pending run and waits until it is Applied.
func runToApplied(t testing.TB, c client.Client, key types.NamespacedName, reason, notRun string) *magosv1.Workspace {
	t.Helper()
	ws := pendingRun(t, c, key, reason, notRun)
	grant(t, c, key, ws.Status.CurrentRunID)
	runID := ws.Status.CurrentRunID
	var last *magosv1.Workspace
	var failed bool
	err := localcluster.Poll(180*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		last = ws
		if ws.Status.Phase == magosv1.PhaseFailed || ws.Status.Phase == magosv1.PhaseValidationFailed || ws.Status.CurrentRunID != runID {
			failed = true
			return nil // stop waiting: it will not become Applied
		}
		return inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded)(ws)
	})
	if err != nil || failed {
		t.Fatalf("run %s did not apply: %v; status %s/%s run %s: %s", runID, err,
			last.Status.Phase, last.Status.Reason, last.Status.CurrentRunID, last.Status.Message)
	}
	return last
}

// stateSecret reads the Workspace's state, kept by the kubernetes backend in the Secret
// tfstate-default-<name> (gzipped JSON): the Secret, and the state's JSON.
func stateSecret(c client.Client, key types.NamespacedName) (*corev1.Secret, []byte, error) {
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: key.Namespace, Name: "tfstate-default-" + key.Name}, s); err != nil {
		return nil, nil, fmt.Errorf("reading the state Secret: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(s.Data["tfstate"]))
	if err != nil {
		return nil, nil, fmt.Errorf("state is not gzipped: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the state: %w", err)
	}
	return s, raw, nil
}

// stateOutputs reads the outputs of the Workspace's state (stateSecret).
func stateOutputs(t testing.TB, c client.Client, key types.NamespacedName) map[string]any {
	t.Helper()
	_, raw, err := stateSecret(c, key)
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Outputs map[string]struct {
			Value any `json:"value"`
		} `json:"outputs"`
		Resources []any `json:"resources"`
	}
	if err := json.Unmarshal(raw, &state); err != nil {
		t.Fatalf("decoding state: %v", err)
	}
	out := map[string]any{"#resources": len(state.Resources)}
	for k, v := range state.Outputs {
		out[k] = v.Value
	}
	return out
}

// condition returns the Workspace's condition of type, or nil.
func condition(ws *magosv1.Workspace, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(ws.Status.Conditions, typ)
}

// events returns the notes of the events about the Workspace with reason.
func events(t testing.TB, c client.Client, key types.NamespacedName, reason string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := c.List(context.Background(), list, client.InNamespace(key.Namespace)); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == key.Name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// waitEvent waits for an event about the Workspace with reason (events are written
// asynchronously) and returns its notes.
func waitEvent(t testing.TB, c client.Client, key types.NamespacedName, reason string) []string {
	t.Helper()
	var notes []string
	testenv.Eventually(t, 30*time.Second, func() error {
		if notes = events(t, c, key, reason); len(notes) == 0 {
			return fmt.Errorf("no %s event", reason)
		}
		return nil
	})
	return notes
}

func uniqueName(prefix string) string { return prefix + "-" + rand.String(5) }

func contains(s, sub string) error {
	if !strings.Contains(s, sub) {
		return fmt.Errorf("%q does not contain %q", s, sub)
	}
	return nil
}
