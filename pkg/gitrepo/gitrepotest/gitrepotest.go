// Package gitrepotest makes real git repositories on disk for tests (with go-git): commits on
// branches, lightweight and annotated tags. Tests clone them over file:// or as local paths.
package gitrepotest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Repo is a repository in a test's temporary folder, with a worktree, default branch main.
type Repo struct {
	// Dir is the repository's folder (a plain local path the runner can clone).
	Dir  string
	repo *git.Repository
	when time.Time
}

// New creates an empty repository whose HEAD is refs/heads/main.
func New(t testing.TB) *Repo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		InitOptions: git.InitOptions{DefaultBranch: plumbing.Main},
	})
	if err != nil {
		t.Fatalf("creating test repository: %v", err)
	}
	return &Repo{Dir: dir, repo: repo, when: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// URL is the repository's file:// URL.
func (r *Repo) URL() string { return "file://" + r.Dir }

// Commit writes files (path -> content; an empty content deletes the file) on the current
// branch and commits them, returning the commit SHA.
func (r *Repo) Commit(t testing.TB, message string, files map[string]string) string {
	t.Helper()
	tree, err := r.repo.Worktree()
	if err != nil {
		t.Fatalf("opening worktree: %v", err)
	}
	for path, content := range files {
		full := filepath.Join(r.Dir, path)
		if content == "" {
			if _, err := tree.Remove(path); err != nil {
				t.Fatalf("removing %s: %v", path, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatalf("creating folder for %s: %v", path, err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatalf("writing %s: %v", path, err)
		}
		if _, err := tree.Add(path); err != nil {
			t.Fatalf("adding %s: %v", path, err)
		}
	}
	r.when = r.when.Add(time.Minute)
	sha, err := tree.Commit(message, &git.CommitOptions{
		Author:            r.signature(),
		AllowEmptyCommits: true,
	})
	if err != nil {
		t.Fatalf("committing %q: %v", message, err)
	}
	return sha.String()
}

// Symlink commits a symbolic link at path pointing to target, returning the commit SHA.
func (r *Repo) Symlink(t testing.TB, path, target string) string {
	t.Helper()
	tree, err := r.repo.Worktree()
	if err != nil {
		t.Fatalf("opening worktree: %v", err)
	}
	full := filepath.Join(r.Dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatalf("creating folder for %s: %v", path, err)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatalf("creating symlink %s: %v", path, err)
	}
	if _, err := tree.Add(path); err != nil {
		t.Fatalf("adding %s: %v", path, err)
	}
	r.when = r.when.Add(time.Minute)
	sha, err := tree.Commit("link "+path, &git.CommitOptions{Author: r.signature()})
	if err != nil {
		t.Fatalf("committing %s: %v", path, err)
	}
	return sha.String()
}

// Switch checks out branch, creating it at the current commit when it does not exist.
func (r *Repo) Switch(t testing.TB, branch string) {
	t.Helper()
	tree, err := r.repo.Worktree()
	if err != nil {
		t.Fatalf("opening worktree: %v", err)
	}
	name := plumbing.NewBranchReferenceName(branch)
	_, err = r.repo.Reference(name, false)
	create := err != nil
	if err := tree.Checkout(&git.CheckoutOptions{Branch: name, Create: create, Keep: false}); err != nil {
		t.Fatalf("switching to branch %s: %v", branch, err)
	}
}

// Tag tags sha: annotated with a message when annotated, else lightweight.
func (r *Repo) Tag(t testing.TB, name, sha string, annotated bool) {
	t.Helper()
	var opts *git.CreateTagOptions
	if annotated {
		opts = &git.CreateTagOptions{Tagger: r.signature(), Message: "release " + name}
	}
	if _, err := r.repo.CreateTag(name, plumbing.NewHash(sha), opts); err != nil {
		t.Fatalf("tagging %s: %v", name, err)
	}
}

// TagObject returns the hash of an annotated tag's own object (not its commit).
func (r *Repo) TagObject(t testing.TB, name string) string {
	t.Helper()
	ref, err := r.repo.Tag(name)
	if err != nil {
		t.Fatalf("reading tag %s: %v", name, err)
	}
	return ref.Hash().String()
}

func (r *Repo) signature() *object.Signature {
	return &object.Signature{Name: "Magos Test", Email: "test@magos.invalid", When: r.when}
}
