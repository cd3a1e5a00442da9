package decision

import (
	"reflect"
	"slices"
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

func spokeWorkspace() *magosv1.Workspace {
	ws := &magosv1.Workspace{}
	ws.Namespace, ws.Name, ws.Generation = "payments", "api", 4
	ws.Labels = map[string]string{"env": "prod", "region": "eu-west-1"}
	ws.Annotations = map[string]string{
		keys.ExecutionAllowed: "true",
		keys.GrantedRun:       "20240611T101010-deadbeef",
		keys.GrantedBy:        keys.GrantedByRollout,
		keys.DetectedRevision: "abc123",
		keys.ReconcileRequest: "2024-06-11T10:10:10Z",
	}
	ws.Spec.ProjectRef.Name = "payments-platform"
	ws.Status.Phase, ws.Status.Reason = magosv1.PhasePending, magosv1.ReasonNewRevisionDetected
	ws.Status.ObservedGeneration = 3
	ws.Status.CurrentRunID = "20240611T101010-deadbeef"
	ws.Status.ObservedRevision = "0ff1ce"
	return ws
}

// TestFromWorkspace checks that a spoke Workspace read directly and its hub mirror convert to
// the same Workspace: origin key and generation, own labels, status and decision annotations.
func TestFromWorkspace(t *testing.T) {
	spoke := spokeWorkspace()
	want := Workspace{
		Key:                Key{Cluster: "eu-west-1", Namespace: "payments", Name: "api"},
		Labels:             map[string]string{"env": "prod", "region": "eu-west-1"},
		ProjectRef:         "payments-platform",
		Phase:              magosv1.PhasePending,
		Reason:             magosv1.ReasonNewRevisionDetected,
		Generation:         4,
		ObservedGeneration: 3,
		RunID:              "20240611T101010-deadbeef",
		ObservedRevision:   "0ff1ce",
		DetectedRevision:   "abc123",
		Order:              []string{"abc123"},
		ReconcileRequested: true,
		Grant:              Grant{Allowed: true, Run: "20240611T101010-deadbeef", By: keys.GrantedByRollout},
	}

	m := spoke.DeepCopy()
	m.Namespace, m.Name, m.Generation = mirror.Namespace("eu-west-1"), mirror.Name(spoke.Namespace, spoke.Name), 1
	m.Labels = mirror.Labels("eu-west-1", spoke)
	m.Status.Origin = &magosv1.WorkspaceOrigin{Cluster: "eu-west-1", Namespace: "payments", Name: "api", Generation: 4}

	tests := []struct {
		name string
		ws   *magosv1.Workspace
	}{
		{"direct", spoke},
		{"mirror", m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FromWorkspace("eu-west-1", tt.ws); !reflect.DeepEqual(got, want) {
				t.Fatalf("FromWorkspace =\n%+v, want\n%+v", got, want)
			}
		})
	}
	if len(m.Labels) != 6 {
		t.Fatalf("FromWorkspace changed the mirror's labels: %v", m.Labels)
	}

	t.Run("no annotations", func(t *testing.T) {
		ws := spokeWorkspace()
		ws.Annotations = nil
		got := FromWorkspace("c1", ws)
		if got.Grant != (Grant{}) || got.DetectedRevision != "" || got.ReconcileRequested {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("execution-allowed other than true", func(t *testing.T) {
		ws := spokeWorkspace()
		ws.Annotations[keys.ExecutionAllowed] = "yes"
		ws.Annotations[keys.ReconcileRequest] = ""
		got := FromWorkspace("c1", ws)
		if got.Grant.Allowed || got.ReconcileRequested || !got.HasGrant() {
			t.Fatalf("got %+v", got)
		}
	})
}

// TestWorkspaceStates checks the state helpers Decide relies on.
func TestWorkspaceStates(t *testing.T) {
	tests := []struct {
		phase                      magosv1.Phase
		grantable, inFlight, fails bool
	}{
		{magosv1.PhasePending, true, false, false},
		{magosv1.PhasePlanning, false, true, false},
		{magosv1.PhasePlanned, false, true, false},
		{magosv1.PhaseApplying, false, true, false},
		{magosv1.PhaseApplied, false, false, false},
		{magosv1.PhaseFailed, false, false, true},
		{magosv1.PhaseValidationFailed, false, false, true},
		{magosv1.PhaseDeleting, false, false, false},
		{"", false, false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase)+"-", func(t *testing.T) {
			w := Workspace{Phase: tt.phase, RunID: "r"}
			if w.Grantable() != tt.grantable || w.InFlight() != tt.inFlight || w.Failed() != tt.fails {
				t.Fatalf("grantable %v in flight %v failed %v", w.Grantable(), w.InFlight(), w.Failed())
			}
			w.RunID = ""
			if w.Grantable() {
				t.Fatalf("grantable without a run")
			}
		})
	}
}

// TestFromWorkspaceOrder: Order is the Workspace's applied commits of its current source (as the
// agent keys them, gitrepo.CanonicalSource, whatever the spelling), then a detection other than
// the commit last applied; applied commits of another source do not count.
func TestFromWorkspaceOrder(t *testing.T) {
	ws := &magosv1.Workspace{}
	ws.Spec.Source = magosv1.Source{RepoURL: "git@example.com:org/infra.git", TargetRevision: "refs/heads/main"}
	ws.Status.ObservedRevision = "c2"
	ws.Annotations = map[string]string{keys.DetectedRevision: "c3"}
	for _, tc := range []struct {
		source string
		want   []string
	}{
		{gitrepo.CanonicalSource("https://example.com/org/infra", "main"), []string{"c1", "c2", "c3"}},
		{gitrepo.CanonicalSource("https://example.com/org/infra", "release"), []string{"c3"}},
	} {
		ws.Status.AppliedRevisions = &magosv1.AppliedRevisions{Source: tc.source, Commits: []string{"c1", "c2"}}
		if got := FromWorkspace("c", ws).Order; !slices.Equal(got, tc.want) {
			t.Errorf("applied %v of %s: Order %v, want %v", ws.Status.AppliedRevisions.Commits, tc.source, got, tc.want)
		}
	}
}

// TestFromWorkspaceDrift: a Workspace is Drifted only when its last drift check found drift at
// the commit it applied (status.drift.DriftedAt(status.observedRevision)), and then carries the
// check's plan digest and counts. A check of an older commit than the one applied now is a stale
// view (not drifted), as is a check that found none, failed or still runs.
func TestFromWorkspaceDrift(t *testing.T) {
	changes := &magosv1.ResourceChanges{Add: 1, Change: 2, Destroy: 3}
	for _, tc := range []struct {
		name  string
		drift *magosv1.DriftStatus
		want  bool
	}{
		{"no check", nil, false},
		{"drifted at the applied commit", &magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: "0ff1ce", PlanDigest: "dd1", ResourceChanges: changes}, true},
		{"drifted at an older commit: stale view", &magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: "0ld", PlanDigest: "dd1", ResourceChanges: changes}, false},
		{"no drift", &magosv1.DriftStatus{Result: magosv1.DriftResultNone, Revision: "0ff1ce", PlanDigest: "dd1"}, false},
		{"check failed", &magosv1.DriftStatus{Result: magosv1.DriftResultFailed, Revision: "0ff1ce", Message: "boom"}, false},
		{"first check runs", &magosv1.DriftStatus{Result: magosv1.DriftResultChecking, CheckingRunID: "r"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := spokeWorkspace()
			ws.Status.Drift = tc.drift
			got := FromWorkspace("c1", ws)
			want := Workspace{}
			if tc.want {
				want = Workspace{Drifted: true, DriftDigest: "dd1", DriftChanges: *changes}
			}
			if got.Drifted != want.Drifted || got.DriftDigest != want.DriftDigest || got.DriftChanges != want.DriftChanges {
				t.Fatalf("drifted %v digest %q changes %+v, want %v %q %+v",
					got.Drifted, got.DriftDigest, got.DriftChanges, want.Drifted, want.DriftDigest, want.DriftChanges)
			}
		})
	}
}
