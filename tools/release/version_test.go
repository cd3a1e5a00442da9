package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		version, file string
		refused       string // a part of the error; "" when accepted
	}{
		{version: "v0.1.0", file: "v0.1.0-dev\n"},
		{version: "v0.1.0", file: "v0.1.0\n"},
		{version: "v0.1.0-rc.0", file: "v0.1.0-dev"},
		{version: "v1.12.3-rc.12", file: "v1.12.3-dev"},
		{version: "0.1.0", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "v0.1", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "v0.1.0-dev", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "v0.1.0+build", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "v0.01.0", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "v0.1.0-beta.1", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "", file: "v0.1.0-dev", refused: "not a release version"},
		{version: "v0.2.0", file: "v0.1.0-dev", refused: "differs from the VERSION file"},
		{version: "v0.1.1-rc.0", file: "v0.1.0-dev", refused: "differs from the VERSION file"},
		{version: "v0.1.0", file: "0.1.0", refused: "the VERSION file holds"},
	} {
		err := CheckVersion(tc.version, tc.file)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("CheckVersion(%q, %q): %v, want accepted", tc.version, tc.file, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("CheckVersion(%q, %q): %v, want an error with %q", tc.version, tc.file, err, tc.refused)
		}
	}
}

// TestMakeReleaseRefusesAVersion runs the Makefile's release target with versions it must
// refuse, and checks it stops before building anything.
func TestMakeReleaseRefusesAVersion(t *testing.T) {
	t.Parallel() // slow (a link, docker builds) and independent of the other tests
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed:", err)
	}
	file, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	next := core(strings.TrimSpace(string(file)))
	bin := t.TempDir()
	for _, tc := range []struct{ version, refused string }{
		{"v0.1", "is not a release version"},
		{next + "-dev", "is not a release version"},
		{"v99.0.0", "differs from the VERSION file"},
	} {
		cmd := exec.Command("make", "--no-print-directory", "release", "VERSION="+tc.version, "BIN="+bin, "RELEASE_ALLOW_DIRTY=1")
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.refused) {
			t.Errorf("make release VERSION=%s: %v, want refused with %q; output:\n%s", tc.version, err, tc.refused, out)
		}
		if _, err := os.Stat(filepath.Join(bin, "release", tc.version)); !os.IsNotExist(err) {
			t.Errorf("make release VERSION=%s refused but made its folder (%v)", tc.version, err)
		}
	}
}

// TestChartsFollowVERSION: both charts carry the VERSION file's next version (without -dev) as
// their version and appVersion, the latter with the leading v of the images' tags.
func TestChartsFollowVERSION(t *testing.T) {
	file, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	next := core(strings.TrimSpace(string(file)))
	for _, c := range []string{"magos-hub", "magos-agent"} {
		ch, err := loader.LoadDir(filepath.Join(repoRoot, "charts", c))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.Version != ChartVersion(next) || ch.Metadata.AppVersion != next {
			t.Errorf("charts/%s/Chart.yaml: version %q appVersion %q; the VERSION file (%s) wants version %q appVersion %q",
				c, ch.Metadata.Version, ch.Metadata.AppVersion, strings.TrimSpace(string(file)), ChartVersion(next), next)
		}
	}
}

