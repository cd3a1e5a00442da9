package gitrepo_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
)

// history is a repository with: main c1 -> c2 -> c3 (HEAD); branch feature from c2 -> f1;
// lightweight tag v1 at c1; annotated tag v2 at c2; a branch and a tag both named "dup".
type history struct {
	repo                *gitrepotest.Repo
	c1, c2, c3, f1, dup string
}

func newHistory(t *testing.T) history {
	t.Helper()
	r := gitrepotest.New(t)
	h := history{repo: r}
	h.c1 = r.Commit(t, "one", map[string]string{"main.tf": "# one\n"})
	h.c2 = r.Commit(t, "two", map[string]string{"main.tf": "# two\n"})
	r.Switch(t, "feature")
	h.f1 = r.Commit(t, "feature", map[string]string{"feature.tf": "# feature\n"})
	r.Switch(t, "main")
	h.c3 = r.Commit(t, "three", map[string]string{"main.tf": "# three\n", "sub/dir/x.txt": "x\n"})
	r.Tag(t, "v1", h.c1, false)
	r.Tag(t, "v2", h.c2, true)
	r.Switch(t, "dup")
	h.dup = r.Commit(t, "dup branch", nil)
	r.Switch(t, "main")
	r.Tag(t, "dup", h.c1, false)
	return h
}

func TestResolve(t *testing.T) {
	h := newHistory(t)
	ctx := context.Background()
	tests := []struct {
		name, url, ref, want, wantErr string
	}{
		{name: "empty ref is remote HEAD", url: h.repo.URL(), ref: "", want: h.c3},
		{name: "HEAD", url: h.repo.URL(), ref: "HEAD", want: h.c3},
		{name: "default branch", url: h.repo.URL(), ref: "main", want: h.c3},
		{name: "other branch", url: h.repo.URL(), ref: "feature", want: h.f1},
		{name: "plain local path", url: h.repo.Dir, ref: "feature", want: h.f1},
		{name: "lightweight tag", url: h.repo.URL(), ref: "v1", want: h.c1},
		{name: "annotated tag is peeled to its commit", url: h.repo.URL(), ref: "v2", want: h.c2},
		{name: "branch wins over tag of the same name", url: h.repo.URL(), ref: "dup", want: h.dup},
		{name: "full ref name", url: h.repo.URL(), ref: "refs/tags/dup", want: h.c1},
		{name: "full branch ref name", url: h.repo.URL(), ref: "refs/heads/feature", want: h.f1},
		{name: "pinned SHA is lower-cased, no network", url: "file:///does/not/exist", ref: strings.ToUpper(h.c2), want: h.c2},
		{name: "missing ref", url: h.repo.URL(), ref: "nope", wantErr: `ref "nope" not found (tried branch refs/heads/nope, tag refs/tags/nope and ref nope`},
		{name: "short SHA is not a SHA", url: h.repo.URL(), ref: h.c2[:12], wantErr: "not found"},
		{name: "missing repository", url: "file://" + filepath.Join(t.TempDir(), "missing"), ref: "main", wantErr: "listing the refs of repository file://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gitrepo.Resolve(ctx, gitrepo.ResolveOptions{URL: tt.url, Ref: tt.ref})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve(%q) = %q, %v; want error containing %q", tt.ref, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
			}
		})
	}
}

func TestCheckout(t *testing.T) {
	h := newHistory(t)
	ctx := context.Background()
	tests := []struct {
		name, url, revision string
		wantFile, wantText  string // a file the commit has, and its content
		wantMissing         string // a file the commit does not have
		wantErr             string
	}{
		{name: "tip of main", url: h.repo.URL(), revision: h.c3, wantFile: "sub/dir/x.txt", wantText: "x\n"},
		{name: "older commit of main", url: h.repo.URL(), revision: h.c1, wantFile: "main.tf", wantText: "# one\n", wantMissing: "sub/dir/x.txt"},
		{name: "commit of another branch", url: h.repo.URL(), revision: h.f1, wantFile: "feature.tf", wantText: "# feature\n", wantMissing: "sub"},
		{name: "annotated tag's commit, plain path", url: h.repo.Dir, revision: h.c2, wantFile: "main.tf", wantText: "# two\n", wantMissing: "feature.tf"},
		{name: "upper-case SHA", url: h.repo.URL(), revision: strings.ToUpper(h.c1), wantFile: "main.tf", wantText: "# one\n"},
		{name: "unknown commit", url: h.repo.URL(), revision: strings.Repeat("ab", 20), wantErr: "commit abababababababababababababababababababab is on no branch or tag"},
		{name: "not a SHA", url: h.repo.URL(), revision: "main", wantErr: `revision "main" is not a commit SHA`},
		{name: "missing repository", url: filepath.Join(t.TempDir(), "missing"), revision: h.c1, wantErr: "fetching repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "clone")
			err := gitrepo.Checkout(ctx, gitrepo.CheckoutOptions{URL: tt.url, Revision: tt.revision, Dir: dir})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Checkout = %v; want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Checkout: %v", err)
			}
			got, err := os.ReadFile(filepath.Join(dir, tt.wantFile))
			if err != nil || string(got) != tt.wantText {
				t.Fatalf("%s = %q, %v; want %q", tt.wantFile, got, err, tt.wantText)
			}
			if tt.wantMissing != "" {
				if _, err := os.Stat(filepath.Join(dir, tt.wantMissing)); !os.IsNotExist(err) {
					t.Fatalf("%s exists in the checkout of %s (err %v); want it absent", tt.wantMissing, tt.revision, err)
				}
			}
		})
	}
}

func TestAuthFromEnv(t *testing.T) {
	t.Setenv(gitrepo.EnvUsername, "u")
	t.Setenv(gitrepo.EnvPassword, "p")
	t.Setenv(gitrepo.EnvSSHPrivateKey, "key")
	t.Setenv(gitrepo.EnvSSHKnownHosts, "hosts")
	got := gitrepo.AuthFromEnv()
	if got.Username != "u" || got.Password != "p" || string(got.SSHPrivateKey) != "key" || string(got.SSHKnownHosts) != "hosts" {
		t.Fatalf("AuthFromEnv() = %+v", got)
	}
}
