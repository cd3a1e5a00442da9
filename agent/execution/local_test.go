package execution

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// noReader is for runs whose environment has no Secret or ConfigMap references.
type noReader struct{ client.Reader }

func (noReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("no API server in this test")
}

func newTestLauncher(t *testing.T, dir, script string, mutate func(*LocalOptions)) *LocalLauncher {
	t.Helper()
	opts := LocalOptions{
		Command:    []string{"/bin/sh", "-c", script},
		DataDir:    dir,
		Kubeconfig: "/etc/spoke.kubeconfig",
		BinaryPath: "/opt/tofu",
		Reader:     noReader{},
		StopGrace:  2 * time.Second,
		Logger:     logr.Discard(),
	}
	if mutate != nil {
		mutate(&opts)
	}
	l, err := NewLocalLauncher(opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testRun(runID string, env ...corev1.EnvVar) *Run {
	return &Run{
		Workspace: &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "network"}},
		Spec:      runner.Spec{Operation: runner.OperationPlan, RunID: runID, Namespace: "team", Name: "network", Revision: "abc"},
		Env:       env,
	}
}

// waitEvent waits for the launcher's notification that a run ended (what wakes the
// controller) and checks it names the Workspace.
func waitEvent(t *testing.T, l *LocalLauncher) {
	t.Helper()
	select {
	case e := <-l.events:
		if e.Object.GetNamespace() != "team" || e.Object.GetName() != "network" {
			t.Errorf("event for %s/%s, want team/network", e.Object.GetNamespace(), e.Object.GetName())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event when the run ended")
	}
}

const writeResult = `printf '{"operation":"plan","runID":"r1","outcome":"Succeeded","add":2}' > "$MAGOS_RESULT_FILE"`

// TestLocalResultSurvivesRestart: a finished run's result is read back by a new launcher on
// the same data folder (an agent restart), and is not run again.
func TestLocalResultSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	script := `echo run >> "` + filepath.Join(dir, "count") + `"; ` + writeResult
	l := newTestLauncher(t, dir, script, nil)
	run := testRun("r1")
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l)
	st, err := l.Status(context.Background(), RefOf(run))
	if err != nil || st.State != StateFinished || st.Result.Outcome != runner.OutcomeSucceeded || st.Result.Add != 2 {
		t.Fatalf("status %+v %v, want a finished success with 2 to add", st, err)
	}

	restarted := newTestLauncher(t, dir, script, nil)
	st, err = restarted.Status(context.Background(), RefOf(run))
	if err != nil || st.State != StateFinished || st.Result.Add != 2 {
		t.Fatalf("after restart: status %+v %v, want the finished result", st, err)
	}
	if err := restarted.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "count")); strings.Count(string(b), "run") != 1 {
		t.Errorf("the run ran %d times, want once", strings.Count(string(b), "run"))
	}
	if st, _ := restarted.Status(context.Background(), Ref{Namespace: "team", Name: "network", RunID: "other", Operation: runner.OperationPlan}); st.State != StateNotFound {
		t.Errorf("unknown run: %v, want NotFound", st.State)
	}
}

// TestLocalRunOutlivingItsAgentIsNotStartedTwice: an agent killed while a run runs (kill -9 of
// the agent's process group, as devfleet and a crash do) leaves the run's process running to its
// end, as a Job outlives its agent: it is neither signalled (an interrupted apply would report a
// failure nobody caused) nor lost. The next agent, on the same data folder, reports the run
// running rather than lost, starts nothing, and is woken when the process ends with its result.
// (Both found by TestChaos: the restarted agent planned the run a second time beside the first,
// which held the state lock; and the kernel's parent-death signal interrupted the apply, which
// then reported ApplyFailed.) The first agent is this test binary run again as a child process.
func TestLocalRunOutlivingItsAgentIsNotStartedTwice(t *testing.T) {
	if dir := os.Getenv(envKilledAgentDir); dir != "" {
		runAgentUntilKilled(t, dir)
		return
	}
	dir := killAgentMidRun(t, "TestLocalRunOutlivingItsAgentIsNotStartedTwice", envKilledAgentDir, "the run")

	script := killedAgentScript(dir)
	restarted := newTestLauncher(t, dir, script, nil)
	run := testRun("r1")
	st, err := restarted.Status(context.Background(), RefOf(run))
	if err != nil || st.State != StateRunning {
		t.Fatalf("after the agent was killed: status %+v %v, want Running (the run's process still runs)", st, err)
	}
	if err := restarted.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "gate")); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, restarted)
	st, err = restarted.Status(context.Background(), RefOf(run))
	if err != nil || st.State != StateFinished || st.Result.Outcome != runner.OutcomeSucceeded {
		t.Fatalf("status %+v %v, want the success the first process wrote (not interrupted by its agent's death)", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "count")); strings.Count(string(b), "run") != 1 {
		t.Errorf("the run ran %d times, want once", strings.Count(string(b), "run"))
	}
}

