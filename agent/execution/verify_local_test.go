package execution

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// verifyRun is a verify run of team/network whose check runs command.
func verifyRun(runID string, timeout time.Duration, command ...string) *Run {
	run := testRun(runID)
	run.Spec.Operation = runner.OperationVerify
	run.Check = &magosv1.VerificationJob{Image: "registry.example/checks:1", Command: command}
	run.Timeout = timeout
	return run
}

// finished polls the run's Status until it is finished and returns it.
func finished(t *testing.T, l *LocalLauncher, ref Ref, within time.Duration) Status {
	t.Helper()
	var st Status
	testenv.Eventually(t, within, func() error {
		var err error
		if st, err = l.Status(context.Background(), ref); err != nil {
			return err
		}
		if st.State != StateFinished {
			return fmt.Errorf("state %s, want Finished", st.State)
		}
		return nil
	})
	return st
}

// output is what the run printed, as Output returns it.
func output(t *testing.T, l *LocalLauncher, ref Ref) string {
	t.Helper()
	rc, err := l.Output(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLocalVerify runs checks as child processes: one that passes and sees the run's
// environment (a literal, a Secret's value, the agent's PATH, and nothing else of the agent's),
// one that exits 3, one over its timeout, one without a command; each result as Status reports
// it, the first two read again by a new launcher on the same data folder (an agent restart), and
// what the checks printed as Output returns it. A verify run without its check is refused.
func TestLocalVerify(t *testing.T) {
	t.Setenv("MAGOS_AGENT_ONLY", "agent-value")
	dir := t.TempDir()
	ctx := context.Background()
	// The Secret the check's environment names lives in a real API server.
	reader := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"team"}}).Spokes["team"].Client
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "checks"}, Data: map[string][]byte{"token": []byte("s3cret")}},
	} {
		if err := reader.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	mutate := func(o *LocalOptions) { o.Reader = reader; o.StopGrace = time.Second }
	l := newTestLauncher(t, dir, "exit 99", mutate) // the runner command is never run here

	pass := verifyRun("r1", time.Minute, "sh", "-c",
		`test "$OUTPUT_REPLICAS" = 3 && test "$API_TOKEN" = s3cret && test -z "${MAGOS_AGENT_ONLY:-}" && test -z "${MAGOS_RUN_SPEC:-}" && echo "replicas: $OUTPUT_REPLICAS"`)
	pass.Env = []corev1.EnvVar{
		{Name: "OUTPUT_REPLICAS", Value: "3"},
		{Name: "API_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "checks"}, Key: "token"}}},
	}
	fail := verifyRun("r2", time.Minute, "sh", "-c")
	fail.Check.Args = []string{`echo "only 2 replicas" >&2; exit 3`}
	slow := verifyRun("r3", time.Second, "sleep", "30")
	none := verifyRun("r4", time.Minute)

	cases := []struct {
		name    string
		run     *Run
		outcome runner.Outcome
		message string
		// printed is in the output.
		printed string
	}{
		{name: "passes", run: pass, outcome: runner.OutcomeSucceeded, printed: "replicas: 3"},
		{name: "exits 3", run: fail, outcome: runner.OutcomeFailed, message: "the check exited with code 3", printed: "only 2 replicas"},
		{name: "times out", run: slow, outcome: runner.OutcomeFailed, message: "the check did not finish within 1s"},
		{name: "no command", run: none, outcome: runner.OutcomeFailed,
			message: "a verification job run locally needs a command: the local launcher runs the check's command, not its image (registry.example/checks:1)",
			printed: "needs a command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			if err := l.Start(ctx, tc.run); err != nil {
				t.Fatal(err)
			}
			ref := RefOf(tc.run)
			st := finished(t, l, ref, 20*time.Second)
			if took := time.Since(began); tc.run == slow && took > 10*time.Second {
				t.Errorf("the check over its 1s timeout ended after %s", took)
			}
			res := st.Result
			if res.Operation != runner.OperationVerify || res.RunID != tc.run.Spec.RunID || res.Outcome != tc.outcome || res.Message != tc.message {
				t.Errorf("result %s of %s: %s %q; want the verify of %s: %s %q", res.Operation, res.RunID, res.Outcome, res.Message,
					tc.run.Spec.RunID, tc.outcome, tc.message)
			}
			if out := output(t, l, ref); !strings.Contains(out, tc.printed) {
				t.Errorf("output %q, want it to have %q", out, tc.printed)
			}
			if _, err := os.Stat(l.pidPath(ref)); !os.IsNotExist(err) {
				t.Errorf("pid file left after the check ended: %v", err)
			}
		})
	}

	restarted := newTestLauncher(t, dir, "exit 99", mutate)
	for _, run := range []*Run{pass, fail} {
		st, err := restarted.Status(ctx, RefOf(run))
		if err != nil || st.State != StateFinished {
			t.Fatalf("after a restart, the verify of %s: %+v %v, want it finished", run.Spec.RunID, st, err)
		}
		if first, _ := l.Status(ctx, RefOf(run)); st.Result.Outcome != first.Result.Outcome || st.Result.Message != first.Result.Message {
			t.Errorf("after a restart, the verify of %s: %+v, want %+v", run.Spec.RunID, st.Result, first.Result)
		}
	}

	bad := verifyRun("r5", time.Minute, "true")
	bad.Check = nil
	if err := l.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "no check") {
		t.Errorf("Start of a verify run without a check: %v, want an error saying so", err)
	}
}

