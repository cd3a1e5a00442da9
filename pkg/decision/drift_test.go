package decision

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// driftedAt makes the Workspace drifted at the commit it applied, its drift check's plan having
// the digest.
func driftedAt(digest string) wsOpt {
	return func(w *Workspace) {
		w.Drifted, w.DriftDigest, w.DriftChanges = true, digest, magosv1.ResourceChanges{Change: 1, Destroy: 2}
	}
}

// driftStatus gives the Workspace the drift of a status.drift, converted as the hub converts a
// mirror (FromWorkspace).
func driftStatus(d *magosv1.DriftStatus) wsOpt {
	return func(w *Workspace) {
		ws := &magosv1.Workspace{}
		ws.Status.ObservedRevision, ws.Status.Drift = w.ObservedRevision, d
		c := FromWorkspace(w.Key.Cluster, ws)
		w.Drifted, w.DriftDigest, w.DriftChanges = c.Drifted, c.DriftDigest, c.DriftChanges
	}
}

// accept is a drift acceptance of the Workspace's drift of the digest.
func accept(key Key, digest string) magosv1.DriftAcceptance {
	return magosv1.DriftAcceptance{Workspace: key.String(), Digest: digest, AcceptedBy: "alice", AcceptedAt: metav1.NewTime(randomEpoch)}
}

// grantShape is what a drift case checks of a grant: whom, and whether it allows only a plan.
type grantShape struct {
	key      Key
	planOnly bool
}

func shapes(cs []Change) []grantShape {
	out := make([]grantShape, len(cs))
	for i, c := range cs {
		out[i] = grantShape{c.Key, c.PlanOnly}
	}
	return out
}

