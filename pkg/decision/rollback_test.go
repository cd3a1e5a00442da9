package decision

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

const (
	oldCommit = "1111111111111111111111111111111111111111" // rolled back to
	newCommit = "2222222222222222222222222222222222222222" // rolled back from
)

// atCommit makes the Workspace Applied at commit, having applied oldCommit then newCommit.
func atCommit(commit string) wsOpt {
	return func(w *Workspace) {
		w.Phase, w.Reason, w.ObservedGeneration = magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, w.Generation
		w.ObservedRevision, w.CurrentRevision = commit, commit
		w.Applied = []string{oldCommit, newCommit}
		if commit == oldCommit {
			w.Applied = []string{newCommit, oldCommit}
		}
		w.Order = w.Applied
		w.Source = SourceOf(testSource.RepoURL, testSource.Ref) // as FromWorkspace makes it
	}
}

// rollbackTo sets spec.rollback to commit for the test source.
func rollbackTo(commit string) func(*magosv1.Rollout) {
	return func(ro *magosv1.Rollout) {
		ro.Spec.Rollback = &magosv1.RolloutRollback{RequestedBy: "alice",
			Commits: []magosv1.RollbackCommit{{RepoURL: testSource.RepoURL, TargetRevision: testSource.Ref, Commit: commit}}}
	}
}

