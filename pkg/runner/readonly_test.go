package runner_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/magosfleet/magos/pkg/runner"
)

// envReadOnlyHelper makes the test binary run the runner entrypoint instead of the tests (see
// TestRunnerHelperProcess); its value is a path the helper must not be able to write.
const envReadOnlyHelper = "MAGOS_TEST_READONLY_RUNNER"

// sandbox runs its arguments in a private mount namespace where every file system is
// read-only except the two folders given (and /proc, /sys, /dev): what a run Job's container
// sees with readOnlyRootFilesystem, its /tmp emptyDir and its data volume.
const sandbox = `set -e
tmp=$1 data=$2; shift 2
mount --make-rprivate /
mount --bind "$tmp" "$tmp"
mount --bind "$data" "$data"
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$m" in "$tmp"|"$data"|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac
  mount -o remount,bind,ro "$m"
done
exec "$@"`

// TestRunWritesOnlyToTmpAndTheDataVolume runs a plan and an apply through the runner
// entrypoint as a Job runs them, on a file system that is read-only except the folder standing
// for /tmp (HOME and TMPDIR, as the Job sets them) and the one standing for the data volume
// (the plan file, the state, the result): both succeed, so neither the runner, git nor tofu
// (its data folder, the module's modules, the lock file) writes anywhere else. The runner's
// working directory is /, as in the image. Needs Linux, root and unshare (mount namespaces); it
// is skipped otherwise, but fails under CI.
func TestRunWritesOnlyToTmpAndTheDataVolume(t *testing.T) {
	tmp, data := t.TempDir(), t.TempDir()
	unshare := mountNamespace(t, "make the file system read-only", sandbox, tmp, data)
	f := newFixture(t, map[string]string{
		"main.tf": module + `
module "child" {
  source = "./child"
  input  = var.input
}
`,
		"child/main.tf": `variable "input" {
  type = string
}
resource "terraform_data" "child" {
  input = var.input
}
`,
	})
	outside := filepath.Join(t.TempDir(), "written-outside")
	run := func(op runner.Operation) runner.Result {
		t.Helper()
		spec := f.spec(op)
		spec.PlanFile = filepath.Join(data, spec.RunID+".tfplan")
		spec.Backend = runner.Backend{LocalPath: filepath.Join(data, "terraform.tfstate")}
		resultFile := filepath.Join(data, "termination-log")
		cmd := exec.Command(unshare, "--mount", "sh", "-c", sandbox, "sh", tmp, data,
			os.Args[0], "-test.run=^TestRunnerHelperProcess$", "-test.v")
		cmd.Dir = "/"
		cmd.Env = []string{
			envReadOnlyHelper + "=" + outside,
			"PATH=" + os.Getenv("PATH"),
			"HOME=" + tmp, "TMPDIR=" + tmp,
			runner.EnvSpec + "=" + mustJSON(spec),
			runner.EnvResultFile + "=" + resultFile,
			"TF_VAR_input=sandboxed",
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("%s:\n%s", op, out.String())
		raw, rerr := os.ReadFile(resultFile)
		if rerr != nil {
			t.Fatalf("%s: no result (%v; exit %v)", op, rerr, err)
		}
		res, rerr := runner.DecodeResult(raw)
		if rerr != nil {
			t.Fatalf("%s: %v", op, rerr)
		}
		if res.Outcome != runner.OutcomeSucceeded {
			t.Fatalf("%s on a read-only file system: %s: %s (exit %v)", op, res.Outcome, res.Message, err)
		}
		return res
	}
	run(runner.OperationPlan)
	run(runner.OperationApply)
	inputs, _ := stateOf(t, filepath.Join(data, "terraform.tfstate"))
	if inputs["terraform_data.child"] != "sandboxed" || inputs["terraform_data.this"] != "sandboxed" {
		t.Errorf("state inputs %v, want both resources applied with the sandboxed input", inputs)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("the helper wrote %s: the file system was not read-only", outside)
	}
}

// mountNamespace returns the unshare binary that runs script (sh -c, with args before the
// command) in a private mount namespace, once a probe (the command true) showed it can, to do
// what why says. It needs Linux, root and unshare: a missing prerequisite skips the test, but
// fails it under CI (MAGOS_CI, set by .ci/run), which runs as root on Linux with unshare, where
// a silent skip would drop the proof.
func mountNamespace(t *testing.T, why, script string, args ...string) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("MAGOS_CI") != "" {
		skip = t.Fatalf
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		skip("needs root on Linux to %s in a mount namespace", why)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		skip("needs unshare to %s in a mount namespace", why)
	}
	probe := append(append([]string{"--mount", "sh", "-c", script, "sh"}, args...), "true")
	if out, err := exec.Command(unshare, probe...).CombinedOutput(); err != nil {
		skip("cannot %s in a mount namespace here: %v: %s", why, err, out)
	}
	return unshare
}

// TestRunnerHelperProcess is the runner entrypoint of TestRunWritesOnlyToTmpAndTheDataVolume,
// run in its sandbox; it does nothing in a normal test run. It first checks that the sandbox
// holds (a file outside the writable folders cannot be written), then runs runner.Main.
func TestRunnerHelperProcess(t *testing.T) {
	outside := os.Getenv(envReadOnlyHelper)
	if outside == "" {
		return
	}
	if err := os.WriteFile(outside, []byte("x"), 0o600); !errors.Is(err, syscall.EROFS) {
		fmt.Fprintf(os.Stderr, "the sandbox is not read-only: writing %s: %v\n", outside, err)
		os.Exit(3)
	}
	os.Exit(runner.Main(context.Background()))
}
