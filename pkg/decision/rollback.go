package decision

import (
	"fmt"
	"slices"
	"strings"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// rollbackCommits are the commits spec.rollback rolls back to, by canonical Source.
func rollbackCommits(rb *magosv1.RolloutRollback) map[Source]string {
	if rb == nil {
		return nil
	}
	out := make(map[Source]string, len(rb.Commits))
	for _, c := range rb.Commits {
		out[SourceOf(c.RepoURL, c.TargetRevision)] = c.Commit
	}
	return out
}

// rollbackSummary names the commits of a rollback for messages: "commit abc123def456", or "3
// commits" for several sources.
func rollbackSummary(rb *magosv1.RolloutRollback) string {
	if len(rb.Commits) == 1 {
		return fmt.Sprintf("commit %.12s", rb.Commits[0].Commit)
	}
	return fmt.Sprintf("%d commits", len(rb.Commits))
}

// RollbackTargets are the commits a rollback of the Project's Rollout goes back to when none is
// named: for every source its members track, the newest commit that every member of the source
// that applied anything had applied, other than the commit the Rollout rolls out now (rolling,
// the Rollout's status.revisions). With to set, the commit to (a full SHA, or a prefix of at
// least 7 characters naming one commit) for the sources whose members applied it, and no other.
// A source without such a commit is left out; none at all is an error saying why.
func RollbackTargets(in Input, rolling []magosv1.RolloutRevision, to string) ([]magosv1.RollbackCommit, error) {
	bySource := map[Source][]*Workspace{}
	var sources []Source
	for i := range in.Workspaces {
		w := &in.Workspaces[i]
		if !w.MemberOf(in.Namespace, in.Project) || w.Source.RepoURL == "" || len(w.Applied) == 0 {
			continue
		}
		if _, ok := in.Clusters[w.Key.Cluster]; !ok {
			continue
		}
		if _, ok := bySource[w.Source]; !ok {
			sources = append(sources, w.Source)
		}
		bySource[w.Source] = append(bySource[w.Source], w)
	}
	slices.SortFunc(sources, func(a, b Source) int { return strings.Compare(a.RepoURL+"@"+a.Ref, b.RepoURL+"@"+b.Ref) })
	if len(sources) == 0 {
		return nil, fmt.Errorf("no Workspace of project %s/%s has applied a commit yet: there is nothing to roll back to", in.Namespace, in.Project)
	}
	var out []magosv1.RollbackCommit
	var why []string
	for _, src := range sources {
		ws := bySource[src]
		current := revisionOf(rolling, src)
		// Candidates: the first member's applied commits, newest first.
		var found string
		for _, c := range slices.Backward(ws[0].Applied) {
			if to != "" && !matchesCommit(c, to) || to == "" && c == current {
				continue
			}
			if to != "" || slices.IndexFunc(ws, func(w *Workspace) bool { return !slices.Contains(w.Applied, c) }) < 0 {
				found = c
				break
			}
		}
		if to != "" && found == "" {
			// Another member may have applied it even if the first did not.
			for _, w := range ws[1:] {
				if i := slices.IndexFunc(w.Applied, func(c string) bool { return matchesCommit(c, to) }); i >= 0 {
					found = w.Applied[i]
					break
				}
			}
		}
		if found == "" {
			if to == "" {
				why = append(why, fmt.Sprintf("%s@%s: no commit other than %.12s was applied by all %d of its Workspaces", src.RepoURL, src.Ref, current, len(ws)))
			}
			continue
		}
		out = append(out, magosv1.RollbackCommit{RepoURL: ws[0].SourceRepoURL(), TargetRevision: ws[0].SourceRef(), Commit: found})
	}
	if len(out) == 0 {
		if to != "" {
			return nil, fmt.Errorf("no Workspace of project %s/%s applied a commit %q", in.Namespace, in.Project, to)
		}
		return nil, fmt.Errorf("nothing to roll back to: %s", strings.Join(why, "; "))
	}
	return out, nil
}

// matchesCommit reports whether the commit is to, or starts with it (at least 7 characters).
func matchesCommit(commit, to string) bool {
	to = strings.ToLower(to)
	return commit == to || len(to) >= 7 && strings.HasPrefix(commit, to)
}

// SourceRepoURL and SourceRef are the repository and ref as the Workspace writes them (its
// Spelling, split at its last '@').
func (w *Workspace) SourceRepoURL() string {
	if i := strings.LastIndex(w.Spelling, "@"); i >= 0 {
		return w.Spelling[:i]
	}
	return w.Source.RepoURL
}

// SourceRef: see SourceRepoURL.
func (w *Workspace) SourceRef() string {
	if i := strings.LastIndex(w.Spelling, "@"); i >= 0 {
		return w.Spelling[i+1:]
	}
	return w.Source.Ref
}