// TestDecideDriftGate: a step whose drift is block grants no run that may apply (a full grant,
// the apply of an approved plan, a destroy) to any of its Workspaces while one of them drifted
// at the commit it applied and the Rollout does not accept that drift (an acceptance naming the
// Workspace with the digest of the drift check's plan); its plan-only grants (requireApproval,
// planFirst) still go, and grants already held and runs in flight are kept. The Rollout says
// DriftDetected naming the drifted Workspaces, and the step is DriftBlocked. warn and block list
// the drifted Workspaces in the step's status; ignore lists none; neither warn nor ignore holds
// anything. A drift check of an older commit than the one applied is a stale view: no drift.
func TestDecideDriftGate(t *testing.T) {
	b, c, z := k("c2", "b"), k("c3", "c"), k("c1", "z")
	bName := b.String()
	full := func(keys ...Key) []grantShape {
		out := make([]grantShape, len(keys))
		for i, key := range keys {
			out[i] = grantShape{key, false}
		}
		return out
	}
	planOnly := func(keys ...Key) []grantShape {
		out := full(keys...)
		for i := range out {
			out[i].planOnly = true
		}
		return out
	}
	// parked makes the Workspace's plan of rev-1 wait for an approval.
	parked := func(w *Workspace) {
		w.Phase, w.Reason, w.CurrentRevision, w.PlanDigest, w.PlanOnly = magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded, "rev-1", "p-"+w.Key.Name, true
		w.Grant = Grant{Allowed: true, Run: w.RunID, Revision: "rev-1", PlanOnly: true}
	}
	approveBC := func(ro *magosv1.Rollout) {
		ro.Spec.Approvals = []magosv1.StepApproval{{Step: "prod", ApprovedBy: "bob", Plans: []magosv1.ApprovedPlan{
			{Workspace: bName, Revision: "rev-1", Digest: "p-b"}, {Workspace: c.String(), Revision: "rev-1", Digest: "p-c"}}}}
	}
	tests := []struct {
		name    string
		drift   string // prod's drift
		rollout func(*magosv1.Rollout)
		ws      func(ws map[Key]*Workspace)
		down    string // a cluster that is unavailable

		reason, phase string // the Rollout's reason, prod's phase
		grants        []grantShape
		revokes       []Key
		drifted       []string // prod's status.steps[].drifted
	}{
		{
			name: "block: a drifted Workspace holds every apply of its step", drift: magosv1.DriftBlock,
			ws:     func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason: magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: an acceptance of the drift's digest lets the step go", drift: magosv1.DriftBlock,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.DriftAcceptances = []magosv1.DriftAcceptance{accept(b, "dd-b")} },
			ws:      func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason:  magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c),
		},
		{
			name: "block: an acceptance of another digest (a later check found other drift) no longer counts", drift: magosv1.DriftBlock,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.DriftAcceptances = []magosv1.DriftAcceptance{accept(b, "dd-old")} },
			ws:      func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason:  magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: an acceptance for another Workspace does not count", drift: magosv1.DriftBlock,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.DriftAcceptances = []magosv1.DriftAcceptance{accept(c, "dd-b")} },
			ws:      func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason:  magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: a drifted Workspace that applied the change still holds the others", drift: magosv1.DriftBlock,
			ws:     func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(appliedOK, driftedAt("dd-b")) },
			reason: magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: the plans of a step that requires approval still go, plan-only", drift: magosv1.DriftBlock,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.Strategy.Steps[1].RequireApproval = true },
			ws:      func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason:  magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, grants: planOnly(b, c), drifted: []string{bName},
		},
		{
			name: "block: approved plans do not apply, and keep their plan-only grants", drift: magosv1.DriftBlock,
			rollout: func(ro *magosv1.Rollout) {
				ro.Spec.Strategy.Steps[1].RequireApproval = true
				approveBC(ro)
			},
			ws: func(ws map[Key]*Workspace) {
				*ws[b] = ws[b].with(parked, driftedAt("dd-b"))
				*ws[c] = ws[c].with(parked)
			},
			reason: magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: with planFirst the previews still go, plan-only", drift: magosv1.DriftBlock,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.PlanFirst = true },
			ws:      func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason:  magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, grants: planOnly(z, b, c), drifted: []string{bName},
		},
		{
			name: "block: a grant already held and a run in flight are kept", drift: magosv1.DriftBlock,
			ws: func(ws map[Key]*Workspace) {
				*ws[b] = ws[b].with(driftedAt("dd-b"), grantedAt("rev-1"), inPhase(magosv1.PhaseApplying, magosv1.ReasonApplyJobCreated))
				*ws[c] = ws[c].with(grantedAt("rev-1"))
			},
			reason: magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: a destroy waits too", drift: magosv1.DriftBlock,
			ws: func(ws map[Key]*Workspace) {
				*ws[b] = ws[b].with(driftedAt("dd-b"))
				*ws[c] = ws[c].with(inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyPending))
			},
			reason: magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: a drift check of an older commit than the one applied is a stale view", drift: magosv1.DriftBlock,
			ws: func(ws map[Key]*Workspace) {
				*ws[b] = ws[b].with(driftStatus(&magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: "rev-0", PlanDigest: "dd-b"}))
			},
			reason: magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c),
		},
		{
			name: "block: a drift check of the commit applied counts", drift: magosv1.DriftBlock,
			ws: func(ws map[Key]*Workspace) {
				*ws[b] = ws[b].with(driftStatus(&magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: "rev-1", PlanDigest: "dd-b"}))
			},
			reason: magosv1.ReasonDriftDetected, phase: magosv1.StepDriftBlocked, drifted: []string{bName},
		},
		{
			name: "block: clusters to wait for come first; nothing applies meanwhile", drift: magosv1.DriftBlock, down: "c3",
			ws:     func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason: magosv1.ReasonWaitingForClusters, phase: magosv1.StepWaiting, drifted: []string{bName},
		},
		{
			name: "block in a later step holds nothing now", drift: magosv1.DriftWarn,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.Strategy.Steps[2].Drift = magosv1.DriftBlock },
			ws:      func(ws map[Key]*Workspace) { *ws[z] = ws[z].with(driftedAt("dd-z")) },
			reason:  magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c),
		},
		{
			name: "warn: drift is listed, and the step goes on", drift: magosv1.DriftWarn,
			ws:     func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason: magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c), drifted: []string{bName},
		},
		{
			name: "warn is the default", drift: "",
			ws:     func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason: magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c), drifted: []string{bName},
		},
		{
			name: "warn: an accepted drift is not listed", drift: magosv1.DriftWarn,
			rollout: func(ro *magosv1.Rollout) { ro.Spec.DriftAcceptances = []magosv1.DriftAcceptance{accept(b, "dd-b")} },
			ws:      func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason:  magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c),
		},
		{
			name: "ignore: nothing is listed, and the step goes on", drift: magosv1.DriftIgnore,
			ws:     func(ws map[Key]*Workspace) { *ws[b] = ws[b].with(driftedAt("dd-b")) },
			reason: magosv1.ReasonLevelProgressing, phase: magosv1.StepProgressing, grants: full(b, c),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prod := stepSpec("prod", "env", "prod")
			prod.Drift = tc.drift
			ro := rolloutOf(stepSpec("dev", "env", "dev"), prod, stepSpec("after", "env", "after"))
			ro.Status.Revisions = []magosv1.RolloutRevision{{RepoURL: testSource.RepoURL, TargetRevision: testSource.Ref, Commit: "rev-1"}}
			if tc.rollout != nil {
				tc.rollout(ro)
			}
			ws := []Workspace{
				newWS("c1", "a", "env", "dev").with(appliedOK),
				newWS("c2", "b", "env", "prod").with(func(w *Workspace) { w.ObservedRevision = "rev-1" }),
				newWS("c3", "c", "env", "prod"),
				newWS("c1", "z", "env", "after"),
			}
			byKey := map[Key]*Workspace{}
			for i := range ws {
				byKey[ws[i].Key] = &ws[i]
			}
			tc.ws(byKey)
			cs := clusters("c1", "c2", "c3")
			if tc.down != "" {
				cs[tc.down] = Cluster{Name: tc.down, Synced: true, Labels: map[string]string{"name": tc.down}}
			}
			d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Workspaces: ws, Clusters: cs, Now: randomEpoch})
			assertStatus(t, d, magosv1.PhaseReconciling, tc.reason, 1)
			if got := d.Steps[1].Phase; got != tc.phase {
				t.Errorf("step prod is %s, want %s", got, tc.phase)
			}
			if got := shapes(d.Grants); !slices.Equal(got, tc.grants) && len(got)+len(tc.grants) > 0 {
				t.Errorf("grants %+v, want %+v", got, tc.grants)
			}
			assertKeys(t, "revocations", keysOf(d.Revokes), tc.revokes)
			if got := d.Steps[1].Drifted; !slices.Equal(got, tc.drifted) {
				t.Errorf("prod's drifted %v, want %v", got, tc.drifted)
			}
			if len(d.Steps[0].Drifted) > 0 {
				t.Errorf("dev's drifted %v, want none", d.Steps[0].Drifted)
			}
			if tc.reason == magosv1.ReasonDriftDetected {
				for _, want := range []string{bName, "magosctl rollout accept-drift payments-platform --step prod"} {
					if !strings.Contains(d.Message, want) {
						t.Errorf("message %q does not say %q", d.Message, want)
					}
				}
			}
			if tc.name == "block in a later step holds nothing now" && !slices.Equal(d.Steps[2].Drifted, []string{z.String()}) {
				t.Errorf("step after's drifted %v, want %v", d.Steps[2].Drifted, z)
			}
			// The decision stands once written: deciding again writes nothing (a held grant is
			// kept, not granted again).
			again := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro,
				Workspaces: applyWrites(ws, d, "rollout"), Clusters: cs, Now: randomEpoch})
			if again.HasWrites() || again.Reason != d.Reason {
				t.Errorf("deciding again: %s, grants %v, revocations %v", again.Reason, again.Grants, again.Revokes)
			}
		})
	}
}

