// Package deps_test checks what the production binaries are built from: never test support.
package deps_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module is the workspace's module path prefix.
const module = "github.com/magosfleet/magos/"

// testSupport are the packages that exist for tests only. Besides them, any package of the
// workspace whose last element ends in "test" (hubtest, gitrepotest) is test support, and so is
// Go's testing package, which every test helper imports.
var testSupport = []string{
	module + "pkg/testenv",
	module + "pkg/localcluster",
}

// TestBinariesHaveNoTestSupport lists the dependencies of every command of the production
// modules (hub, agent, pkg, apis: magos-hub, magosctl, magos-agent) and fails when one of them
// depends on test support: test code must not ship in the binaries and images.
func TestBinariesHaveNoTestSupport(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	production := []string{"./hub/...", "./agent/...", "./pkg/...", "./apis/..."}
	mains := goList(t, root, append([]string{"-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`}, production...)...)
	if len(mains) == 0 {
		t.Fatal("no commands found in the production modules")
	}
	for _, cmd := range mains {
		for _, dep := range goList(t, root, "-deps", cmd) {
			if isTestSupport(dep) {
				t.Errorf("%s depends on the test support package %s (go list -deps %s)", cmd, dep, cmd)
			}
		}
	}
}

func isTestSupport(pkg string) bool {
	if pkg == "testing" || strings.HasPrefix(pkg, "testing/") {
		return true
	}
	if !strings.HasPrefix(pkg, module) {
		return false
	}
	for _, s := range testSupport {
		if pkg == s || strings.HasPrefix(pkg, s+"/") {
			return true
		}
	}
	return strings.HasSuffix(pkg, "test")
}

// goList runs go list with args in dir and returns its non-empty output lines.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var msg string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
