package decision

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func regionSteps() *magosv1.Rollout {
	return rolloutOf(
		stepSpec("us-east-1", "region", "us-east-1"),
		stepSpec("eu-west-1", "region", "eu-west-1"),
		stepSpec("ap-south-1", "region", "ap-south-1"),
	)
}

// regionFleet is three regions in three clusters, all Applied at rev-1, as the Rollout recorded.
func regionFleet(t *testing.T) *fleet {
	f := &fleet{t: t, rollout: regionSteps(), clusters: clusters("us-east-1", "eu-west-1", "ap-south-1")}
	for _, r := range []string{"us-east-1", "eu-west-1", "ap-south-1"} {
		f.ws = append(f.ws, newWS(r, "cdn", "region", r).with(appliedOK))
	}
	if _, d := f.walk(); d.Reason != magosv1.ReasonRolloutCompleted {
		t.Fatalf("the fleet did not settle: %s %s", d.Reason, d.Message)
	}
	return f
}

// TestDecideNewCommitWaitsForEarlierSteps is the order guarantee for a new commit: whichever
// region's agent polls first, the commit is applied region by region in step order.
func TestDecideNewCommitWaitsForEarlierSteps(t *testing.T) {
	f := regionFleet(t)
	// The last region's agent sees rev-2 first, then the middle one; the first has not polled.
	f.poll(k("ap-south-1", "cdn"), "rev-2", t0)
	f.poll(k("eu-west-1", "cdn"), "rev-2", t0.Add(time.Second))
	batches, d := f.walk()
	if len(batches) != 0 {
		t.Fatalf("granted %v before us-east-1 saw the commit", batches)
	}
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
	if len(d.Revisions) != 1 || d.Revisions[0].Commit != "rev-2" || !d.Revisions[0].DetectedAt.Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("revisions %+v, want rev-2 seen at %v", d.Revisions, t0.Add(time.Second))
	}
	if d.Applied != 0 || d.Steps[0].Applied != 0 {
		t.Fatalf("us-east-1, Applied at rev-1, counted done for rev-2: %d applied, steps %+v", d.Applied, d.Steps)
	}

	f.poll(k("us-east-1", "cdn"), "rev-2", t0.Add(5*time.Second))
	batches, d = f.walk()
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
	want := [][]Key{{k("us-east-1", "cdn")}, {k("eu-west-1", "cdn")}, {k("ap-south-1", "cdn")}}
	if fmt.Sprint(batches) != fmt.Sprint(want) {
		t.Fatalf("grant batches %v, want %v", batches, want)
	}
	for _, g := range f.grants {
		if g.Revision != "rev-2" {
			t.Fatalf("grant %v does not name rev-2", g)
		}
	}
	var applies []applied
	for _, a := range f.applies {
		if a.commit == "rev-2" {
			applies = append(applies, a)
		}
	}
	if fmt.Sprint(applies) != fmt.Sprint([]applied{{k("us-east-1", "cdn"), "rev-2"}, {k("eu-west-1", "cdn"), "rev-2"}, {k("ap-south-1", "cdn"), "rev-2"}}) {
		t.Fatalf("applies of rev-2: %v", applies)
	}
}

// TestDecideGrantPinsTheCommit: a later step is granted the commit the earlier steps applied,
// not whatever the ref points at when its run starts.
func TestDecideGrantPinsTheCommit(t *testing.T) {
	f := regionFleet(t)
	for _, r := range []string{"us-east-1", "eu-west-1", "ap-south-1"} {
		f.poll(k(r, "cdn"), "rev-2", t0)
	}
	f.decide()
	f.start()
	f.finish()       // us-east-1 applied rev-2
	f.head = "rev-3" // pushed meanwhile; nobody polled yet
	d := f.decide()
	if len(d.Grants) != 1 || d.Grants[0].Key != k("eu-west-1", "cdn") || d.Grants[0].Revision != "rev-2" {
		t.Fatalf("grants %v, want eu-west-1 at rev-2", d.Grants)
	}
	f.start()
	if w := f.get(k("eu-west-1", "cdn")); w.CurrentRevision != "rev-2" {
		t.Fatalf("eu-west-1 runs %s, want rev-2", w.CurrentRevision)
	}
}