// TestDecideDriftListsAreCut: the DriftDetected message names five drifted Workspaces and says
// how many more; the step's status lists at most 100, in key order.
func TestDecideDriftListsAreCut(t *testing.T) {
	prod := stepSpec("prod", "env", "prod")
	prod.Drift = magosv1.DriftBlock
	ro := rolloutOf(prod)
	var ws []Workspace
	for i := range 120 {
		ws = append(ws, newWS("c1", fmt.Sprintf("w%03d", i), "env", "prod").with(driftedAt("dd")))
	}
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Workspaces: ws, Clusters: clusters("c1"), Now: randomEpoch})
	assertStatus(t, d, magosv1.PhaseReconciling, magosv1.ReasonDriftDetected, 0)
	if !strings.Contains(d.Message, "120 Workspace(s) drifted") || !strings.Contains(d.Message, "c1/payments/w004, and 115 more") ||
		strings.Contains(d.Message, "w005") {
		t.Errorf("message %q: want 120 drifted, five named and 115 more", d.Message)
	}
	if got := d.Steps[0].Drifted; len(got) != 100 || got[0] != "c1/payments/w000" || got[99] != "c1/payments/w099" {
		t.Errorf("drifted lists %d: %v", len(got), got)
	}
	if len(d.Grants) > 0 {
		t.Errorf("grants %v in a blocked step", d.Grants)
	}
}