// envKilledAgentDir makes this test binary the agent that TestLocalRunOutlivingItsAgentIsNotStartedTwice kills.
const envKilledAgentDir = "MAGOS_TEST_KILLED_AGENT_DIR"

// killedAgentScript runs until the gate file is removed; on SIGTERM it reports a failure, as the
// runner does when its tool is interrupted.
func killedAgentScript(dir string) string {
	gate := filepath.Join(dir, "gate")
	return `trap 'printf "{\"operation\":\"plan\",\"runID\":\"r1\",\"outcome\":\"Failed\",\"message\":\"interrupted\"}" > "$MAGOS_RESULT_FILE"; exit 1' TERM; ` +
		`echo run >> "` + filepath.Join(dir, "count") + `"; while [ -e "` + gate + `" ]; do sleep 0.1; done; ` + writeResult
}

// runAgentUntilKilled is the first agent: it starts the run and waits to be killed.
func runAgentUntilKilled(t *testing.T, dir string) {
	l := newTestLauncher(t, dir, killedAgentScript(dir), nil)
	if err := l.Start(context.Background(), testRun("r1")); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}

// TestLocalStartIsIdempotent: starting a running run again starts nothing.
func TestLocalStartIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	script := `echo run >> "` + filepath.Join(dir, "count") + `"; while [ ! -f "` + gate + `" ]; do sleep 0.05; done; ` + writeResult
	l := newTestLauncher(t, dir, script, nil)
	run := testRun("r1")
	for range 3 {
		if err := l.Start(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := l.Status(context.Background(), RefOf(run)); st.State != StateRunning {
		t.Fatalf("state %v, want Running", st.State)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l)
	if st, _ := l.Status(context.Background(), RefOf(run)); st.State != StateFinished {
		t.Fatalf("state %v, want Finished", st.State)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "count")); strings.Count(string(b), "run") != 1 {
		t.Errorf("the run ran %d times, want once", strings.Count(string(b), "run"))
	}
}

// TestLocalRunnerWithoutResult: a runner that dies without a result is a failed run whose
// message has the exit status and the end of its output.
func TestLocalRunnerWithoutResult(t *testing.T) {
	l := newTestLauncher(t, t.TempDir(), `echo "tofu: something exploded" >&2; exit 3`, nil)
	run := testRun("r1")
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l)
	st, _ := l.Status(context.Background(), RefOf(run))
	if st.State != StateFinished || st.Result.Outcome != runner.OutcomeFailed ||
		!strings.Contains(st.Result.Message, "exit status 3") || !strings.Contains(st.Result.Message, "something exploded") {
		t.Errorf("status %+v, want a failure with the exit status and output", st)
	}
}

// TestLocalStopLosesTheRun: a run stopped with the agent has no result, so the next agent
// finds it lost (NotFound) and starts it again.
func TestLocalStopLosesTheRun(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	script := `touch "` + started + `"; trap 'exit 1' TERM; while true; do sleep 0.05; done`
	l := newTestLauncher(t, dir, script, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- l.Run(ctx) }()
	run := testRun("r1")
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error { _, err := os.Stat(started); return err })
	cancel()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the launcher did not stop")
	}
	if err := l.Start(context.Background(), run); err == nil {
		t.Error("a stopped launcher started a run")
	}

	next := newTestLauncher(t, dir, writeResult, nil)
	if st, _ := next.Status(context.Background(), RefOf(run)); st.State != StateNotFound {
		t.Fatalf("state after the stop %v, want NotFound (lost)", st.State)
	}
	if err := next.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, next)
	if st, _ := next.Status(context.Background(), RefOf(run)); st.State != StateFinished || st.Result.Outcome != runner.OutcomeSucceeded {
		t.Errorf("relaunched run: %+v", st)
	}
}

// TestLocalTimeout: a run over its timeout is stopped and fails saying so.
func TestLocalTimeout(t *testing.T) {
	l := newTestLauncher(t, t.TempDir(), `while true; do sleep 0.05; done`, func(o *LocalOptions) { o.StopGrace = 200 * time.Millisecond })
	run := testRun("r1")
	run.Timeout = 300 * time.Millisecond
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l)
	st, _ := l.Status(context.Background(), RefOf(run))
	if st.State != StateFinished || st.Result.Outcome != runner.OutcomeFailed || !strings.Contains(st.Result.Message, "timeout") {
		t.Errorf("status %+v, want a timeout failure", st)
	}
}