// TestDecideRevisionAdoption checks which commit a Rollout rolls out for a source.
func TestDecideRevisionAdoption(t *testing.T) {
	recorded := func(commit string, seen *time.Time) []magosv1.RolloutRevision {
		r := magosv1.RolloutRevision{RepoURL: testSource.RepoURL, TargetRevision: testSource.Ref, Commit: commit, Since: metav1.NewTime(t0)}
		if seen != nil {
			r.DetectedAt = &metav1.Time{Time: *seen}
		}
		return []magosv1.RolloutRevision{r}
	}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	detected := func(commit string, seen time.Time) wsOpt {
		return func(w *Workspace) { w.DetectedRevision, w.DetectedAt = commit, seen }
	}
	planning := func(commit string) wsOpt {
		return func(w *Workspace) {
			w.Phase, w.Reason, w.CurrentRevision = magosv1.PhasePlanning, magosv1.ReasonPlanning, commit
		}
	}
	observed := func(commit string) wsOpt {
		return func(w *Workspace) { appliedOK(w); w.ObservedRevision, w.CurrentRevision = commit, commit }
	}
	order := func(commits ...string) wsOpt {
		return func(w *Workspace) { w.Order = commits }
	}
	tests := []struct {
		name     string
		recorded []magosv1.RolloutRevision
		ws       []Workspace
		want     string
		since    time.Time // zero: kept from the record (t0)
	}{
		{"nothing reported, nothing recorded", nil,
			[]Workspace{newWS("c1", "a", "env", "dev")}, "", time.Time{}},
		{"first record from the commit applied", nil,
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-1"))}, "rev-1", t0.Add(time.Hour)},
		{"first record: a run in flight wins over an older apply", nil,
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-1")), newWS("c1", "b", "env", "dev").with(planning("rev-2"))}, "rev-2", t0.Add(time.Hour)},
		{"first record: a detection wins over runs", nil,
			[]Workspace{newWS("c1", "a", "env", "dev").with(planning("rev-2")), newWS("c1", "b", "env", "dev").with(detected("rev-3", t0))}, "rev-3", t0.Add(time.Hour)},
		{"first record: the latest detection wins", nil,
			[]Workspace{newWS("c1", "a", "env", "dev").with(detected("rev-2", t0.Add(2*time.Second))), newWS("c1", "b", "env", "dev").with(detected("rev-3", t0))}, "rev-2", t0.Add(time.Hour)},
		{"recorded commit kept against an untimed report", recorded("rev-1", nil),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-9"))}, "rev-1", t0},
		{"recorded commit kept against a run resolving the ref itself", recorded("rev-1", at(0)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(planning("rev-9"))}, "rev-1", t0},
		{"recorded commit replaced by a later detection", recorded("rev-1", at(0)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-1"), detected("rev-2", t0.Add(time.Second)))}, "rev-2", t0.Add(time.Hour)},
		{"recorded commit kept against an earlier detection", recorded("rev-2", at(time.Minute)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-1"), detected("rev-1b", t0))}, "rev-2", t0},
		{"recorded commit kept against a detection without a time", recorded("rev-1", at(0)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(detected("rev-2", time.Time{}))}, "rev-1", t0},
		{"an untimed record is replaced by any detection", recorded("rev-1", nil),
			[]Workspace{newWS("c1", "a", "env", "dev").with(detected("rev-2", t0))}, "rev-2", t0.Add(time.Hour)},
		{"first record: a commit a member moved past is not adopted, however many report it", nil,
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-2"), order("rev-1", "rev-2")),
				newWS("c1", "b", "env", "dev").with(observed("rev-1")), newWS("c1", "c", "env", "dev").with(observed("rev-1"))}, "rev-2", t0.Add(time.Hour)},
		{"first record: a commit a member moved past loses to a run in flight", nil,
			[]Workspace{newWS("c1", "a", "env", "dev").with(planning("rev-2"), order("rev-2", "rev-3")),
				newWS("c1", "b", "env", "dev").with(observed("rev-3"))}, "rev-3", t0.Add(time.Hour)},
		{"a recorded commit a member moved past is replaced, without a detection", recorded("rev-1", at(time.Minute)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-2"), order("rev-1", "rev-2")),
				newWS("c1", "b", "env", "dev").with(observed("rev-1"))}, "rev-2", t0.Add(time.Hour)},
		{"a later detection of a commit a member moved past replaces nothing", recorded("rev-2", at(0)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-2"), order("rev-1", "rev-2")),
				newWS("c1", "b", "env", "dev").with(observed("rev-0"), detected("rev-1", t0.Add(time.Hour)))}, "rev-2", t0},
		{"a ref moved back, seen by every member that moved past: the older commit rolls out", recorded("rev-2", at(0)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-2"), detected("rev-1", t0.Add(time.Minute)), order("rev-1", "rev-2", "rev-1")),
				newWS("c1", "b", "env", "dev").with(observed("rev-1"))}, "rev-1", t0.Add(time.Hour)},
		{"contradicting orders: the detection times decide, as without orders", recorded("rev-2", at(0)),
			[]Workspace{newWS("c1", "a", "env", "dev").with(observed("rev-2"), detected("rev-1", t0.Add(time.Minute)), order("rev-1", "rev-2", "rev-1")),
				newWS("c1", "b", "env", "dev").with(observed("rev-2"), order("rev-1", "rev-2"))}, "rev-1", t0.Add(time.Hour)},
		{"a source nobody tracks any more is forgotten", recorded("rev-1", nil),
			[]Workspace{newWS("c1", "a", "env", "dev").with(func(w *Workspace) { w.Source.Ref = "release"; observed("rev-5")(w) })}, "", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ro := rolloutOf(stepSpec("dev", "env", "dev"))
			ro.Status.Revisions = tt.recorded
			d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"),
				Workspaces: tt.ws, Now: t0.Add(time.Hour)})
			got := revisionOf(d.Revisions, testSource)
			if got != tt.want {
				t.Fatalf("rolling out %q, want %q (revisions %+v)", got, tt.want, d.Revisions)
			}
			if tt.want != "" && !d.Revisions[0].Since.Time.Equal(tt.since) {
				t.Fatalf("since %v, want %v", d.Revisions[0].Since, tt.since)
			}
		})
	}
}

// TestDecideForgottenRecordNeverRollsBack is the first situation of issue 30 where the hub
// forgets: right after us-east-1 applied rev-2 (the other regions had not polled yet), the
// Rollout is deleted and created again (no status), or restored from a backup taken before the
// change (its record says rev-1). The Workspaces' own order (status.appliedRevisions) says rev-2
// came after rev-1, so no region is granted rev-1 again and rev-2 goes on in step order, applied
// once per region.
func TestDecideForgottenRecordNeverRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget func(ro *magosv1.Rollout)
	}{
		{"re-created", func(ro *magosv1.Rollout) { ro.Status = magosv1.RolloutStatus{} }},
		{"restored from a backup", func(ro *magosv1.Rollout) {
			ro.Status.Revisions = []magosv1.RolloutRevision{{RepoURL: testSource.RepoURL, TargetRevision: testSource.Ref,
				Commit: "rev-1", Since: metav1.NewTime(t0), DetectedAt: &metav1.Time{Time: t0.Add(-time.Hour)}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := regionFleet(t)
			f.poll(k("us-east-1", "cdn"), "rev-2", t0)
			f.decide()
			f.start()
			f.finish() // us-east-1 applied rev-2; the others have not polled
			f.applies = nil
			ro := regionSteps()
			ro.Status = *f.rollout.Status.DeepCopy()
			tc.forget(ro)
			f.rollout = ro
			// us-east-1 re-plans on its schedule; later the others poll and see rev-2.
			f.reset(k("us-east-1", "cdn"), magosv1.ReasonScheduledReconcile)
			batches, d := f.walk()
			f.poll(k("eu-west-1", "cdn"), "rev-2", t0.Add(time.Minute))
			f.poll(k("ap-south-1", "cdn"), "rev-2", t0.Add(time.Minute))
			more, d := f.walk()
			batches = append(batches, more...)
			if len(d.Revisions) != 1 || d.Revisions[0].Commit != "rev-2" {
				t.Fatalf("revisions %+v, want rev-2", d.Revisions)
			}
			for _, g := range f.grants {
				if g.Revision == "rev-1" {
					t.Fatalf("granted %s rev-1, a commit us-east-1 moved past (batches %v)", g.Key, batches)
				}
			}
			want := []applied{{k("us-east-1", "cdn"), "rev-2"}, {k("eu-west-1", "cdn"), "rev-2"}, {k("ap-south-1", "cdn"), "rev-2"}}
			if fmt.Sprint(f.applies) != fmt.Sprint(want) {
				t.Fatalf("applies after the Rollout forgot: %v, want %v", f.applies, want)
			}
			assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
		})
	}
}

// TestDecideOneSourceManySpellings is the other situation of issue 30: three regions track one
// repository and ref spelled three ways, and the last two see a new commit first. It is one
// source: the commit waits for us-east-1, and the revision lists the spellings.
func TestDecideOneSourceManySpellings(t *testing.T) {
	f := regionFleet(t)
	spell := map[string][2]string{
		"us-east-1":  {"file:///srv/git/repo", "main"},
		"eu-west-1":  {"file:///srv/git/repo/.git", "refs/heads/main"},
		"ap-south-1": {"file:///srv/git/repo/", "main"},
	}
	for i := range f.ws {
		sp := spell[f.ws[i].Key.Cluster]
		f.ws[i].Source = SourceOf(sp[0], sp[1])
		f.ws[i].Spelling = sp[0] + "@" + sp[1]
	}
	f.rollout.Status.Revisions = nil
	if _, d := f.walk(); d.Reason != magosv1.ReasonRolloutCompleted {
		t.Fatalf("the fleet did not settle: %s", d.Message)
	}
	f.poll(k("ap-south-1", "cdn"), "rev-2", t0)
	f.poll(k("eu-west-1", "cdn"), "rev-2", t0.Add(time.Second))
	batches, d := f.walk()
	if len(batches) != 0 {
		t.Fatalf("granted %v before us-east-1 saw the commit", batches)
	}
	if len(d.Revisions) != 1 || d.Revisions[0].Commit != "rev-2" || d.Revisions[0].RepoURL != "file:///srv/git/repo" || d.Revisions[0].TargetRevision != "main" {
		t.Fatalf("revisions %+v, want one: rev-2 of file:///srv/git/repo@main", d.Revisions)
	}
	wantSpellings := []string{"file:///srv/git/repo/.git@refs/heads/main", "file:///srv/git/repo/@main", "file:///srv/git/repo@main"}
	if fmt.Sprint(d.Revisions[0].Spellings) != fmt.Sprint(wantSpellings) {
		t.Fatalf("spellings %q, want %q", d.Revisions[0].Spellings, wantSpellings)
	}
	f.poll(k("us-east-1", "cdn"), "rev-2", t0.Add(40*time.Second))
	batches, d = f.walk()
	want := [][]Key{{k("us-east-1", "cdn")}, {k("eu-west-1", "cdn")}, {k("ap-south-1", "cdn")}}
	if fmt.Sprint(batches) != fmt.Sprint(want) {
		t.Fatalf("grant batches %v, want %v", batches, want)
	}
	assertStatus(t, d, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, 3)
}

// TestDecideIncompleteViews: a step is never counted done, found empty or passed on a cluster
// whose Workspaces the hub does not know.
func TestDecideIncompleteViews(t *testing.T) {
	ro := regionSteps()
	all := func() []Workspace {
		return []Workspace{
			newWS("us-east-1", "cdn", "region", "us-east-1").with(appliedOK),
			newWS("eu-west-1", "cdn", "region", "eu-west-1"),
			newWS("ap-south-1", "cdn", "region", "ap-south-1"),
		}
	}
	t.Run("an unsynced cluster holds back every step it may hold Workspaces of", func(t *testing.T) {
		cl := clusters("us-east-1", "eu-west-1", "ap-south-1", "us-east-1b")
		cl["us-east-1b"] = Cluster{Name: "us-east-1b", Available: true, Reason: "NotSynced"}
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: all()})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 0)
		if d.Message != "Waiting for cluster us-east-1b: NotSynced (step us-east-1: 1/1 applied)" || len(d.Grants) != 0 {
			t.Fatalf("message %q grants %v", d.Message, d.Grants)
		}
	})
	t.Run("after a hub restart no step is found empty before the clusters are engaged", func(t *testing.T) {
		cl := clusters("us-east-1", "eu-west-1", "ap-south-1")
		cl["us-east-1"] = Cluster{Name: "us-east-1", Reason: "NotEngaged"}
		cl["eu-west-1"] = Cluster{Name: "eu-west-1", Reason: "NotEngaged"}
		ws := all()[2:] // only ap-south-1 is engaged yet
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 0)
		want := "Waiting for cluster eu-west-1: NotEngaged; cluster us-east-1: NotEngaged (step us-east-1: 0/0 applied)"
		if d.Message != want || len(d.Grants) != 0 {
			t.Fatalf("message %q grants %v", d.Message, d.Grants)
		}
	})
	t.Run("a clusterSelector keeps an unsynced cluster out of a step", func(t *testing.T) {
		cl := clusters("us-east-1", "eu-west-1", "ap-south-1", "lab")
		cl["lab"] = Cluster{Name: "lab", Labels: map[string]string{"name": "lab"}}
		ro := regionSteps()
		for i := range ro.Spec.Strategy.Steps {
			sel := magosv1.MatchLabels(map[string]string{"name": ro.Spec.Strategy.Steps[i].Name})
			ro.Spec.Strategy.Steps[i].ClusterSelector = &sel
		}
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: all()})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("eu-west-1", "cdn")})
	})
	t.Run("an empty step waits for a silent cluster instead of failing", func(t *testing.T) {
		cl := clusters("us-east-1", "eu-west-1", "ap-south-1")
		cl["ap-south-1"] = Cluster{Name: "ap-south-1", Synced: true, Reason: "AgentSilent"}
		ws := all()[:2]
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 1)
		assertKeys(t, "grants", keysOf(d.Grants), []Key{k("eu-west-1", "cdn")})
		ws[1] = ws[1].with(appliedOK)
		d = Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws})
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 2)
	})
	t.Run("an empty step is not decided on a view from before the Rollout", func(t *testing.T) {
		ro := regionSteps()
		ro.CreationTimestamp = metav1.NewTime(t0)
		cl := clusters("us-east-1", "eu-west-1", "ap-south-1")
		for name, c := range cl {
			c.SyncedAt = t0.Add(time.Second)
			cl[name] = c
		}
		c := cl["ap-south-1"]
		c.SyncedAt = t0.Add(-time.Second) // its Workspace may be on its way up
		cl["ap-south-1"] = c
		in := Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: all()[:2]}
		d := Decide(in)
		// Nothing new runs before the step is known to hold Workspaces: a typo in it must not
		// let eu-west-1 run first (upstream fails before it grants anything).
		assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 1)
		want := "Waiting for cluster ap-south-1: no complete sync since the Rollout was created (step ap-south-1 matches no Workspace yet: nothing new runs until the clusters it may select in have synced)"
		if d.Message != want || len(d.Grants) != 0 {
			t.Fatalf("message %q grants %v, want %q and none", d.Message, d.Grants, want)
		}
		c.SyncedAt = t0.Add(time.Second)
		cl["ap-south-1"] = c
		d = Decide(in)
		assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, 2)
	})
	t.Run("NoWorkspacesFound once every cluster is known and answers", func(t *testing.T) {
		d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("us-east-1", "eu-west-1", "ap-south-1"), Workspaces: all()[:2]})
		assertStatus(t, d, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound, 2)
	})
}