// TestPackageChart packages the hub's chart for a release candidate and loads the package back.
func TestPackageChart(t *testing.T) {
	out := t.TempDir()
	file, err := PackageChart(filepath.Join(repoRoot, "charts", "magos-hub"), "v9.8.7-rc.1", out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(file) != "magos-hub-9.8.7-rc.1.tgz" {
		t.Errorf("package %s, want magos-hub-9.8.7-rc.1.tgz", file)
	}
	ch, err := loader.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "9.8.7-rc.1" || ch.Metadata.AppVersion != "v9.8.7-rc.1" {
		t.Errorf("packaged chart: version %q appVersion %q, want 9.8.7-rc.1 and v9.8.7-rc.1", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	if len(ch.Templates) == 0 || len(ch.Files) == 0 {
		t.Errorf("packaged chart has %d templates and %d files", len(ch.Templates), len(ch.Files))
	}
}

func TestReleaseNotes(t *testing.T) {
	changelog := "# Changelog\n\nintro\n\n## Unreleased\n\n- next thing\n\n" +
		"## v0.2.0 - 2027-01-10 - 0123abc\n\n### Added\n\n- two\n\n" +
		"## [v0.1.0] - 2026-12-06\n\n- one\n"
	for _, tc := range []struct{ version, want, refused string }{
		{version: "v0.2.0", want: "## v0.2.0 - 2027-01-10 - 0123abc\n\n### Added\n\n- two\n"},
		{version: "v0.2.0-rc.3", want: "## v0.2.0 - 2027-01-10 - 0123abc\n\n### Added\n\n- two\n"},
		{version: "v0.1.0", want: "## [v0.1.0] - 2026-12-06\n\n- one\n"},
		{version: "v0.3.0", refused: `no section "## v0.3.0"`},
	} {
		got, err := ReleaseNotes(changelog, tc.version)
		if tc.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: %v, want an error with %q", tc.version, err, tc.refused)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.version, got, err, tc.want)
		}
	}
	if _, err := ReleaseNotes("## v0.4.0\n\n## v0.3.0\n- x\n", "v0.4.0"); err == nil {
		t.Error("an empty section: want an error")
	}
	// The repository's own CHANGELOG.md has the notes of the VERSION file's version.
	file, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Between releases (a -dev VERSION) the changes gather under Unreleased; a release's
	// commit has its own section.
	if strings.HasSuffix(strings.TrimSpace(string(file)), "-dev") {
		if !strings.Contains(string(b), "\n## Unreleased\n") {
			t.Error("CHANGELOG.md has no ## Unreleased section for the changes since the last release")
		}
		return
	}
	next := core(strings.TrimSpace(string(file)))
	notes, err := ReleaseNotes(string(b), next)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(notes, "## "+next) || strings.Contains(notes, "## Unreleased") {
		t.Errorf("CHANGELOG.md's notes of %s:\n%s", next, notes)
	}
}

// TestWriteChecksums writes SHA256SUMS and has sha256sum check it, then changes a file.
func TestWriteChecksums(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"a.tgz": "a", "magosctl-v1.0.0-linux-amd64": "b", "NOTES.md": "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteChecksums(dir); err != nil {
		t.Fatal(err)
	}
	check := func() ([]byte, error) {
		cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := check()
	if err != nil || strings.Count(string(out), ": OK") != 3 {
		t.Fatalf("sha256sum --check: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.tgz"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := check(); err == nil {
		t.Errorf("sha256sum --check passed a changed file: %s", out)
	}
}

// TestParseDockerfileRefuses: an instruction the assembly would not reproduce is an error, not
// silently skipped.
func TestParseDockerfileRefuses(t *testing.T) {
	for _, tc := range []struct{ dockerfile, refused string }{
		{"FROM scratch AS a\nRUN echo\n", "RUN is not supported"},
		{"FROM debian AS a\n", "only scratch or an earlier stage"},
		{"FROM scratch\n", "want FROM scratch|<stage> AS <name>"},
		{"FROM scratch AS a\nCOPY --chown=1 x /\n", "flags and wildcards"},
		{"FROM scratch AS a\nCOPY a b c/\n", "destination must be absolute"},
		{"FROM scratch AS a\nCOPY a b /c\n", "need a destination folder"},
		{"FROM scratch AS a\nENV A=\"b c\"\n", "without quotes"},
		{"FROM scratch AS a\nENTRYPOINT /bin/x\n", "exec form"},
		{"COPY a /\n", "before the first FROM"},
		{"FROM scratch AS a\nWORKDIR /x\n", "WORKDIR is not supported"},
		{"FROM scratch AS a\nCOPY a /b/ \\\n  /c/\n", "continuations"},
	} {
		_, err := ParseDockerfile(strings.NewReader(tc.dockerfile))
		if err == nil || !strings.Contains(err.Error(), tc.refused) {
			t.Errorf("%q: %v, want an error with %q", tc.dockerfile, err, tc.refused)
		}
	}
	// Inheritance: a stage starts with its parent's copies and config; an ENTRYPOINT drops an
	// inherited CMD but not one of its own stage.
	stages, err := ParseDockerfile(strings.NewReader("FROM scratch AS base\nCOPY r/ /\nUSER 1:1\nCMD [\"x\"]\n" +
		"FROM base AS a\nENTRYPOINT [\"/a\"]\nFROM base AS b\nCMD [\"y\"]\nENTRYPOINT [\"/b\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := stages["a"]; a.User != "1:1" || len(a.Copies) != 1 || a.Cmd != nil {
		t.Errorf("stage a: %+v", a)
	}
	if b := stages["b"]; len(b.Cmd) != 1 || b.Cmd[0] != "y" {
		t.Errorf("stage b: %+v", b)
	}
}
