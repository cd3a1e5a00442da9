package execution

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
)

// envRunnerChild makes the test binary the runner entrypoint (runner.Main), so a local run
// executes the real runner and a real tofu.
const envRunnerChild = "MAGOS_EXECUTION_TEST_RUNNER"

func TestMain(m *testing.M) {
	if os.Getenv(envRunnerChild) == "1" {
		os.Exit(runner.Main(context.Background()))
	}
	os.Exit(m.Run())
}

// TestLocalRunnerEnvWinsOverTheUsers: a run's environment that names MAGOS_RUN_SPEC and
// MAGOS_RESULT_FILE (a VariableSet stored under an older CRD) replaces neither the run spec
// nor the result file: the real runner plans the launcher's spec with a real tofu and writes
// its result where the launcher reads it; the user's spec (an apply of another Workspace) is
// never run and the user's result file never written.
func TestLocalRunnerEnvWinsOverTheUsers(t *testing.T) {
	tofu, err := localcluster.Tofu()
	if err != nil {
		t.Fatal(err)
	}
	repo := gitrepotest.New(t)
	sha := repo.Commit(t, "initial", map[string]string{"main.tf": `output "greeting" { value = "hi" }`})
	dir := t.TempDir()
	l := newTestLauncher(t, dir, "", func(o *LocalOptions) {
		o.Command = []string{os.Args[0], "-test.run=^$"}
		o.Env = []string{envRunnerChild + "=1"}
		o.Kubeconfig = "" // local state in the run folder
		o.BinaryPath = tofu
	})
	userResult := filepath.Join(dir, "user-result.json")
	run := testRun("r1",
		corev1.EnvVar{Name: runner.EnvSpec, Value: `{"operation":"apply","runID":"other","namespace":"team","name":"payments"}`},
		corev1.EnvVar{Name: runner.EnvResultFile, Value: userResult},
	)
	run.Spec.RepoURL, run.Spec.Revision, run.Spec.Path = repo.URL(), sha, "."
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l)
	st, err := l.Status(context.Background(), RefOf(run))
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateFinished || st.Result.Outcome != runner.OutcomeSucceeded || st.Result.Operation != runner.OperationPlan ||
		st.Result.RunID != "r1" || st.Result.Revision != sha || !st.Result.HasChanges {
		log, _ := os.ReadFile(l.LogPath(RefOf(run)))
		t.Errorf("status %+v, want the launcher's plan of r1 at %s succeeded with changes; run log:\n%s", st, sha, log)
	}
	if _, err := os.Stat(userResult); !os.IsNotExist(err) {
		t.Errorf("the run wrote the user's result file %s (stat: %v)", userResult, err)
	}
}