// TestDecideRandomPollsKeepStepOrder drives random fleets through several commits, with each
// agent polling at random moments (so any region may see a commit first) and runs finishing at
// random, and checks on the applies the simulated spokes record: every commit is applied in
// step order (no Workspace of a step applies it before every Workspace of the earlier steps
// did), no Workspace applies a commit twice, and every Workspace ends on the last commit.
func TestDecideRandomPollsKeepStepOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(20261203))
	for trial := 0; trial < 300; trial++ {
		f, stepOf := randomRegionFleet(t, rng, 1)
		now := t0
		commits := 1 + rng.Intn(3)
		for c := 2; c < 2+commits; c++ {
			commit := fmt.Sprintf("rev-%d", c)
			f.head = commit
			polled := map[Key]bool{}
			for round := 0; round < 200 && len(polled) < len(f.ws); round++ {
				now = now.Add(time.Second)
				// Some agents poll now; some runs finish; the hub decides in between.
				for _, w := range f.ws {
					if !polled[w.Key] && rng.Intn(4) == 0 {
						f.poll(w.Key, commit, now)
						polled[w.Key] = true
					}
				}
				f.decide()
				f.start()
				if rng.Intn(2) == 0 {
					f.finish()
				}
			}
			for _, w := range f.ws {
				f.poll(w.Key, commit, now.Add(time.Second))
			}
			f.walk()
		}
		checkApplies(t, trial, f, stepOf, fmt.Sprintf("rev-%d", 1+commits))
	}
}

