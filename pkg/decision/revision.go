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
	// seen is the latest time an agent's poll saw the ref at the commit, on the hub's clock (the
	// agent's detected-at less its cluster's ClockOffset; zero: no timed report).
	seen time.Time
	// inFlight is true when a run of some member is planning or applying the commit.
	inFlight bool
	// count is how many members report the commit.
	count int
}

// fleetRevisions decides, for every Source the members track, the commit the Rollout rolls
// out, starting from the revisions the Rollout recorded before (prev). A Source is canonical
// (SourceOf): members spelling one repository and ref differently roll out one commit, and the
// revision lists their spellings when there are several.
//
// The members' own order comes first (see precedence): a commit that some member applied or saw
// before another reported commit, with no member having seen them the other way round, is
// superseded: it is never adopted, and a recorded commit that is superseded is replaced. So a
// Rollout that lost its record (deleted and created again, restored from a backup) never takes
// a region back to a commit it moved past, whichever commit most members still report.
//
// Otherwise a Source without a recorded commit adopts the best report of its members (see
// better), and a recorded commit is replaced only by a commit that an agent saw at the ref later
// than the recorded commit was seen there: a detected revision with a detection time. Detection
// times are read on the hub's clock (less the cluster's ClockOffset), so no agent's clock
// decides which is later. Reports
// without a time (the commit a run resolved itself, the commit last applied) never replace a
// recorded commit, so a region whose agent has not polled yet can never turn the Rollout back to
// an older commit, and whichever region polls first, the new commit rolls out in step order.
// Sources no member tracks any more are forgotten. A member whose destroy waits for its grant
// reports nothing: it rolls out no commit. The result is sorted by repository and ref.
func fleetRevisions(prev []magosv1.RolloutRevision, ms []member, now time.Time) []magosv1.RolloutRevision {
	reports := map[Source]map[string]*report{}
	spellings := map[Source][]string{}
	orders := map[Source]precedence{}
	for i := range ms {
		w := ms[i].ws
		if w.Source.RepoURL == "" {
			continue
		}
		if sp := spellings[w.Source]; !slices.Contains(sp, w.Spelling) {
			spellings[w.Source] = append(sp, w.Spelling)
		}
		if len(w.Order) > 1 {
			p := orders[w.Source]
			if p == nil {
				p = precedence{}
				orders[w.Source] = p
			}
			p.add(w.Order)
		}
		commit, seen := w.Reported()
		if commit == "" || w.DestroyPending() {
			continue
		}
		if !seen.IsZero() {
			seen = seen.Add(-ms[i].clockOffset) // on the hub's clock
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
		// A revision recorded before sources were canonical is found under its canonical form.
		recorded[SourceOf(r.RepoURL, r.TargetRevision)] = r
	}

	out := make([]magosv1.RolloutRevision, 0, len(reports))
	for src, byCommit := range reports {
		rev, known := recorded[SourceOf(src.RepoURL, src.Ref)]
		order := orders[src]
		candidates := make([]string, 0, len(byCommit)+1)
		for c := range byCommit {
			candidates = append(candidates, c)
		}
		if known && !slices.Contains(candidates, rev.Commit) {
			candidates = append(candidates, rev.Commit)
		}
		live := make([]*report, 0, len(byCommit))
		for _, r := range byCommit {
			if !order.superseded(r.commit, candidates) {
				live = append(live, r)
			}
		}
		if len(live) == 0 {
			// The members saw the commits in contradicting orders (a ref moved back that
			// only some agents saw yet): no order, as without any.
			for _, r := range byCommit {
				live = append(live, r)
			}
		}
		// A recorded commit that a member moved past is replaced by the best commit that
		// no member moved past, whatever its detection time.
		replaceAny := known && order.superseded(rev.Commit, candidates)
		var best *report
		for _, r := range live {
			if known && !replaceAny && !newer(r, rev) {
				continue
			}
			if r.commit == rev.Commit && replaceAny {
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
			rev.RepoURL, rev.TargetRevision = src.RepoURL, src.Ref
			rev.Spellings = nil
			if sp := spellings[src]; len(sp) > 1 {
				rev.Spellings = slices.Sorted(slices.Values(sp))
				if len(rev.Spellings) > maxSpellings {
					rev.Spellings = rev.Spellings[:maxSpellings]
				}
			}
			out = append(out, rev)
		}
	}
	slices.SortFunc(out, func(a, b magosv1.RolloutRevision) int {
		return cmp.Or(cmp.Compare(a.RepoURL, b.RepoURL), cmp.Compare(a.TargetRevision, b.TargetRevision))
	})
	return out
}

// maxSpellings is how many spellings of one source a revision lists (the API's MaxItems).
const maxSpellings = 20

// precedence is what the members of one Source say of the order of its commits: {x, y} is
// present when some member applied or saw x before y (Workspace.Order: its own sequence, which
// no clock decides).
type precedence map[[2]string]bool

// add records the order of one member's commits.
func (p precedence) add(order []string) {
	for i, x := range order {
		for _, y := range order[i+1:] {
			if x != y {
				p[[2]string{x, y}] = true
			}
		}
	}
}

// superseded reports whether some member saw commit x before another of the candidates, and no
// member saw them the other way round: x is behind that commit.
func (p precedence) superseded(x string, candidates []string) bool {
	for _, y := range candidates {
		if y != x && p[[2]string{x, y}] && !p[[2]string{y, x}] {
			return true
		}
	}
	return false
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
