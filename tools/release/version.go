package release

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// releaseVersion is a release's version: vMAJOR.MINOR.PATCH, with an optional pre-release
// -rc.N for release candidates; no other suffix, no build metadata.
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-rc\.(0|[1-9][0-9]*))?$`)

// CheckVersion refuses a release version that is not vX.Y.Z (or a candidate vX.Y.Z-rc.N) or that
// does not belong to the VERSION file's next version: the file holds vX.Y.Z-dev between releases
// and vX.Y.Z when the release is cut, and version must be vX.Y.Z or one of its candidates.
func CheckVersion(version, versionFile string) error {
	if !releaseVersion.MatchString(version) {
		return fmt.Errorf("VERSION=%q is not a release version: want vX.Y.Z (or a candidate vX.Y.Z-rc.N)", version)
	}
	next := strings.TrimSuffix(strings.TrimSpace(versionFile), "-dev")
	if !releaseVersion.MatchString(next) {
		return fmt.Errorf("the VERSION file holds %q: want vX.Y.Z or vX.Y.Z-dev", strings.TrimSpace(versionFile))
	}
	if core(version) != next {
		return fmt.Errorf("VERSION=%s differs from the VERSION file's %s: set the file to %s first (docs/releasing.md)", version, strings.TrimSpace(versionFile), core(version))
	}
	return nil
}

// core is vX.Y.Z of a version, without its pre-release.
func core(version string) string {
	c, _, _ := strings.Cut(version, "-")
	return c
}

// ChartVersion is the chart version of a release version: the same without the leading v
// (Helm's chart versions are plain SemVer 2).
func ChartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// changelogHeading is a version's heading in CHANGELOG.md: "## v0.1.0", optionally followed by
// " - 2026-12-06", a commit, or both, in any order after a dash.
var changelogHeading = regexp.MustCompile(`^##\s+\[?(v[0-9][^\]\s]*|Unreleased)\]?(\s.*)?$`)

// ReleaseNotes returns the section of changelog for version: its heading line and everything up
// to the next version's heading. A release candidate's notes are those of its version.
func ReleaseNotes(changelog, version string) (string, error) {
	want := core(version)
	var out []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(changelog))
	for sc.Scan() {
		line := sc.Text()
		if m := changelogHeading.FindStringSubmatch(line); m != nil {
			if in {
				break
			}
			in = m[1] == want
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return "", fmt.Errorf("CHANGELOG.md has no section \"## %s\": write the release's notes there first", want)
	}
	notes := strings.TrimSpace(strings.Join(out, "\n"))
	if strings.Count(notes, "\n") < 1 {
		return "", fmt.Errorf("CHANGELOG.md's section %s is empty", want)
	}
	return notes + "\n", nil
}

// WriteChecksums writes SHA256SUMS in dir: one "<sha256>  <name>" line per file in dir (not in
// its folders), sorted by name, as sha256sum -c reads it.
func WriteChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "SHA256SUMS" {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