// randomRegionFleet is a random fleet settled at rev-1: two to four region steps, two to four
// clusters (c0, c1...), and at least perStep Workspaces per step (a few more at random), each in
// a random cluster. It returns the fleet and each Workspace's step.
func randomRegionFleet(t *testing.T, rng *rand.Rand, perStep int) (*fleet, map[Key]int) {
	regions := []string{"us-east-1", "eu-west-1", "ap-south-1", "sa-east-1"}
	f := &fleet{t: t, rollout: rolloutOf(), clusters: map[string]Cluster{}, stale: map[Key]Workspace{}}
	nSteps := 2 + rng.Intn(3)
	for s := 0; s < nSteps; s++ {
		f.rollout.Spec.Strategy.Steps = append(f.rollout.Spec.Strategy.Steps, stepSpec(regions[s], "region", regions[s]))
	}
	for c := 0; c < 2+rng.Intn(3); c++ {
		cluster := fmt.Sprintf("c%d", c)
		f.clusters[cluster] = Cluster{Name: cluster, Available: true, Synced: true}
	}
	stepOf := map[Key]int{}
	for i := 0; i < perStep*nSteps+rng.Intn(6); i++ {
		s := i % nSteps
		key := k(fmt.Sprintf("c%d", rng.Intn(len(f.clusters))), fmt.Sprintf("w%d", i))
		f.ws = append(f.ws, newWS(key.Cluster, key.Name, "region", regions[s]).with(appliedOK))
		stepOf[key] = s
	}
	f.walk()
	return f, stepOf
}