// TestDecideRollback: spec.rollback rolls the named commit back out in reverse step order: the
// last step first, each of its Workspaces asked for a new run (a retry of the run that applied
// the later commit) and granted the commit rolled back to; a step starts only when every later
// step is back; a Workspace already at the commit, or whose agent minted a run only because the
// ref moved on, is done and gets nothing; a run that failed at the commit rolled back from is
// retried, not counted; one that fails at the commit rolled back to fails the step.
func TestDecideRollback(t *testing.T) {
	dev, staging, prod := newWS("c1", "dev", "env", "dev"), newWS("c2", "staging", "env", "staging"), newWS("c3", "prod", "env", "prod")
	at := func(w Workspace, commit string) Workspace { return w.with(atCommit(commit)) }
	// pendingFor makes the Workspace's new run wait for a grant (minted by the retry).
	pendingFor := func(w Workspace, trigger string) Workspace {
		w.Phase, w.Reason, w.RunID, w.Trigger = magosv1.PhasePending, magosv1.ReasonAwaitingRollout, w.RunID+"-next", trigger
		return w
	}
	failedAt := func(w Workspace, commit string) Workspace {
		w.Phase, w.Reason, w.CurrentRevision = magosv1.PhaseFailed, magosv1.ReasonVerificationFailed, commit
		return w
	}
	tests := []struct {
		name    string
		rollout func(*magosv1.Rollout)
		ws      []Workspace
		reason  string
		step    string   // the current step ("" when done)
		retries []string // Workspaces asked for a new run
		grants  []string // Workspaces granted, each at oldCommit
	}{
		{
			name:   "the last step goes first: its Workspace is asked for a new run",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), at(prod, newCommit)},
			reason: magosv1.ReasonRollingBack, step: "prod", retries: []string{"prod"},
		},
		{
			name:   "a retry asked already is not asked again",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), at(prod, newCommit).with(func(w *Workspace) { w.RetryRequested = w.RunID })},
			reason: magosv1.ReasonRollingBack, step: "prod",
		},
		{
			name:   "the new run is granted the commit rolled back to, not the ref's",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), pendingFor(at(prod, newCommit), magosv1.TriggerManual)},
			reason: magosv1.ReasonRollingBack, step: "prod", grants: []string{"prod"},
		},
		{
			name:   "once the last step is back, the one before it starts",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), at(prod, oldCommit)},
			reason: magosv1.ReasonRollingBack, step: "staging", retries: []string{"staging"},
		},
		{
			name: "a Workspace back at the commit whose agent then saw the ref move on waits, done",
			ws: []Workspace{at(dev, newCommit), pendingFor(at(staging, newCommit), magosv1.TriggerManual),
				pendingFor(at(prod, oldCommit), magosv1.TriggerRevision)},
			reason: magosv1.ReasonRollingBack, step: "staging", grants: []string{"staging"},
		},
		{
			name:   "every step back: rolled back, nothing more to write",
			ws:     []Workspace{at(dev, oldCommit), pendingFor(at(staging, oldCommit), magosv1.TriggerRevision), at(prod, oldCommit)},
			reason: magosv1.ReasonRolledBack,
		},
		{
			name:   "a run that failed at the commit rolled back from is retried, not counted",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), failedAt(at(prod, newCommit), newCommit)},
			reason: magosv1.ReasonRollingBack, step: "prod", retries: []string{"prod"},
		},
		{
			name:   "a run that fails at the commit rolled back to fails the step",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), failedAt(at(prod, newCommit), oldCommit)},
			reason: magosv1.ReasonStepFailed, step: "prod",
		},
		{
			name:    "a paused rollback asks nothing",
			rollout: func(ro *magosv1.Rollout) { ro.Spec.Paused = true },
			ws:      []Workspace{at(dev, newCommit), at(staging, newCommit), at(prod, newCommit)},
			reason:  magosv1.ReasonPaused, step: "prod",
		},
		{
			name: "the failure budget of a step holds in a rollback too",
			rollout: func(ro *magosv1.Rollout) {
				ro.Spec.Strategy.Steps[2].MaxFailures = new(intstr.FromInt32(1))
			},
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), failedAt(at(prod, newCommit), oldCommit)},
			reason: magosv1.ReasonRollingBack, step: "staging", retries: []string{"staging"},
		},
		{
			name:   "without spec.rollback, the same fleet at the later commit is done",
			ws:     []Workspace{at(dev, newCommit), at(staging, newCommit), at(prod, newCommit)},
			reason: magosv1.ReasonRolloutCompleted, rollout: func(ro *magosv1.Rollout) { ro.Spec.Rollback = nil },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ro := envSteps()
			src := SourceOf(testSource.RepoURL, testSource.Ref)
			ro.Status.Revisions = []magosv1.RolloutRevision{{RepoURL: src.RepoURL, TargetRevision: src.Ref, Commit: newCommit}}
			rollbackTo(oldCommit)(ro)
			if tc.rollout != nil {
				tc.rollout(ro)
			}
			in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1", "c2", "c3"), Workspaces: tc.ws}
			d := Decide(in)
			if d.Reason != tc.reason || d.CurrentStepName != tc.step {
				t.Fatalf("reason %s at step %q (%s), want %s at step %q", d.Reason, d.CurrentStepName, d.Message, tc.reason, tc.step)
			}
			if want := slices.IndexFunc(ro.Spec.Strategy.Steps, func(s magosv1.RolloutStep) bool { return s.Name == tc.step }); tc.step != "" && d.CurrentStep != want {
				t.Fatalf("currentStep %d, want %d (the index of %s in the spec)", d.CurrentStep, want, tc.step)
			}
			if got := names(d.Retries); !slices.Equal(got, tc.retries) {
				t.Fatalf("retries %v, want %v", got, tc.retries)
			}
			if got := names(d.Grants); !slices.Equal(got, tc.grants) {
				t.Fatalf("grants %v, want %v", got, tc.grants)
			}
			for _, g := range d.Grants {
				if g.Revision != oldCommit {
					t.Fatalf("grant %+v names commit %s, want the commit rolled back to", g, g.Revision)
				}
			}
			for i, st := range d.Steps {
				if st.Name != ro.Spec.Strategy.Steps[i].Name {
					t.Fatalf("status.steps[%d] is %s, want the spec's order", i, st.Name)
				}
			}
			// Written (retries as the agent's new runs would not yet be), deciding again
			// writes nothing.
			again := in
			again.Workspaces = applyWrites(in.Workspaces, d, "rollout")
			for i := range again.Workspaces {
				for _, r := range d.Retries {
					if again.Workspaces[i].Key == r.Key {
						again.Workspaces[i].RetryRequested = r.Run
					}
				}
			}
			if d2 := Decide(again); d2.HasWrites() {
				t.Fatalf("not a fixed point: grants %v retries %v revokes %v", d2.Grants, d2.Retries, d2.Revokes)
			}
		})
	}
}

