package firstrun_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fakeGo stands in for the go command: it prints what a first build prints (go: downloading,
// go: added) and writes the files a build would, in no time. FAKE_GO_FAIL names a package whose
// build fails after 100 lines of compiler errors. FAKE_GOMOD is the go.mod `go mod download
// -json` points at.
const fakeGo = `#!/usr/bin/env bash
set -euo pipefail
case "$1 ${2:-}" in
"env GOOS") echo linux; exit 0 ;;
"env GOARCH") echo amd64; exit 0 ;;
"mod download")
  echo "go: downloading ${4%@*} ${4#*@}" >&2
  printf '{\n\t"Path": "%s",\n\t"GoMod": "%s"\n}\n' "${4%@*}" "$FAKE_GOMOD"
  exit 0 ;;
"get -tool")
  for m in "${@:3}"; do
    echo "go: downloading ${m%@*} ${m#*@}" >&2
    echo "go: downloading golang.org/x/sys v0.40.0" >&2
    echo "go: added ${m%@*} ${m#*@}" >&2
  done
  exit 0 ;;
esac
[[ $1 == build ]] || { echo "fake go: $* not faked" >&2; exit 2; }
shift
out="" pkgs=()
while (($#)); do
  case $1 in
  -o) out=$2; shift 2 ;;
  -tags | -ldflags) shift 2 ;;
  -*) shift ;;
  *) pkgs+=("$1"); shift ;;
  esac
done
echo "go: downloading golang.org/x/net v0.50.0" >&2
for p in "${pkgs[@]}"; do
  if [[ $p == "${FAKE_GO_FAIL:-}" ]]; then
    for i in $(seq 1 100); do echo "compile error line $i" >&2; done
    exit 2
  fi
done
if [[ $out == */ ]]; then
  for p in "${pkgs[@]}"; do : >"$out/${p##*/}" && chmod +x "$out/${p##*/}"; done
else
  : >"$out" && chmod +x "$out"
fi
`

// fakeGoMod is what `go mod download -json` of k8s.io/kubernetes and OpenTofu point at: one
// staging module and one replace directive are all provision-assets.sh looks for.
const fakeGoMod = `module k8s.io/kubernetes

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/sample-apiserver => ./staging/src/k8s.io/sample-apiserver
)

replace github.com/hashicorp/hcl/v2 v2.0.0 => github.com/opentofu/hcl/v2 v2.0.0
`

// fakeGoEnv returns this process's environment with the fake go first on PATH.
func fakeGoEnv(t *testing.T) []string {
	t.Helper()
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := filepath.Join(fake, "go.mod.fake")
	if err := os.WriteFile(gomod, []byte(fakeGoMod), 0o644); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "PATH="+fake+string(os.PathListSeparator)+os.Getenv("PATH"), "FAKE_GOMOD="+gomod)
}

// provisionRun is one run of tools/provision-assets.sh with the fake go.
type provisionRun struct {
	stdout, stderr string
	err            error
}

// runProvision runs tools/provision-assets.sh against the assets folder assets with the fake go
// first on PATH and the extra environment env.
func runProvision(t *testing.T, assets string, env ...string) provisionRun {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "tools", "provision-assets.sh"))
	cmd.Env = append(fakeGoEnv(t), "MAGOS_ASSETS_DIR="+assets, "MAGOS_ASSETS_ONLY=")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return provisionRun{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// goLines returns the lines of out that the go command wrote (go: downloading, go: added...).
func goLines(out string) []string {
	var lines []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "go: ") {
			lines = append(lines, line)
		}
	}
	return lines
}

var buildingLine = regexp.MustCompile(`^\[assets\] building (.+) \((\d+) of (\d+), about (\d+ (?:s|min)); about (\d+) (s|min) left in all; log: (\S+)\)$`)