func checkApplies(t *testing.T, trial int, f *fleet, stepOf map[Key]int, last string) {
	t.Helper()
	seen := map[applied]bool{}
	order := newStepOrder(stepOf)
	for _, a := range f.applies {
		if seen[a] {
			t.Fatalf("trial %d: %s applied %s twice: %v", trial, a.key, a.commit, f.applies)
		}
		seen[a] = true
		order.check(t, trial, a, f.applies)
	}
	checkEndedAt(t, trial, f, last)
	if !slices.ContainsFunc(f.applies, func(a applied) bool { return a.commit == last }) {
		t.Fatalf("trial %d: nobody applied %s", trial, last)
	}
}

// stepOrder checks that the applies of each commit keep step order: none in a step before every
// Workspace of the steps before it applied that commit (rev-1, the fleet's start, excepted).
type stepOrder struct {
	stepOf map[Key]int
	size   map[int]int
	doneBy map[string]map[int]int // commit -> step -> applies so far
}

func newStepOrder(stepOf map[Key]int) *stepOrder {
	o := &stepOrder{stepOf: stepOf, size: map[int]int{}, doneBy: map[string]map[int]int{}}
	for _, s := range stepOf {
		o.size[s]++
	}
	return o
}

// check records the apply a, failing when its step comes too early (all: every apply, for the
// message).
func (o *stepOrder) check(t *testing.T, trial int, a applied, all []applied) {
	t.Helper()
	s := o.stepOf[a.key]
	if o.doneBy[a.commit] == nil {
		o.doneBy[a.commit] = map[int]int{}
	}
	for earlier := 0; earlier < s; earlier++ {
		if o.doneBy[a.commit][earlier] < o.size[earlier] && a.commit != "rev-1" {
			t.Fatalf("trial %d: %s (step %d) applied %s before step %d was done: %v", trial, a.key, s, a.commit, earlier, all)
		}
	}
	o.doneBy[a.commit][s]++
}

