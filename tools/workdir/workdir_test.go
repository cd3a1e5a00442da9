package workdir_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/magosfleet/magos/tools/workdir"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestPrepareRefusesAForeignFolder: a folder that holds something and no marker (a user's
// work) is refused with an error that says why and what to do, and every file in it stays.
func TestPrepareRefusesAForeignFolder(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "thesis.tex"), "years of work")
	write(t, filepath.Join(dir, "src", "main.go"), "package main")
	err := workdir.Prepare(dir, "magos-dev up")
	if err == nil {
		t.Fatal("Prepare emptied a folder it did not make")
	}
	for _, want := range []string{dir, "not empty", workdir.Marker, "choose a new or empty folder"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dir, "thesis.tex")); err != nil || string(got) != "years of work" {
		t.Errorf("thesis.tex after the refusal: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "src", "main.go")); err != nil {
		t.Errorf("src/main.go after the refusal: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, workdir.Marker)); err == nil {
		t.Error("the refused folder was marked: the next run would empty it")
	}
}

// TestPrepareEmptiesAMarkedFolder: a folder a tool made (it holds the marker) is emptied and
// stays marked.
func TestPrepareEmptiesAMarkedFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	if err := workdir.Prepare(dir, "magos-dev up"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "hub.kubeconfig"), "old")
	write(t, filepath.Join(dir, "logs", "hub.log"), "old")
	if err := workdir.Prepare(dir, "magos-dev demo"); err != nil {
		t.Fatalf("Prepare of a folder it made: %v", err)
	}
	if got := names(t, dir); len(got) != 1 || got[0] != workdir.Marker {
		t.Errorf("after Prepare the marked folder holds %v, want only %s", got, workdir.Marker)
	}
	if note, _ := os.ReadFile(filepath.Join(dir, workdir.Marker)); !strings.Contains(string(note), "magos-dev demo") {
		t.Errorf("marker %q does not say what made the folder", note)
	}
}

// TestPrepareUsesAMissingOrEmptyFolder: a missing folder is created, an empty one used, and
// both are marked.
func TestPrepareUsesAMissingOrEmptyFolder(t *testing.T) {
	for name, dir := range map[string]string{"missing": filepath.Join(t.TempDir(), "a", "b"), "empty": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			if err := workdir.Prepare(dir, "magos-dev up"); err != nil {
				t.Fatal(err)
			}
			if got := names(t, dir); len(got) != 1 || got[0] != workdir.Marker {
				t.Errorf("the folder holds %v, want only %s", got, workdir.Marker)
			}
		})
	}
}

// TestPrepareDoesNotTrustAMarkerFolder: a folder named like the marker is no marker.
func TestPrepareDoesNotTrustAMarkerFolder(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, workdir.Marker, "keep"), "mine")
	write(t, filepath.Join(dir, "work.txt"), "mine")
	if err := workdir.Prepare(dir, "magos-dev up"); err == nil {
		t.Fatal("Prepare emptied a folder whose marker is a directory")
	}
	if _, err := os.Stat(filepath.Join(dir, "work.txt")); err != nil {
		t.Errorf("work.txt: %v", err)
	}
}

// TestClaimMarksOurOwnCacheFolder: Claim marks a folder without looking inside (magos-dev's
// default folder in Magos's cache, filled by an earlier version without a marker), after which
// Prepare empties it; a marker already there is kept as it is.
func TestClaimMarksOurOwnCacheFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	write(t, filepath.Join(dir, "hub.kubeconfig"), "old")
	if err := workdir.Claim(dir, "magos-dev up"); err != nil {
		t.Fatal(err)
	}
	if err := workdir.Prepare(dir, "magos-dev up"); err != nil {
		t.Fatalf("Prepare after Claim: %v", err)
	}
	if got := names(t, dir); len(got) != 1 || got[0] != workdir.Marker {
		t.Fatalf("after Claim and Prepare the folder holds %v, want only %s", got, workdir.Marker)
	}
}