// TestLocalEnvironment: the run gets its spec (plan file in the data folder, kubernetes
// backend through the agent's kubeconfig, the binary), its variables, none of the agent's own
// TF_VAR_ variables, and the agent's runner kubeconfig as KUBE_CONFIG_PATH and KUBECONFIG (for
// Kubernetes providers) in place of the agent's own KUBECONFIG.
func TestLocalEnvironment(t *testing.T) {
	t.Setenv("TF_VAR_leak", "agent-value")
	t.Setenv("KUBECONFIG", "/home/dev/.kube/another-cluster")
	dir := t.TempDir()
	script := `printf '%s' "$MAGOS_RUN_SPEC" > "` + filepath.Join(dir, "spec.json") + `"; ` +
		`printf '{"operation":"plan","runID":"r1","outcome":"Succeeded","message":"%s|%s|%s|%s"}' "$TF_VAR_greeting" "${TF_VAR_leak:-none}" ` +
		`"$KUBE_CONFIG_PATH" "$KUBECONFIG" > "$MAGOS_RESULT_FILE"`
	l := newTestLauncher(t, dir, script, nil)
	run := testRun("r1", corev1.EnvVar{Name: "TF_VAR_greeting", Value: "hi"})
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l)
	st, _ := l.Status(context.Background(), RefOf(run))
	if want := "hi|none|/etc/spoke.kubeconfig|/etc/spoke.kubeconfig"; st.Result.Message != want {
		t.Errorf("variables seen by the run: %q, want %s", st.Result.Message, want)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec runner.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.PlanFile != filepath.Join(dir, "team", "network", "r1.tfplan") || spec.BinaryPath != "/opt/tofu" ||
		spec.Backend.Kubernetes == nil || spec.Backend.Kubernetes.ConfigPath != "/etc/spoke.kubeconfig" ||
		spec.Backend.Kubernetes.Namespace != "team" || spec.Backend.Kubernetes.SecretSuffix != "network" {
		t.Errorf("run spec %+v", spec)
	}
}

// TestLocalPrune: files of other runs go; the kept run's stay.
func TestLocalPrune(t *testing.T) {
	dir := t.TempDir()
	l := newTestLauncher(t, dir, writeResult, nil)
	ws := testRun("r1").Workspace
	wsDir := filepath.Join(dir, "team", "network")
	if err := os.MkdirAll(wsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"old-plan.json", "old-plan.log", "old.tfplan", "new-plan.json", "new.tfplan", "terraform.tfstate"} {
		if err := os.WriteFile(filepath.Join(wsDir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Prune(context.Background(), ws, "new"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(wsDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != "new-plan.json,new.tfplan,terraform.tfstate" {
		t.Errorf("kept %s", got)
	}
	if err := l.Forget(context.Background(), "team", "network"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(wsDir); !os.IsNotExist(err) {
		t.Errorf("Forget left %s", wsDir)
	}
}

func TestJobName(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct {
		workspace string
		op        runner.Operation
		wantBase  string
	}{
		{"network", runner.OperationPlan, "network"},
		{long, runner.OperationPlan, long[:63-len("-plan-")-8]},
		{long, runner.OperationDestroy, long[:63-len("-destroy-")-8]},
		{strings.Repeat("a", 47) + "-" + strings.Repeat("b", 15), runner.OperationApply, strings.Repeat("a", 47)},
	}
	for _, tt := range tests {
		t.Run(tt.workspace+"/"+string(tt.op), func(t *testing.T) {
			name := JobName(tt.workspace, tt.op, "20260501T100000-0a1b2c3d")
			if len(name) > 63 {
				t.Errorf("%q has %d characters", name, len(name))
			}
			if !strings.HasPrefix(name, tt.wantBase+"-"+string(tt.op)+"-") || len(name) != len(tt.wantBase)+len(tt.op)+10 {
				t.Errorf("%q, want %s-%s-<8 hex>", name, tt.wantBase, tt.op)
			}
			if name != JobName(tt.workspace, tt.op, "20260501T100000-0a1b2c3d") {
				t.Error("not deterministic")
			}
			if name == JobName(tt.workspace, tt.op, "20260501T100000-ffffffff") {
				t.Error("two runs share a Job name")
			}
		})
	}
}

// killAgentMidRun runs the test named test again in a child process, the agent, with envKey
// naming a new folder; waits until the child's run (what, for messages) has written "run" to the
// folder's count file; kills the child's whole process group; and returns the folder.
func killAgentMidRun(t *testing.T, test, envKey, what string) string {
	t.Helper()
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	agent.Env = append(os.Environ(), envKey+"="+dir)
	agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	agent.Stdout, agent.Stderr = os.Stderr, os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-agent.Process.Pid, syscall.SIGKILL); _ = agent.Wait() })
	testenv.Eventually(t, 30*time.Second, func() error {
		if b, _ := os.ReadFile(filepath.Join(dir, "count")); !strings.Contains(string(b), "run") {
			return errors.New(what + " has not started")
		}
		return nil
	})
	if err := syscall.Kill(-agent.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	return dir
}