// checkEndedAt checks that every Workspace of the fleet ended Applied at last.
func checkEndedAt(t *testing.T, trial int, f *fleet, last string) {
	t.Helper()
	for _, w := range f.ws {
		if w.Phase != magosv1.PhaseApplied || w.ObservedRevision != last {
			t.Fatalf("trial %d: %s ended %s at %q, want Applied at %s: %+v\n%+v", trial, w.Key, w.Phase, w.ObservedRevision, last, w, Decide(f.input()))
		}
	}
}

// TestDecideRandomFleetLife runs random fleets through the ordinary life of a real one while
// new commits roll out: several Workspaces per cluster and per step, agents whose clocks run up
// to ten minutes ahead or behind (their detected-at; the hub's measure of each agent's offset
// errs by up to 100 ms), Workspaces that re-plan on their schedule,
// mirrors that lag (the hub decides on what a Workspace was a few rounds ago), and the Rollout deleted and created
// again (its status gone) or restored from an older backup at random moments, and drift: steps
// whose drift is block, warn or ignore, Workspaces whose drift check finds drift at the commit
// they applied (a drift a later apply leaves behind: its check was of an older commit), and
// acceptances of it at random moments and, before the fleet settles, of all of it, as an
// operator would (magosctl rollout accept-drift). Whatever happens,
// every Workspace's applied commits never go back to an older one, each commit's first applies
// keep step order, and the fleet ends Applied at the last commit.
func TestDecideRandomFleetLife(t *testing.T) {
	rng := rand.New(rand.NewSource(20261206))
	tally := map[string]int{}
	for trial := 0; trial < 300; trial++ {
		f, stepOf := randomRegionFleet(t, rng, 2)
		for i := range f.rollout.Spec.Strategy.Steps {
			f.rollout.Spec.Strategy.Steps[i].Drift = pick(rng, []string{magosv1.DriftBlock, magosv1.DriftWarn, magosv1.DriftIgnore})
		}
		skew := map[string]time.Duration{}
		for c := range len(f.clusters) {
			name := fmt.Sprintf("c%d", c)
			skew[name] = time.Duration(rng.Intn(1201)-600) * time.Second
			// The hub's measure of it: each renewal seen up to 100 ms after it was written.
			cl := f.clusters[name]
			cl.ClockOffset = skew[name] - time.Duration(rng.Intn(100))*time.Millisecond
			f.clusters[name] = cl
		}
		var backup *magosv1.RolloutStatus
		now := t0
		commits := 2 + rng.Intn(3)
		for c := 2; c < 2+commits; c++ {
			commit := fmt.Sprintf("rev-%d", c)
			f.head = commit
			polled := map[Key]bool{}
			for round := 0; round < 200 && len(polled) < len(f.ws); round++ {
				now = now.Add(time.Second)
				f.now = now
				for _, w := range f.ws {
					at := now.Add(skew[w.Key.Cluster])
					switch r := rng.Intn(40); {
					case !polled[w.Key] && r < 10:
						f.poll(w.Key, commit, at)
						polled[w.Key] = true
					case r == 10 && f.stale[w.Key].Key == (Key{}):
						// The mirror starts lagging: the hub sees the Workspace as it is now for
						// a few rounds, whatever it does meanwhile.
						f.syncOrder()
						f.stale[w.Key] = *f.get(w.Key)
						tally["lagging mirror"]++
					case r < 16 && f.stale[w.Key].Key != (Key{}):
						delete(f.stale, w.Key)
					case r == 11 && f.get(w.Key).Phase == magosv1.PhaseApplied:
						f.reset(w.Key, magosv1.ReasonScheduledReconcile)
						tally["re-plan"]++
					case r == 12 && f.get(w.Key).ObservedRevision != "" && !f.get(w.Key).Drifted:
						// A drift check finds drift at the commit it applied.
						*f.get(w.Key) = f.get(w.Key).with(driftedAt(fmt.Sprintf("drift-%d", round)))
						tally["drift"]++
					}
				}
				switch r := rng.Intn(60); {
				case r == 0:
					backup = f.rollout.Status.DeepCopy()
				case r == 1:
					ro := f.rollout.DeepCopy()
					ro.Status = magosv1.RolloutStatus{}
					f.rollout = ro
					tally["re-created"]++
				case (r == 2 || r == 3) && backup != nil:
					ro := f.rollout.DeepCopy()
					ro.Status = *backup.DeepCopy()
					f.rollout = ro
					tally["restored"]++
				case r == 4 || r == 5:
					if f.acceptDrift(rng.Intn(2) == 0) > 0 {
						tally["drift accepted"]++
					}
				}
				if f.decide().Reason == magosv1.ReasonDriftDetected {
					tally["blocked by drift"]++
				}
				f.start()
				if rng.Intn(2) == 0 {
					f.finish()
				}
			}
			clear(f.stale)
			for _, w := range f.ws {
				f.poll(w.Key, commit, now.Add(time.Second).Add(skew[w.Key.Cluster]))
			}
			f.acceptDrift(true)
			f.walk()
		}
		checkNeverBack(t, trial, f, stepOf, fmt.Sprintf("rev-%d", 1+commits))
	}
	t.Logf("events across the random fleets: %v", tally)
	for _, e := range []string{"lagging mirror", "re-plan", "re-created", "restored", "drift", "drift accepted", "blocked by drift"} {
		if tally[e] < 50 {
			t.Errorf("only %d random fleets saw %q: %v", tally[e], e, tally)
		}
	}
}