// TestLocalVerifyOutlivingItsAgent: a check runs on when its agent is killed (kill -9 of the
// agent's process group), as a runner does; the next agent, on the same data folder, reports it
// running, starts nothing, and once the check ends reports how it ended (its exit code, which
// its wrapper recorded, since no agent saw it end) and what it printed. The first agent is this
// test binary run again as a child process.
func TestLocalVerifyOutlivingItsAgent(t *testing.T) {
	if dir := os.Getenv(envKilledVerifyAgentDir); dir != "" {
		l := newTestLauncher(t, dir, "exit 99", nil)
		if err := l.Start(context.Background(), gatedCheck(dir)); err != nil {
			t.Fatal(err)
		}
		select {} // until SIGKILL
	}
	dir := killAgentMidRun(t, "TestLocalVerifyOutlivingItsAgent", envKilledVerifyAgentDir, "the check")

	restarted := newTestLauncher(t, dir, "exit 99", nil)
	run := gatedCheck(dir)
	ref := RefOf(run)
	st, err := restarted.Status(context.Background(), ref)
	if err != nil || st.State != StateRunning {
		t.Fatalf("after the agent was killed: status %+v %v, want Running (the check still runs)", st, err)
	}
	if err := restarted.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "gate")); err != nil {
		t.Fatal(err)
	}
	st = finished(t, restarted, ref, 30*time.Second)
	if st.Result.Operation != runner.OperationVerify || st.Result.RunID != "r1" || st.Result.Outcome != runner.OutcomeFailed ||
		st.Result.Message != "the check exited with code 4" {
		t.Errorf("result %+v, want the verify of r1 failed with code 4", st.Result)
	}
	if out := output(t, restarted, ref); !strings.Contains(out, "checked") {
		t.Errorf("output %q, want what the check printed", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "count")); strings.Count(string(b), "run") != 1 {
		t.Errorf("the check ran %d times, want once", strings.Count(string(b), "run"))
	}
	again := newTestLauncher(t, dir, "exit 99", nil)
	if st, err := again.Status(context.Background(), ref); err != nil || st.State != StateFinished || st.Result.Message != "the check exited with code 4" {
		t.Errorf("a third agent: status %+v %v, want the result written by the second", st, err)
	}
}

// envKilledVerifyAgentDir makes this test binary the agent that TestLocalVerifyOutlivingItsAgent
// kills.
const envKilledVerifyAgentDir = "MAGOS_TEST_KILLED_VERIFY_AGENT_DIR"

// gatedCheck is a verify run whose check counts its start, runs until the gate file is removed,
// prints "checked" and exits 4.
func gatedCheck(dir string) *Run {
	return verifyRun("r1", time.Minute, "sh", "-c",
		`echo run >> "`+filepath.Join(dir, "count")+`"; while [ -e "`+filepath.Join(dir, "gate")+`" ]; do sleep 0.1; done; echo checked; exit 4`)
}

// TestLocalPruneKeepsARunningCheck: Prune keeps the files of a check that still runs (its log,
// its pid file) and removes those of finished verify runs of other run IDs.
func TestLocalPruneKeepsARunningCheck(t *testing.T) {
	dir := t.TempDir()
	l := newTestLauncher(t, dir, "exit 99", nil)
	ctx := context.Background()
	done := verifyRun("r0", time.Minute, "true")
	if err := l.Start(ctx, done); err != nil {
		t.Fatal(err)
	}
	finished(t, l, RefOf(done), 20*time.Second)
	gate := filepath.Join(dir, "gate")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	running := gatedCheck(dir)
	if err := l.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := l.Prune(ctx, running.Workspace, "r9"); err != nil {
		t.Fatal(err)
	}
	ref := RefOf(running)
	for _, f := range []string{l.LogPath(ref), l.pidPath(ref)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("Prune removed %s of the running check: %v", filepath.Base(f), err)
		}
	}
	for _, f := range []string{l.LogPath(RefOf(done)), l.ResultPath(RefOf(done))} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("Prune kept %s of a finished check of another run (%v)", filepath.Base(f), err)
		}
	}
	if err := os.Remove(filepath.Join(dir, "gate")); err != nil {
		t.Fatal(err)
	}
	if st := finished(t, l, ref, 30*time.Second); st.Result.Message != "the check exited with code 4" {
		t.Errorf("result %+v, want the check's failure with code 4", st.Result)
	}
}
