package workspace

import (
	"fmt"
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestRecordApplied: status.appliedRevisions keeps the commits applied from the current source,
// oldest first, each once, at most MaxAppliedRevisions; it starts again for another source
// (however spelled, one source is one list) and starts from the last applied commit where there
// was no list.
func TestRecordApplied(t *testing.T) {
	const src = "example.com/org/infra@main"
	tests := []struct {
		name     string
		repo     string
		ref      string
		observed string
		before   *magosv1.AppliedRevisions
		commit   string
		want     *magosv1.AppliedRevisions
	}{
		{"first apply", "https://example.com/org/infra", "main", "", nil, "c1",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c1"}}},
		{"no list yet: starts from the commit applied before", "https://example.com/org/infra", "main", "c0", nil, "c1",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c0", "c1"}}},
		{"appended", "https://example.com/org/infra.git", "refs/heads/main", "c1",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c0", "c1"}}, "c2",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c0", "c1", "c2"}}},
		{"the same commit again stays last", "https://example.com/org/infra", "main", "c2",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c1", "c2"}}, "c2",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c1", "c2"}}},
		{"a commit applied again moves to the end", "https://example.com/org/infra", "main", "c2",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c1", "c2"}}, "c1",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c2", "c1"}}},
		{"another source starts again", "https://example.com/org/infra", "release", "c2",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c1", "c2"}}, "r1",
			&magosv1.AppliedRevisions{Source: "example.com/org/infra@release", Commits: []string{"r1"}}},
		{"at most 10, the oldest dropped", "https://example.com/org/infra", "main", "c9",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"}}, "c10",
			&magosv1.AppliedRevisions{Source: src, Commits: []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := &magosv1.Workspace{}
			ws.Spec.Source = magosv1.Source{RepoURL: tt.repo, TargetRevision: tt.ref}
			ws.Status.ObservedRevision = tt.observed
			ws.Status.AppliedRevisions = tt.before.DeepCopy()
			recordApplied(ws, tt.commit)
			if fmt.Sprint(ws.Status.AppliedRevisions) != fmt.Sprint(tt.want) {
				t.Fatalf("appliedRevisions %+v, want %+v", ws.Status.AppliedRevisions, tt.want)
			}
			if tt.before != nil && len(tt.before.Commits) > 0 && &tt.before.Commits[0] == &ws.Status.AppliedRevisions.Commits[0] {
				t.Fatal("recordApplied changed the list in place")
			}
		})
	}
}