// TestFirstBuildPrintsProgressNotGoOutput: a first run of tools/provision-assets.sh (every tool
// to build, go printing its hundreds of lines) shows the terminal a line per tool (which, i of
// n, about how long, how long is left, the log's path) and a line when it is built, and not one
// line of go's output, which is in the log the lines name. stdout, which make evals, holds only
// the three assignments. A second run prints nothing and writes no log.
func TestFirstBuildPrintsProgressNotGoOutput(t *testing.T) {
	t.Parallel()
	assets := t.TempDir()
	run := runProvision(t, assets)
	if run.err != nil {
		t.Fatalf("provision-assets.sh: %v\nstderr:\n%s", run.err, run.stderr)
	}
	if lines := goLines(run.stderr); len(lines) > 0 {
		t.Errorf("the terminal got %d lines of go's output, want none; the first: %q", len(lines), lines[0])
	}
	if n := strings.Count(run.stderr, "\n"); n > 10 {
		t.Errorf("the terminal got %d lines, want a few:\n%s", n, run.stderr)
	}

	var logPath string
	var left []int
	lines := strings.Split(strings.TrimSuffix(run.stderr, "\n"), "\n")
	for i, line := range lines {
		m := buildingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[2] != strconv.Itoa(len(left)+1) || m[3] != "4" {
			t.Errorf("step %q is %s of %s, want %d of 4", m[1], m[2], m[3], len(left)+1)
		}
		if logPath != "" && m[7] != logPath {
			t.Errorf("step %q logs to %s, the one before to %s: want one log per run", m[1], m[7], logPath)
		}
		logPath = m[7]
		n, _ := strconv.Atoi(m[5])
		if m[6] == "min" {
			n *= 60
		}
		left = append(left, n)
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "[assets] "+m[1]+" built in ") {
			t.Errorf("building %q is not followed by a line saying it was built:\n%s", m[1], run.stderr)
		}
	}
	if len(left) != 4 {
		t.Fatalf("the terminal got %d building lines, want 4 (etcd, tofu, providers, kube):\n%s", len(left), run.stderr)
	}
	for i := 1; i < len(left); i++ {
		if left[i] >= left[i-1] {
			t.Errorf("time left goes from %ds to %ds at step %d, want it to shrink:\n%s", left[i-1], left[i], i+1, run.stderr)
		}
	}
	if !strings.HasPrefix(logPath, filepath.Join(assets, "logs")+string(os.PathSeparator)) {
		t.Errorf("the log %s is not under the assets folder's logs/", logPath)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("the log the terminal names: %v", err)
	}
	if n := len(goLines(string(raw))); n < 10 {
		t.Errorf("the log holds %d lines of go's output, want every one of them:\n%s", n, raw)
	}

	var keys []string
	for line := range strings.SplitSeq(strings.TrimSuffix(run.stdout, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(v, assets) {
			t.Errorf("stdout line %q is not NAME=<path under the assets folder>", line)
			continue
		}
		if _, err := os.Stat(v); err != nil {
			t.Errorf("stdout's %s: %v", k, err)
		}
		keys = append(keys, k)
	}
	if got, want := strings.Join(keys, " "), "KUBEBUILDER_ASSETS MAGOS_TOFU MAGOS_PROVIDERS"; got != want {
		t.Errorf("stdout assigns %s, want %s:\n%s", got, want, run.stdout)
	}

	again := runProvision(t, assets)
	if again.err != nil || again.stderr != "" || again.stdout != run.stdout {
		t.Errorf("a cached run: err %v, stderr %q, stdout %q; want no error, nothing on stderr, the same stdout", again.err, again.stderr, again.stdout)
	}
	logs, _ := filepath.Glob(filepath.Join(assets, "logs", "*.log"))
	if len(logs) != 1 {
		t.Errorf("after a first and a cached run the logs are %v, want the first run's alone", logs)
	}
}

// TestFailedBuildShowsTheLogTail: when a build fails, the terminal gets the last 40 lines of the
// log and its path (which holds everything), stdout nothing, and the run fails.
func TestFailedBuildShowsTheLogTail(t *testing.T) {
	t.Parallel()
	assets := t.TempDir()
	run := runProvision(t, assets, "FAKE_GO_FAIL=go.etcd.io/etcd/server/v3")
	var exit *exec.ExitError
	if !errors.As(run.err, &exit) {
		t.Fatalf("provision-assets.sh with a failing build: %v, want a non-zero exit\nstderr:\n%s", run.err, run.stderr)
	}
	if run.stdout != "" {
		t.Errorf("stdout %q, want nothing for make to eval", run.stdout)
	}
	shown := map[string]bool{}
	for line := range strings.SplitSeq(run.stderr, "\n") {
		shown[strings.TrimSpace(line)] = true
	}
	for _, n := range []int{61, 100} {
		if !shown["compile error line "+strconv.Itoa(n)] {
			t.Errorf("the terminal does not show line %d of the log (of 100):\n%s", n, run.stderr)
		}
	}
	if shown["compile error line 60"] {
		t.Errorf("the terminal shows line 60 of the log, want the last 40 only:\n%s", run.stderr)
	}
	m := regexp.MustCompile(`the whole log: (\S+)`).FindStringSubmatch(run.stderr)
	if m == nil {
		t.Fatalf("the terminal does not name the log:\n%s", run.stderr)
	}
	raw, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatalf("the log the terminal names: %v", err)
	}
	if !strings.Contains(string(raw), "compile error line 1\n") {
		t.Errorf("the log %s does not hold the whole output:\n%s", m[1], raw)
	}
}

// goCommand matches a line of a provisioning script that runs go to get, build or download.
var goCommand = regexp.MustCompile(`(^|[\s(&|;])go (get|build|mod|install|run)\b`)

// TestEveryGoCommandIsLogged: every go get, go build and go mod of the provisioning scripts runs
// through assets-lib.sh's step_run or step_output, which keep go's output off the terminal, or
// captures its output to show on a failure only. TestFirstBuildPrintsProgressNotGoOutput runs
// provision-assets.sh; provision-node.sh needs root, debootstrap and libseccomp, so it is read.
func TestEveryGoCommandIsLogged(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"provision-assets.sh", "provision-node.sh"} {
		raw, err := os.ReadFile(filepath.Join(repoRoot(t), "tools", script))
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for i, line := range strings.Split(string(raw), "\n") {
			code, _, _ := strings.Cut(line, " #")
			if strings.HasPrefix(strings.TrimSpace(code), "#") || !goCommand.MatchString(code) {
				continue
			}
			found++
			if !strings.Contains(code, "step_run go ") && !strings.Contains(code, "step_output go ") &&
				!strings.Contains(code, "2>&1)") {
				t.Errorf("%s:%d runs go with its output on the terminal (use step_run): %s", script, i+1, strings.TrimSpace(line))
			}
		}
		if found == 0 {
			t.Errorf("%s runs no go command: the check reads nothing", script)
		}
	}
}
