package firstrun_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// prereqRun is one run of tools/prereqs.sh.
type prereqRun struct {
	stdout, stderr string
	exitCode       int
}

// runPrereqs runs tools/prereqs.sh with the arguments args (split at spaces) and PATH holding only bash and the given fake
// commands (name to shell script body), and the extra environment env.
func runPrereqs(t *testing.T, args string, fakes map[string]string, env ...string) prereqRun {
	t.Helper()
	dir := t.TempDir()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bash, filepath.Join(dir, "bash")); err != nil {
		t.Fatal(err)
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+bash+"\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, append([]string{filepath.Join(repoRoot(t), "tools", "prereqs.sh")}, strings.Fields(args)...)...)
	cmd.Env = append([]string{"PATH=" + dir, "HOME=" + dir}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	run := prereqRun{}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.exitCode = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	run.stdout, run.stderr = stdout.String(), stderr.String()
	return run
}

// sudo is what the install command starts with for this user.
func sudo() string {
	if os.Geteuid() == 0 {
		return ""
	}
	return "sudo "
}

// A docker whose daemon answers, and one whose daemon is gone.
const (
	dockerUp   = `echo 29.0.0`
	dockerDown = `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`
)

// TestRealNodesNameMissingPackages: make test-real (and demo-real) on a machine without
// debootstrap stops before building anything, naming the missing Debian package and the
// command that installs it.
func TestRealNodesNameMissingPackages(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"test-real", "demo-real"} {
		run := runPrereqs(t, target, map[string]string{"gcc": "", "docker": dockerUp})
		if run.exitCode != 1 {
			t.Errorf("%s without debootstrap: exit %d, want 1\nstderr: %s", target, run.exitCode, run.stderr)
		}
		for _, want := range []string{
			"make " + target + " needs Debian packages that are missing: debootstrap",
			"Install them with: " + sudo() + "apt-get install -y debootstrap",
		} {
			if !strings.Contains(run.stderr, want) {
				t.Errorf("%s without debootstrap says %q, want it to say %q", target, run.stderr, want)
			}
		}
		if run.stdout != "" {
			t.Errorf("%s: stdout %q, want nothing", target, run.stdout)
		}
	}
}

// TestRealNodesNeedADockerDaemon: a docker CLI without a daemon is reported with what docker
// said; a missing docker CLI is a missing package.
func TestRealNodesNeedADockerDaemon(t *testing.T) {
	t.Parallel()
	run := runPrereqs(t, "test-real", map[string]string{"gcc": "", "debootstrap": "", "docker": dockerDown})
	if run.exitCode != 1 || !strings.Contains(run.stderr, "make test-real needs a Docker daemon") ||
		!strings.Contains(run.stderr, "Cannot connect to the Docker daemon") {
		t.Errorf("test-real without a Docker daemon: exit %d, stderr %q; want 1 and a message naming the daemon and docker's words", run.exitCode, run.stderr)
	}
	run = runPrereqs(t, "test-real", map[string]string{"gcc": "", "debootstrap": ""})
	if run.exitCode != 1 || !strings.Contains(run.stderr, "apt-get install -y docker.io") {
		t.Errorf("test-real without docker: exit %d, stderr %q; want 1 and the command installing docker.io", run.exitCode, run.stderr)
	}
}

// TestMakeTestWarnsWithoutChromium: without chromium make test only warns (the browser test
// skips), unless MAGOS_CI is set, where the browser test would fail: then the check fails first.
func TestMakeTestWarnsWithoutChromium(t *testing.T) {
	t.Parallel()
	run := runPrereqs(t, "test", nil)
	if run.exitCode != 0 || !strings.Contains(run.stderr, "will skip") ||
		!strings.Contains(run.stderr, sudo()+"apt-get install -y chromium") {
		t.Errorf("make test without chromium: exit %d, stderr %q; want 0, a warning that the browser test will skip and the install command", run.exitCode, run.stderr)
	}
	run = runPrereqs(t, "test", nil, "MAGOS_CI=1")
	if run.exitCode != 1 || !strings.Contains(run.stderr, "make test needs Debian packages that are missing: chromium") {
		t.Errorf("make test under MAGOS_CI without chromium: exit %d, stderr %q; want 1 and the missing package", run.exitCode, run.stderr)
	}
	run = runPrereqs(t, "test", map[string]string{"chromium": ""}, "MAGOS_CI=1")
	if run.exitCode != 0 || run.stderr != "" {
		t.Errorf("make test with chromium: exit %d, stderr %q; want 0 and nothing said", run.exitCode, run.stderr)
	}
}

// TestMissingPackagesForCI: .ci/run installs what `prereqs.sh --missing-packages` lists, and
// only that goes to stdout.
func TestMissingPackagesForCI(t *testing.T) {
	t.Parallel()
	run := runPrereqs(t, "--missing-packages test test-real", map[string]string{"gcc": "", "docker": dockerDown}, "MAGOS_CI=1")
	got := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSuffix(run.stdout, "\n"), "\n") {
		got[line] = true
	}
	if run.exitCode != 0 || !got["chromium"] || !got["debootstrap"] || got["gcc"] || got["docker.io"] {
		t.Errorf("--missing-packages test test-real without chromium and debootstrap: exit %d, stdout %q; want 0 and both named, gcc and docker not", run.exitCode, run.stdout)
	}
}

// TestMakeChecksPrereqsFirst: the check is the first thing make test, test-real, demo-real and
// node-image run, before any build.
func TestMakeChecksPrereqsFirst(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed")
	}
	for _, target := range []string{"test", "test-real", "demo-real", "node-image"} {
		// Run as a top-level make even under `make test` (whose MAKELEVEL and MAKEFLAGS would
		// make this one print "make[1]: Entering directory" first).
		cmd := exec.Command("make", "--no-print-directory", "-n", target)
		cmd.Dir = repoRoot(t)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "MAKELEVEL=") || strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=")
		})
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make -n %s: %v", target, err)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		if want := "tools/prereqs.sh " + target; first != want {
			t.Errorf("make %s runs %q first, want %q", target, first, want)
		}
	}
}