// acceptDrift accepts the drift of the fleet's drifted Workspaces with its digest, as magosctl
// rollout accept-drift writes it (of all of them, or of one), replacing an acceptance of older
// drift. It returns how many it accepted.
func (f *fleet) acceptDrift(all bool) int {
	n := 0
	for _, w := range f.ws {
		if !w.Drifted || w.DriftAccepted(f.rollout.Spec.DriftAcceptances) || n > 0 && !all {
			continue
		}
		f.rollout.Spec.DriftAcceptances = slices.DeleteFunc(f.rollout.Spec.DriftAcceptances,
			func(a magosv1.DriftAcceptance) bool { return a.Workspace == w.Key.String() })
		f.rollout.Spec.DriftAcceptances = append(f.rollout.Spec.DriftAcceptances, accept(w.Key, w.DriftDigest))
		n++
	}
	return n
}

// checkNeverBack checks a fleet's applies: no Workspace ever applies a commit older than one it
// applied before (re-applying the same commit, a re-plan, is allowed), the first apply of each
// commit by each Workspace keeps step order, and every Workspace ends Applied at last. Commits
// are rev-N, ordered by N: the checker's own knowledge, not the package's.
func checkNeverBack(t *testing.T, trial int, f *fleet, stepOf map[Key]int, last string) {
	t.Helper()
	num := func(c string) int {
		var n int
		if _, err := fmt.Sscanf(c, "rev-%d", &n); err != nil {
			t.Fatalf("commit %q: %v", c, err)
		}
		return n
	}
	newest := map[Key]int{}
	first := map[applied]bool{}
	order := newStepOrder(stepOf)
	for _, a := range f.applies {
		n := num(a.commit)
		if n < newest[a.key] {
			t.Fatalf("trial %d: %s applied %s after rev-%d: an applied commit went back: %v", trial, a.key, a.commit, newest[a.key], f.applies)
		}
		newest[a.key] = n
		if !first[a] {
			first[a] = true
			order.check(t, trial, a, f.applies)
		}
	}
	checkEndedAt(t, trial, f, last)
}