func names(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Key.Name)
	}
	return out
}

var _ = fmt.Sprint

// TestDecideRollbackRandomFleets lives random fleets through a rollback: 2 to 4 steps of 1 to 4
// Workspaces each, spread over three clusters (several per cluster and per step) that are
// randomly unavailable for a while, of two sources (one rolled back, the other not: its
// Workspaces stay at their commit), at either commit, some failed or with a run minted because
// the ref moved on; in some lives Workspaces are edited (a new spec, a new run) or deleted
// mid-rollback. A simulated agent (the test's own, independent of Decide) carries each write
// out: a retry mints a new run, a grant applies the commit it names (and, now and then, fails).
// Every decision is checked against the checker's own notions: grants name their source's
// target commit (the one rolled back to, or the other source's); retries go to the rolled-back
// source only; only the current step is written to, and every later step (in the spec's order)
// is at its target; nothing at its target is written to. The lives end rolled back (or failed,
// when a run at a target failed), and in lives without edits or deletions the steps were
// written to in the spec's reversed order.
func TestDecideRollbackRandomFleets(t *testing.T) {
	src := SourceOf(testSource.RepoURL, testSource.Ref)
	other := SourceOf("https://git.example/other.git", "main")
	const otherCommit = "4444444444444444444444444444444444444444"
	outcomes, shapes := map[string]int{}, map[string]int{}
	for seed := int64(0); seed < 400; seed++ {
		rng := rand.New(rand.NewSource(seed))
		nSteps := 2 + rng.Intn(3)
		changing := seed%2 == 1 // lives with edits and deletions
		var steps []magosv1.RolloutStep
		var ws []Workspace
		stepOf := map[Key]int{}
		cl := map[string]Cluster{}
		for _, c := range []string{"c0", "c1", "c2"} {
			cl[c] = Cluster{Name: c, Available: true, Synced: true}
		}
		perCluster := map[string]int{}
		for i := 0; i < nSteps; i++ {
			steps = append(steps, stepSpec(fmt.Sprintf("s%d", i), "step", fmt.Sprintf("s%d", i)))
			for j := 0; j < 1+rng.Intn(4); j++ {
				c := pick(rng, []string{"c0", "c1", "c2"})
				perCluster[c]++
				w := newWS(c, fmt.Sprintf("s%d-w%d", i, j), "step", fmt.Sprintf("s%d", i))
				if rng.Intn(4) == 0 { // of the other source, at its commit
					w = w.with(atCommit(otherCommit))
					w.Source, w.Applied, w.Order = other, []string{otherCommit}, []string{otherCommit}
				} else {
					w = w.with(atCommit(pick(rng, []string{oldCommit, newCommit, newCommit})))
					switch rng.Intn(6) {
					case 0: // failed at the later commit
						w.Phase, w.Reason, w.CurrentRevision = magosv1.PhaseFailed, magosv1.ReasonVerificationFailed, newCommit
					case 1: // a run minted because the ref moved on
						w.Phase, w.Reason, w.RunID, w.Trigger = magosv1.PhasePending, magosv1.ReasonAwaitingRollout, w.RunID+"-r", magosv1.TriggerRevision
					}
				}
				stepOf[w.Key] = i
				ws = append(ws, w)
			}
		}
		for _, n := range perCluster {
			if n > 1 {
				shapes["several Workspaces in a cluster"]++
				break
			}
		}
		ro := rolloutOf(steps...)
		ro.Status.Revisions = []magosv1.RolloutRevision{
			{RepoURL: src.RepoURL, TargetRevision: src.Ref, Commit: newCommit},
			{RepoURL: other.RepoURL, TargetRevision: other.Ref, Commit: otherCommit}}
		rollbackTo(oldCommit)(ro)
		target := func(w Workspace) string {
			if w.Source == other {
				return otherCommit
			}
			return oldCommit
		}
		// atTarget is the checker's own "at its target commit": the other source's Workspaces
		// applied their commit for their spec; the rolled-back source's applied the commit
		// rolled back to, and a run minted only because the ref moved on waits.
		atTarget := func(w Workspace) bool {
			if w.ObservedRevision != target(w) || w.ObservedGeneration != w.Generation {
				return false
			}
			return w.Phase == magosv1.PhaseApplied ||
				w.Source == src && w.Phase == magosv1.PhasePending && w.RunID != "" && w.Trigger == magosv1.TriggerRevision
		}
		failedAtTarget := func(w Workspace) bool { return w.Phase == magosv1.PhaseFailed && w.CurrentRevision == target(w) }
		var written []int // steps, in the order they were first written to
		changed := false
		runs := 0
		var d Decision
		for round := 0; round < 300; round++ {
			// Clusters come and go.
			for name, c := range cl {
				c.Available = rng.Intn(8) != 0
				cl[name] = c
			}
			in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws}
			d = Decide(in)
			// Later steps (in the spec's order) are at their targets; only the current step is
			// written to, never a Workspace at its target.
			for _, w := range ws {
				i := stepOf[w.Key]
				if d.CurrentStep < nSteps && i > d.CurrentStep && !atTarget(w) && !failedAtTarget(w) {
					t.Fatalf("seed %d round %d: step %d is current while %s of step %d is not at its target (%s at %s)", seed, round, d.CurrentStep, w.Key, i, w.Phase, w.ObservedRevision)
				}
			}
			for _, c := range append(slices.Clone(d.Grants), d.Retries...) {
				w := ws[slices.IndexFunc(ws, func(w Workspace) bool { return w.Key == c.Key })]
				if stepOf[c.Key] != d.CurrentStep {
					t.Fatalf("seed %d round %d: %s of step %d written to while step %d is current", seed, round, c.Key, stepOf[c.Key], d.CurrentStep)
				}
				if atTarget(w) {
					t.Fatalf("seed %d round %d: %s is at its target, yet written to: %+v", seed, round, c.Key, c)
				}
				if i := stepOf[c.Key]; !slices.Contains(written, i) {
					written = append(written, i)
				}
			}
			for _, g := range d.Grants {
				w := ws[slices.IndexFunc(ws, func(w Workspace) bool { return w.Key == g.Key })]
				if g.Revision != target(w) {
					t.Fatalf("seed %d round %d: grant %+v names %s, want %s", seed, round, g, g.Revision, target(w))
				}
			}
			for _, r := range d.Retries {
				if w := ws[slices.IndexFunc(ws, func(w Workspace) bool { return w.Key == r.Key })]; w.Source != src {
					t.Fatalf("seed %d round %d: a retry of %s, of a source not rolled back", seed, round, r.Key)
				}
			}
			if d.Reason == magosv1.ReasonRolledBack || d.Reason == magosv1.ReasonStepFailed {
				break
			}
			// The simulated agent carries the writes out.
			next := applyWrites(ws, d, "rollout")
			for i := range next {
				w := &next[i]
				if slices.ContainsFunc(d.Retries, func(c Change) bool { return c.Key == w.Key }) {
					w.RetryRequested = w.RunID
				}
				if w.RetryRequested == w.RunID && w.Phase.Info().Ended {
					if cl[w.Key.Cluster].Available && rng.Intn(3) > 0 { // the agent mints a new run, now or later
						runs++
						w.Phase, w.Reason, w.RunID, w.Trigger = magosv1.PhasePending, magosv1.ReasonAwaitingRollout, fmt.Sprintf("run-%d", runs), magosv1.TriggerManual
						w.Grant = Grant{}
					}
					continue
				}
				if w.Grant.AllowsRun(w.RunID) && w.Grantable() && rng.Intn(3) > 0 { // the agent runs the granted commit
					w.CurrentRevision = w.Grant.Revision
					if rng.Intn(15) == 0 {
						w.Phase, w.Reason = magosv1.PhaseFailed, magosv1.ReasonApplyFailed
						continue
					}
					w.Phase, w.Reason, w.ObservedRevision, w.ObservedGeneration = magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, w.Grant.Revision, w.Generation
					continue
				}
				if changing && !w.InFlight() && rng.Intn(60) == 0 { // someone edits its spec: the agent mints a new run for it
					runs++
					changed = true
					shapes["edited mid-rollback"]++
					w.Generation++
					w.Phase, w.Reason, w.RunID, w.Trigger = magosv1.PhasePending, magosv1.ReasonAwaitingRollout, fmt.Sprintf("run-%d", runs), magosv1.TriggerConfiguration
					w.ObservedGeneration = w.Generation
				}
			}
			if changing && rng.Intn(20) == 0 { // someone deletes a Workspace (not the last of its step)
				i := rng.Intn(len(next))
				if slices.ContainsFunc(next, func(o Workspace) bool { return o.Key != next[i].Key && stepOf[o.Key] == stepOf[next[i].Key] }) {
					next = slices.Delete(next, i, i+1)
					changed = true
					shapes["deleted mid-rollback"]++
				}
			}
			ws = next
		}
		outcomes[d.Reason]++
		if d.Reason != magosv1.ReasonRolledBack && d.Reason != magosv1.ReasonStepFailed {
			t.Fatalf("seed %d: the rollback neither ended nor failed in 300 rounds: %s %s", seed, d.Reason, d.Message)
		}
		if changed {
			continue // an edit may bring a finished step back: the per-decision checks above hold
		}
		for k := 1; k < len(written); k++ {
			if written[k] > written[k-1] {
				t.Fatalf("seed %d: steps were written to in the order %v, want the spec's reversed", seed, written)
			}
		}
	}
	t.Logf("outcomes: %v; shapes: %v", outcomes, shapes)
	if outcomes[magosv1.ReasonRolledBack] == 0 || outcomes[magosv1.ReasonStepFailed] == 0 {
		t.Fatalf("the random lives reached %v: want both rolled back and failed lives", outcomes)
	}
	for _, shape := range []string{"several Workspaces in a cluster", "edited mid-rollback", "deleted mid-rollback"} {
		if shapes[shape] == 0 {
			t.Fatalf("no random life had %s: the generator reached %v", shape, shapes)
		}
	}
}

