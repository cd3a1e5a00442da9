package realnode

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// The upgrade test's checkers, on ledgers made up to break each rule: they need no nodes, and
// run wherever the package's tests do.

var t0 = time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// apply is a succeeded apply Job of label at commit sha, created at c and running from s to f
// (seconds after t0), by an agent whose runner image has tag.
func apply(label, sha, run string, c, s, f int, tag string) applyRecord {
	cluster, ws, _ := strings.Cut(label, "/")
	return applyRecord{Label: label, Cluster: cluster, Workspace: ws, Job: ws + "-apply-" + run, RunID: run, Revision: sha,
		Runner: "magos-runner:" + tag, Created: at(c), Started: at(s), Finished: at(f), Succeeded: true, Pods: 1}
}

var testSteps = [][]string{{"s1/a", "s1/b"}, {"s2/a"}}

func goodLedger() []applyRecord {
	return []applyRecord{
		apply("s1/a", "B", "r1", 0, 1, 5, "old"),
		apply("s1/b", "B", "r2", 6, 7, 10, "new"),
		apply("s2/a", "B", "r3", 11, 12, 15, "old"),
	}
}

func TestCheckApplyLedger(t *testing.T) {
	if v := checkApplyLedger(goodLedger(), testSteps, []string{"B"}); len(v) != 0 {
		t.Fatalf("an in-order ledger: %v", v)
	}
	for _, c := range []struct {
		name   string
		ledger func([]applyRecord) []applyRecord
		want   string
	}{
		{"applied twice", func(l []applyRecord) []applyRecord { return append(l, apply("s1/a", "B", "r9", 16, 17, 18, "new")) }, "applied B 2 times"},
		{"a later step before an earlier one finished", func(l []applyRecord) []applyRecord { l[2].Started = at(9); return l }, "before s1/b (an earlier step) finished"},
		{"never applied", func(l []applyRecord) []applyRecord { return l[:2] }, "s2/a never applied B"},
		{"a second Pod", func(l []applyRecord) []applyRecord { l[0].Pods = 2; return l }, "ran 2 Pods"},
		{"not finished", func(l []applyRecord) []applyRecord { l[2].Finished, l[2].Succeeded = time.Time{}, false; return l }, "finished false"},
		{"a commit not rolled out", func(l []applyRecord) []applyRecord { return append(l, apply("s2/a", "C", "r8", 16, 17, 18, "new")) }, "a commit that was not rolled out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := checkApplyLedger(c.ledger(goodLedger()), testSteps, []string{"B"})
			if !strings.Contains(strings.Join(v, "\n"), c.want) {
				t.Fatalf("want a violation saying %q, got %v", c.want, v)
			}
		})
	}
}

func TestCheckRunsAccounted(t *testing.T) {
	grants := []grantRecord{
		{Cluster: "s1", Workspace: "a", RunID: "r1", Operation: "apply"},
		{Cluster: "s1", Workspace: "b", RunID: "r2", Operation: "apply"},
		{Cluster: "s2", Workspace: "a", RunID: "r3", Operation: "plan"},
		{Cluster: "s2", Workspace: "a", RunID: "r3", Operation: "apply"},
	}
	history := func(phase magosv1.Phase) map[string]*magosv1.Workspace {
		ws := func(runs ...string) *magosv1.Workspace {
			w := &magosv1.Workspace{}
			for _, r := range runs {
				w.Status.Runs = append(w.Status.Runs, magosv1.RunRecord{RunID: r, Phase: magosv1.PhaseApplied, FinishedAt: &metav1.Time{Time: t0}})
			}
			return w
		}
		h := map[string]*magosv1.Workspace{"s1/a": ws("r1"), "s1/b": ws("r2"), "s2/a": ws("r3")}
		h["s2/a"].Status.Runs[0].Phase = phase
		return h
	}
	if v := checkRunsAccounted(grants, history(magosv1.PhaseApplied), goodLedger()); len(v) != 0 {
		t.Fatalf("every run accounted for: %v", v)
	}
	lost := history(magosv1.PhaseApplied)
	lost["s1/b"].Status.Runs = nil
	for _, c := range []struct {
		name    string
		grants  []grantRecord
		history map[string]*magosv1.Workspace
		want    string
	}{
		{"a granted run missing from the history", grants, lost, "run r2 of s1/b, granted by , is not in its run history: lost"},
		{"a run left Applying", grants, history(magosv1.PhaseApplying), "run r3 of s2/a is Applying in its run history: left unfinished"},
		{"an apply of a run never granted", grants[:2], history(magosv1.PhaseApplied), "s2/a ran apply Job a-apply-r3 of run r3, which the hub was not seen granting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := checkRunsAccounted(c.grants, c.history, goodLedger())
			if !strings.Contains(strings.Join(v, "\n"), c.want) {
				t.Fatalf("want a violation saying %q, got %v", c.want, v)
			}
		})
	}
}