// TestDecideAgentClocksDecideNoOrder: the times an agent writes (when its poll saw a commit, its
// sync watermark) are read on the hub's clock, less the offset the hub measured for the
// agent's cluster (Cluster.ClockOffset). An agent whose clock runs ten minutes ahead or behind
// then changes neither the commit adopted nor when a cluster's view counts as complete: each
// case is decided with the agent's clock skewed by -10m, 0 and +10m, with the same outcome. With
// the offset unknown (zero), a skew of either sign decides at least one case wrong: the
// correction is what the outcome rests on.
func TestDecideAgentClocksDecideNoOrder(t *testing.T) {
	// decideAt decides a Rollout over cluster "a", whose agent's clock runs skew ahead, and
	// cluster "b", on the hub's clock (synced as of syncedB). ws writes their Workspaces given
	// the agent's clock.
	decideAt := func(skew time.Duration, measured bool, ro *magosv1.Rollout, syncedA, syncedB time.Time, ws func(agent func(time.Time) time.Time) []Workspace) Decision {
		agent := func(hub time.Time) time.Time { return hub.Add(skew) }
		cl := clusters("a", "b")
		a, b := cl["a"], cl["b"]
		a.SyncedAt, b.SyncedAt = agent(syncedA), syncedB
		if measured {
			a.ClockOffset = skew - 20*time.Millisecond // each renewal seen at least 20 ms after it was written
		}
		cl["a"], cl["b"] = a, b
		return Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws(agent), Now: t0.Add(time.Hour)})
	}
	detected := func(w Workspace, commit string, at time.Time) Workspace {
		w.DetectedRevision, w.DetectedAt = commit, at
		return w
	}
	// outcomes decides the three cases and says, for each, what went wrong ("" when right).
	outcomes := func(skew time.Duration, measured bool) []string {
		var wrong []string
		// a's agent saw rev-1 at t0, b's saw rev-2 a minute later: rev-2 is the latest.
		ro := rolloutOf(stepSpec("dev", "env", "dev"))
		d := decideAt(skew, measured, ro, t0, t0, func(agent func(time.Time) time.Time) []Workspace {
			return []Workspace{detected(newWS("a", "w", "env", "dev"), "rev-1", agent(t0)),
				detected(newWS("b", "w", "env", "dev"), "rev-2", t0.Add(time.Minute))}
		})
		if got := revisionOf(d.Revisions, testSource); got != "rev-2" {
			wrong = append(wrong, fmt.Sprintf("first record: adopted %q, want rev-2, seen last on the hub's clock", got))
		}
		// rev-2 recorded as seen at t0+1m (the hub's clock); a's agent then sees rev-3 at t0+2m:
		// it replaces rev-2.
		ro = rolloutOf(stepSpec("dev", "env", "dev"))
		ro.Status.Revisions = []magosv1.RolloutRevision{{RepoURL: testSource.RepoURL, TargetRevision: testSource.Ref,
			Commit: "rev-2", Since: metav1.NewTime(t0), DetectedAt: &metav1.Time{Time: t0.Add(time.Minute)}}}
		d = decideAt(skew, measured, ro, t0, t0, func(agent func(time.Time) time.Time) []Workspace {
			return []Workspace{detected(newWS("a", "w", "env", "dev"), "rev-3", agent(t0.Add(2*time.Minute))),
				newWS("b", "w", "env", "dev").with(appliedOK)}
		})
		if got := revisionOf(d.Revisions, testSource); got != "rev-3" {
			wrong = append(wrong, fmt.Sprintf("a later detection: rolling out %q, want rev-3, seen after rev-2 on the hub's clock", got))
		}
		// Step prod selects nothing in b (synced after the Rollout was created) and nothing in
		// a, whose view is complete only as of a second before (the hub's clock): it may miss a
		// Workspace, so the step waits instead of failing empty.
		ro = rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("prod", "env", "prod"))
		ro.CreationTimestamp = metav1.NewTime(t0)
		d = decideAt(skew, measured, ro, t0.Add(-time.Second), t0.Add(time.Second), func(func(time.Time) time.Time) []Workspace {
			return []Workspace{newWS("b", "w", "env", "dev").with(appliedOK)}
		})
		if d.Reason != magosv1.ReasonWaitingForClusters {
			wrong = append(wrong, fmt.Sprintf("a view from before the Rollout: %s (%s), want WaitingForClusters", d.Reason, d.Message))
		}
		return wrong
	}
	for _, skew := range []time.Duration{-10 * time.Minute, 0, 10 * time.Minute} {
		t.Run(fmt.Sprintf("skew %s, measured", skew), func(t *testing.T) {
			for _, w := range outcomes(skew, true) {
				t.Error(w)
			}
		})
		if skew != 0 {
			t.Run(fmt.Sprintf("skew %s, not measured", skew), func(t *testing.T) {
				if len(outcomes(skew, false)) == 0 {
					t.Error("every case decided right without the offset: the test does not exercise the skew")
				}
			})
		}
	}
}

// TestDecideWorkspaceCreatedWhileItsClusterIsSilent: what the hub cannot see, it waits for. A
// Workspace created (or relabelled into an earlier step) in a cluster whose agent is silent
// reaches the hub only when the agent syncs again, so while a cluster is silent no step that may
// select Workspaces in it progresses: the Rollout waits (WaitingForClusters), whatever the other
// clusters could run. When the agent is back, the new Workspace's step is the first not done:
// it runs before any later step's Workspace, so the step order holds for it too.
func TestDecideWorkspaceCreatedWhileItsClusterIsSilent(t *testing.T) {
	ro := rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("prod", "env", "prod"))
	cl := clusters("c1", "c2")
	known := []Workspace{newWS("c1", "dev-a", "env", "dev").with(appliedOK), newWS("c2", "prod-a", "env", "prod")}
	decide := func(cl map[string]Cluster, ws []Workspace) Decision {
		return Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: cl, Workspaces: ws})
	}

	// c1 falls silent: the hub's view of it is what it was. prod-a (in c2, step prod) could run
	// as far as the hub sees, but c1 may hold a dev Workspace the hub cannot see.
	silent := clusters("c1", "c2")
	c := silent["c1"]
	c.Available, c.Reason = false, "AgentSilent"
	silent["c1"] = c
	d := decide(silent, known)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters, 0)
	if len(d.Grants) != 0 {
		t.Fatalf("granted %v while c1 is silent, want nothing", keysOf(d.Grants))
	}

	// c1's agent is back, with dev-b created while it was silent: dev-b runs first.
	back := append(known, newWS("c1", "dev-b", "env", "dev"))
	d = decide(cl, back)
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, 0)
	assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c1", "dev-b")})

	// Once dev-b applied, step prod goes on.
	back[2] = back[2].with(appliedOK)
	d = decide(cl, back)
	assertKeys(t, "grants", keysOf(d.Grants), []Key{k("c2", "prod-a")})
}
