package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// ResolveOptions names a ref of a repository.
type ResolveOptions struct {
	// URL of the repository: https://, ssh://, scp-like (git@host:path), file:// or a local path.
	URL string
	// Ref is a branch, a tag, a full ref name, a 40-hex commit SHA, or "" / "HEAD" for the
	// remote's default branch.
	Ref string
	// Auth are the credentials (zero for anonymous access).
	Auth Auth
}

// CheckoutOptions names a commit to check out.
type CheckoutOptions struct {
	// URL of the repository (as in ResolveOptions).
	URL string
	// Revision is the 40-hex SHA of the commit.
	Revision string
	// Dir is the folder to check out into; it must not exist or be empty.
	Dir string
	// Auth are the credentials (zero for anonymous access).
	Auth Auth
}

// IsSHA reports whether s is a full 40-hex commit SHA (either case).
func IsSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// ResolveTimeout bounds a Resolve whose context has no deadline.
const ResolveTimeout = 30 * time.Second

// Resolve returns the commit SHA a ref names, with one ls-remote and no clone, in the order
// upstream's RefWatcher uses: a 40-hex SHA is taken as pinned and returned lower-cased without
// touching the network; "" and "HEAD" name the remote HEAD; otherwise refs/heads/<ref>, then
// refs/tags/<ref> (an annotated tag is peeled to its commit), then <ref> as a full ref name.
// Without a deadline in ctx it gives up after ResolveTimeout.
func Resolve(ctx context.Context, opts ResolveOptions) (string, error) {
	if IsSHA(opts.Ref) {
		return strings.ToLower(opts.Ref), nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ResolveTimeout)
		defer cancel()
	}
	url := redactURL(opts.URL)
	auth, err := opts.Auth.method(opts.URL)
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", url, err)
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{opts.URL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth, PeelingOption: git.AppendPeeled})
	if err != nil {
		return "", fmt.Errorf("listing the refs of repository %s: %w", url, err)
	}
	byName := make(map[string]*plumbing.Reference, len(refs))
	for _, r := range refs {
		byName[r.Name().String()] = r
	}
	// hashOf follows symbolic refs (HEAD -> refs/heads/main) and prefers the peeled commit of
	// an annotated tag.
	hashOf := func(name string) (string, bool) {
		for range 5 {
			if peeled, ok := byName[name+"^{}"]; ok {
				return peeled.Hash().String(), true
			}
			r, ok := byName[name]
			if !ok {
				return "", false
			}
			if r.Type() != plumbing.SymbolicReference {
				return r.Hash().String(), true
			}
			name = r.Target().String()
		}
		return "", false
	}
	if opts.Ref == "" || opts.Ref == "HEAD" {
		if sha, ok := hashOf("HEAD"); ok {
			return sha, nil
		}
		return "", fmt.Errorf("repository %s: no HEAD (the repository is empty or has no default branch)", url)
	}
	tried := []string{"refs/heads/" + opts.Ref, "refs/tags/" + opts.Ref, opts.Ref}
	for _, name := range tried {
		if sha, ok := hashOf(name); ok {
			log.FromContext(ctx).V(1).Info("Resolved git ref", "url", url, "ref", opts.Ref, "as", name, "sha", sha)
			return sha, nil
		}
	}
	return "", fmt.Errorf("repository %s: ref %q not found (tried branch %s, tag %s and ref %s; a commit must be a full 40-hex SHA)",
		url, opts.Ref, tried[0], tried[1], tried[2])
}

// Checkout clones the repository into opts.Dir and checks out exactly opts.Revision (detached).
// It fetches every branch and tag, so any commit reachable from one of them works, however old
// (a shallow clone of the tip would not, upstream's bug). A commit reachable from no branch or
// tag is then fetched by its SHA, which works only where the server allows it (GitHub, GitLab).
func Checkout(ctx context.Context, opts CheckoutOptions) error {
	if !IsSHA(opts.Revision) {
		return fmt.Errorf("revision %q is not a commit SHA: want 40 hex characters", opts.Revision)
	}
	if opts.Dir == "" {
		return errors.New("checkout folder is empty: want a folder to clone into")
	}
	url := redactURL(opts.URL)
	auth, err := opts.Auth.method(opts.URL)
	if err != nil {
		return fmt.Errorf("repository %s: %w", url, err)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return fmt.Errorf("creating checkout folder: %w", err)
	}
	repo, err := git.PlainInit(opts.Dir, false)
	if err != nil {
		return fmt.Errorf("initializing the clone in %s: %w", opts.Dir, err)
	}
	remote, err := repo.CreateRemote(&config.RemoteConfig{
		Name:  "origin",
		URLs:  []string{opts.URL},
		Fetch: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*"},
	})
	if err != nil {
		return fmt.Errorf("configuring the clone: %w", err)
	}
	err = remote.FetchContext(ctx, &git.FetchOptions{
		Auth:     auth,
		RefSpecs: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"},
		Tags:     git.NoTags,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("fetching repository %s: %w", url, err)
	}
	hash := plumbing.NewHash(strings.ToLower(opts.Revision))
	if _, err := repo.CommitObject(hash); err != nil {
		if !errors.Is(err, plumbing.ErrObjectNotFound) {
			return fmt.Errorf("reading commit %s: %w", hash, err)
		}
		// Not on any branch or tag: ask for the commit itself.
		err = remote.FetchContext(ctx, &git.FetchOptions{
			Auth:     auth,
			RefSpecs: []config.RefSpec{config.RefSpec(hash.String() + ":refs/magos/revision")},
			Tags:     git.NoTags,
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return fmt.Errorf("repository %s: commit %s is on no branch or tag, and fetching it by SHA failed: %w", url, hash, err)
		}
		if _, err := repo.CommitObject(hash); err != nil {
			return fmt.Errorf("repository %s: commit %s not found: %w", url, hash, err)
		}
	}
	tree, err := repo.Worktree()
	if err != nil {
		return fmt.Errorf("opening the worktree: %w", err)
	}
	if err := tree.Checkout(&git.CheckoutOptions{Hash: hash, Force: true}); err != nil {
		return fmt.Errorf("checking out commit %s: %w", hash, err)
	}
	return nil
}