// TestRollbackTargets: without a commit named, a rollback goes back to the newest commit every
// Workspace of the source applied other than the one rolled out now; a commit named by a prefix
// is found in any Workspace's history; a source nobody applied anything of is an error.
func TestRollbackTargets(t *testing.T) {
	src := SourceOf(testSource.RepoURL, testSource.Ref)
	third := "3333333333333333333333333333333333333333"
	w := func(name string, applied ...string) Workspace {
		x := newWS("c1", name)
		x.Source, x.Spelling, x.Applied = src, testSource.RepoURL+"@"+testSource.Ref, applied
		return x
	}
	rolling := []magosv1.RolloutRevision{{RepoURL: src.RepoURL, TargetRevision: src.Ref, Commit: third}}
	in := Input{Namespace: testNamespace, Project: testProject, Clusters: clusters("c1"),
		Workspaces: []Workspace{w("a", oldCommit, newCommit, third), w("b", oldCommit, third), w("c")}}
	got, err := RollbackTargets(in, rolling, "")
	if err != nil || len(got) != 1 || got[0].Commit != oldCommit || got[0].RepoURL != testSource.RepoURL || got[0].TargetRevision != testSource.Ref {
		t.Fatalf("RollbackTargets = %+v, %v; want %s (b never applied %s)", got, err, oldCommit, newCommit)
	}
	if got, err := RollbackTargets(in, rolling, newCommit[:8]); err != nil || got[0].Commit != newCommit {
		t.Fatalf("RollbackTargets(--to %s) = %+v, %v; want %s", newCommit[:8], got, err, newCommit)
	}
	if _, err := RollbackTargets(in, rolling, "abcdef0"); err == nil {
		t.Fatal("RollbackTargets found a commit nobody applied")
	}
	in.Workspaces = []Workspace{w("a", third), w("b", newCommit, third)}
	if _, err := RollbackTargets(in, rolling, ""); err == nil {
		t.Fatal("RollbackTargets found a commit although a has applied only the one rolled out")
	}
}
