package decision

import (
	"cmp"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// report is what the members tracking one Source say about one commit.
type report struct {
	commit string
	// seen is the latest time an agent's poll saw the ref at the commit (zero: no timed report).
	seen time.Time
	// inFlight is true when a run of some member is planning or applying the commit.
	inFlight bool
	// count is how many members report the commit.
	count int
}

// fleetRevisions decides, for every Source the members track, the commit the Rollout rolls
// out, starting from the revisions the Rollout recorded before (prev). A Source without a
// recorded commit adopts the best report of its members (see better). A recorded commit is
// replaced only by a commit that an agent saw at the ref later than the recorded commit was
// seen there: a detected revision with a detection time. Reports without a time (the commit a
// run resolved itself, the commit last applied) never replace a recorded commit, so a region
// whose agent has not polled yet can never turn the Rollout back to an older commit, and
// whichever region polls first, the new commit rolls out in step order. Sources no member
// tracks any more are forgotten. A member whose destroy waits for its grant reports nothing: it
// rolls out no commit. The result is sorted by repository and ref.
func fleetRevisions(prev []magosv1.RolloutRevision, ms []member, now time.Time) []magosv1.RolloutRevision {
	reports := map[Source]map[string]*report{}
	for i := range ms {
		w := ms[i].ws
		commit, seen := w.Reported()
		if commit == "" || w.Source.RepoURL == "" || w.DestroyPending() {
			continue
		}
		byCommit := reports[w.Source]
		if byCommit == nil {
			byCommit = map[string]*report{}
			reports[w.Source] = byCommit
		}
		r := byCommit[commit]
		if r == nil {
			r = &report{commit: commit}
			byCommit[commit] = r
		}
		r.count++
		r.inFlight = r.inFlight || (w.InFlight() && commit == w.CurrentRevision)
		if seen.After(r.seen) {
			r.seen = seen
		}
	}
	recorded := make(map[Source]magosv1.RolloutRevision, len(prev))
	for _, r := range prev {
		recorded[Source{RepoURL: r.RepoURL, Ref: r.TargetRevision}] = r
	}

	out := make([]magosv1.RolloutRevision, 0, len(reports))
	for src, byCommit := range reports {
		rev, known := recorded[src]
		var best *report
		for _, r := range byCommit {
			if known && !newer(r, rev) {
				continue
			}
			if best == nil || better(r, best) {
				best = r
			}
		}
		if best != nil {
			rev = magosv1.RolloutRevision{
				RepoURL: src.RepoURL, TargetRevision: src.Ref, Commit: best.commit,
				Since: metav1.NewTime(now),
			}
			if !best.seen.IsZero() {
				rev.DetectedAt = &metav1.Time{Time: best.seen}
			}
		}
		if rev.Commit != "" {
			out = append(out, rev)
		}
	}
	slices.SortFunc(out, func(a, b magosv1.RolloutRevision) int {
		return cmp.Or(cmp.Compare(a.RepoURL, b.RepoURL), cmp.Compare(a.TargetRevision, b.TargetRevision))
	})
	return out
}

// newer reports whether r replaces the recorded revision rev: another commit, seen at the ref
// by an agent's poll after rev's commit was.
func newer(r *report, rev magosv1.RolloutRevision) bool {
	if r.commit == rev.Commit || r.seen.IsZero() {
		return false
	}
	return rev.DetectedAt == nil || r.seen.After(rev.DetectedAt.Time)
}

// better orders candidate commits: seen at the ref most recently; then one a run is planning
// or applying; then the one most members report; then the smallest SHA, so the choice never
// depends on map order.
func better(a, b *report) bool {
	if !a.seen.Equal(b.seen) {
		return a.seen.After(b.seen)
	}
	if a.inFlight != b.inFlight {
		return a.inFlight
	}
	if a.count != b.count {
		return a.count > b.count
	}
	return a.commit < b.commit
}

// revisionOf returns the commit the Rollout rolls out for a Source ("" when unknown).
func revisionOf(revs []magosv1.RolloutRevision, src Source) string {
	i, ok := slices.BinarySearchFunc(revs, src, func(r magosv1.RolloutRevision, s Source) int {
		return cmp.Or(cmp.Compare(r.RepoURL, s.RepoURL), cmp.Compare(r.TargetRevision, s.Ref))
	})
	if !ok {
		return ""
	}
	return revs[i].Commit
}
