package firstrun_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// makeMagosDev runs `make magos-dev` into the folder bin with the fake go, and returns what the
// terminal got (stdout and stderr together).
func makeMagosDev(t *testing.T, bin string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "magos-dev", "BIN="+bin)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(fakeGoEnv(t), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMakeBuildsQuietly: make's go builds (the Makefile's quietly, here through make magos-dev,
// the first thing make demo does) put a line before and one after on the terminal and go's
// output in bin/NAME.log; a failing build shows the log's last 40 lines.
func TestMakeBuildsQuietly(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed")
	}
	bin := t.TempDir()
	out, err := makeMagosDev(t, bin)
	if err != nil {
		t.Fatalf("make magos-dev: %v\n%s", err, out)
	}
	if lines := goLines(out); len(lines) > 0 {
		t.Errorf("the terminal got %d lines of go's output, want none:\n%s", len(lines), out)
	}
	log := filepath.Join(bin, "magos-dev.log")
	if !strings.Contains(out, "magos-dev: building") || !strings.Contains(out, "log: "+log) ||
		!strings.Contains(out, "magos-dev: done in ") {
		t.Errorf("the terminal got %q, want a line naming the build and its log, and one saying it is done", out)
	}
	raw, err := os.ReadFile(log)
	if err != nil || len(goLines(string(raw))) == 0 {
		t.Errorf("the log %s (%v) does not hold go's output:\n%s", log, err, raw)
	}

	out, err = makeMagosDev(t, t.TempDir(), "FAKE_GO_FAIL=./tools/cmd/magos-dev")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("make magos-dev with a failing build: %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(out, "the last 40 lines of") {
		t.Errorf("a failed build does not say it shows the log's tail:\n%s", out)
	}
	shown := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		shown[strings.TrimSpace(line)] = true
	}
	for n, want := range map[int]bool{60: false, 61: true, 100: true} {
		if shown["compile error line "+strconv.Itoa(n)] != want {
			t.Errorf("a failed build shows line %d of its log (of 100): %v, want %v:\n%s", n, !want, want, out)
		}
	}
}
