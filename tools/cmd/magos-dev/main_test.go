package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpRefusesAUsersFolder: magos-dev up --dir on a folder it did not make (a user's work)
// stops before starting anything, says why, and deletes nothing.
func TestUpRefusesAUsersFolder(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(work, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Cancelled: should the refusal not come first, nothing starts for long.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := run(ctx, []string{"up", "--dir", dir})
	if err == nil || !strings.Contains(err.Error(), "--dir") || !strings.Contains(err.Error(), "refusing to empty it") {
		t.Fatalf("magos-dev up --dir %s: %v, want a refusal to empty it", dir, err)
	}
	if got, err := os.ReadFile(work); err != nil || string(got) != "mine" {
		t.Errorf("notes.txt after magos-dev up: %q, %v", got, err)
	}
}