func TestCheckMixedPhases(t *testing.T) {
	phases := []upgradePhase{{"agent s1", at(5), at(6)}, {"hub", at(10), at(11)}, {"agent s2", at(14), at(15)}}
	ledger := []applyRecord{
		apply("s1/a", "B", "r1", 1, 2, 8, "old"),
		apply("s1/b", "B", "r2", 8, 8, 9, "new"),    // a new agent, granted by the old hub
		apply("s2/a", "B", "r3", 12, 12, 16, "old"), // an old agent, granted by the new hub
	}
	grants := func() []grantRecord {
		return []grantRecord{
			{Cluster: "s1", Workspace: "a", RunID: "r1", HubImage: "magos-hub:old"},
			{Cluster: "s1", Workspace: "b", RunID: "r2", HubImage: "magos-hub:old"},
			{Cluster: "s2", Workspace: "a", RunID: "r3", Operation: "plan", HubImage: "magos-hub:old"},
			{Cluster: "s2", Workspace: "a", RunID: "r3", HubImage: "magos-hub:new"},
		}
	}
	if v := checkMixedPhases(phases, grants(), ledger, "old", "new", "B"); len(v) != 0 {
		t.Fatalf("both mixed phases applied: %v", v)
	}
	// The hub upgraded before a new agent applied anything: no apply of the first mixed phase.
	g := grants()
	g[1].HubImage = "magos-hub:new"
	if v := checkMixedPhases(phases, g, ledger, "old", "new", "B"); len(v) != 1 || !strings.Contains(v[0], "a new agent against the old hub") {
		t.Fatalf("want the first phase reported, got %v", v)
	}
	// The old hub's plan grant does not count as a grant of the apply.
	g = grants()[:3]
	if v := checkMixedPhases(phases, g, ledger, "old", "new", "B"); len(v) != 1 || !strings.Contains(v[0], "an old agent against the new hub") {
		t.Fatalf("want the second phase reported, got %v", v)
	}
	// Every agent upgraded before the new hub granted an apply.
	l := slices.Clone(ledger)
	l[2].Runner = "magos-runner:new"
	if v := checkMixedPhases(phases, grants(), l, "old", "new", "B"); len(v) != 1 || !strings.Contains(v[0], "an old agent against the new hub") {
		t.Fatalf("want the second phase reported, got %v", v)
	}
	if v := checkMixedPhases(phases[:1], grants(), ledger, "old", "new", "B"); len(v) != 1 {
		t.Fatalf("one upgrade only: want it reported, got %v", v)
	}
}

func TestCheckStoredUnchanged(t *testing.T) {
	ref := objectRef{"Rollout", "default", "fleet"}
	before := map[objectRef]storedObject{ref: {UID: "u1", Generation: 2, Created: "c", Spec: `{"approvals":[{"step":"r2","plans":[]}],"projectRef":"fleet"}`}}
	approval := `{"approvals":[{"step":"r2","plans":[{}]}],"projectRef":"fleet"}`
	for _, c := range []struct {
		name     string
		after    storedObject
		approved bool
		want     string
	}{
		{"unchanged", before[ref], false, ""},
		{"a field dropped", storedObject{UID: "u1", Generation: 2, Created: "c", Spec: `{"approvals":[{"step":"r2","plans":[]}]}`}, false, "reads back changed"},
		{"recreated", storedObject{UID: "u2", Generation: 2, Created: "c", Spec: before[ref].Spec}, false, "is another object"},
		{"a new approval, allowed", storedObject{UID: "u1", Generation: 3, Created: "c", Spec: approval}, true, ""},
		{"a new approval, not allowed", storedObject{UID: "u1", Generation: 3, Created: "c", Spec: approval}, false, "generation 3 after the upgrade, was 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := strings.Join(checkStoredUnchanged(before, map[objectRef]storedObject{ref: c.after}, map[objectRef]bool{ref: c.approved}), "\n")
			if (c.want == "") != (v == "") || !strings.Contains(v, c.want) {
				t.Fatalf("want a violation saying %q, got %q", c.want, v)
			}
		})
	}
}
