package fleetview_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestGrantIsFencedToTheVersionDecidedOn: a grant is written only on the version of the
// Workspace the decision saw. If the Workspace changed between the snapshot and the write, the
// API server refuses the grant and nothing is granted; a decision on the new version grants it,
// naming the commit.
func TestGrantIsFencedToTheVersionDecidedOn(t *testing.T) {
	const region, ns = "us-east-1", "fence"
	h, mgr, spoke := startSpoke(t, region, ns)
	ctx := context.Background()

	ws := dt.Workspace(ns, "web", "web", map[string]string{"env": "prod"})
	h.Create(t, region, ws)
	ws.Status.Phase, ws.Status.CurrentRunID = magosv1.PhasePending, "20261203T100000-0000abcd"
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	key := decision.Key{Cluster: region, Namespace: ns, Name: "web"}
	view := fleetview.NewView(mgr.Manager, fleetview.ViewOptions{})
	snapshot := func(wantRV string) *fleetview.Snapshot {
		var snap *fleetview.Snapshot
		testenv.Eventually(t, 0, func() error {
			s, err := view.Snapshot(ctx, ns, "web")
			if err != nil {
				return err
			}
			if tg, ok := s.Targets[key]; !ok || tg.Workspace.ResourceVersion != wantRV {
				return fmt.Errorf("the snapshot does not show version %s of the Workspace yet", wantRV)
			}
			snap = s
			return nil
		})
		return snap
	}
	grant := decision.Decision{Members: []decision.Key{key},
		Grants: []decision.Change{{Key: key, Run: ws.Status.CurrentRunID, Revision: "0123456789abcdef0123456789abcdef01234567"}}}
	annotations := func() map[string]string {
		var cur magosv1.Workspace
		if err := spoke.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &cur); err != nil {
			t.Fatal(err)
		}
		return cur.Annotations
	}

	stale := snapshot(ws.ResourceVersion)
	// The Workspace moves on after the decision was made (here: its labels change).
	patch := []byte(`{"metadata":{"labels":{"env":"staging"}}}`)
	if err := spoke.Patch(ctx, ws, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	out, err := stale.Write(ctx, grant, fleetview.WriteOptions{By: keys.GrantedByRollout})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if len(out.Granted) != 0 || annotations()[keys.ExecutionAllowed] != "" {
		t.Fatalf("granted on a version the decision did not see: outcome %+v, annotations %v", out, annotations())
	}

	fresh := snapshot(ws.ResourceVersion)
	if out, err = fresh.Write(ctx, grant, fleetview.WriteOptions{By: keys.GrantedByRollout}); err != nil || len(out.Granted) != 1 {
		t.Fatalf("a decision on the current version granted %+v (%v)", out, err)
	}
	a := annotations()
	if a[keys.ExecutionAllowed] != "true" || a[keys.GrantedRun] != ws.Status.CurrentRunID || a[keys.GrantedRevision] != grant.Grants[0].Revision {
		t.Fatalf("annotations %v, want the grant of run %s at the commit", a, ws.Status.CurrentRunID)
	}
}

// TestPausingRevokesOnlyGrantsThatCouldRun: a paused Rollout, decided from the hub's snapshot,
// revokes the grant of a run that has not started, and the writer records a Revoked Event on
// the Rollout for it; the grant of a run that has applied can start nothing (run IDs are never
// reused) and is left where it is, with no write and no Event.
func TestPausingRevokesOnlyGrantsThatCouldRun(t *testing.T) {
	const region, ns = "us-east-1", "spent"
	h, mgr, spoke := startSpoke(t, region, ns)
	ctx := context.Background()

	// web-done applied the run it was granted; web-waiting holds a grant it has not started.
	runs := map[string]magosv1.Phase{"web-done": magosv1.PhaseApplied, "web-waiting": magosv1.PhasePending}
	for name, phase := range runs {
		ws := dt.Workspace(ns, name, "web", map[string]string{"env": "prod"})
		ws.Annotations = map[string]string{keys.ExecutionAllowed: "true", keys.GrantedRun: "20261203T100000-" + name, keys.GrantedBy: keys.GrantedByRollout}
		h.Create(t, region, ws)
		ws.Status.Phase, ws.Status.CurrentRunID = phase, "20261203T100000-"+name
		if err := spoke.Status().Update(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	view := fleetview.NewView(mgr.Manager, fleetview.ViewOptions{})
	var snap *fleetview.Snapshot
	testenv.Eventually(t, 0, func() error {
		s, err := view.Snapshot(ctx, ns, "web")
		if err != nil {
			return err
		}
		for name, phase := range runs {
			if tg, ok := s.Targets[decision.Key{Cluster: region, Namespace: ns, Name: name}]; !ok || tg.Workspace.Status.Phase != phase {
				return fmt.Errorf("the snapshot does not show %s %s yet", name, phase)
			}
		}
		snap = s
		return nil
	})
	ro := &magosv1.Rollout{}
	ro.Namespace, ro.Name = ns, "web"
	ro.Spec.ProjectRef, ro.Spec.Paused = "web", true
	ro.Spec.Strategy.Steps = []magosv1.RolloutStep{{Name: "prod", Selector: magosv1.LabelSelector{MatchLabels: map[string]magosv1.LabelValue{"env": "prod"}}}}
	d := decision.Decide(decision.Input{Namespace: ns, Project: "web", Rollout: ro, Clusters: snap.Clusters, Workspaces: snap.Workspaces, Now: time.Now()})
	if d.Reason != magosv1.ReasonPaused {
		t.Fatalf("decided %s (%s), want Paused", d.Reason, d.Message)
	}
	recorder := events.NewFakeRecorder(10)
	out, err := snap.Write(ctx, d, fleetview.WriteOptions{By: keys.GrantedByRollout, Recorder: recorder, Regarding: ro})
	if err != nil || len(out.Revoked) != 1 || out.Revoked[0].Key.Name != "web-waiting" {
		t.Fatalf("revoked %+v (%v), want the grant of web-waiting only", out.Revoked, err)
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	want := "Normal Revoked Revoked the grant of " + region + "/" + ns + "/web-waiting"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Events %q, want only %q", got, want)
	}
	done := &magosv1.Workspace{}
	if err := spoke.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-done"}, done); err != nil {
		t.Fatal(err)
	}
	if done.Annotations[keys.GrantedRun] != "20261203T100000-web-done" {
		t.Fatalf("the spent grant of web-done was removed: %v", done.Annotations)
	}
}

// startSpoke starts a hub with one spoke, region, holding namespace ns, and a hub manager
// (no controllers) that has engaged it; it returns them and the spoke's client.
func startSpoke(t *testing.T, region, ns string) (*dt.Hub, *dt.Manager, client.Client) {
	t.Helper()
	h := dt.Start(t, region)
	mgr := h.StartManager(t, dt.ManagerOptions{Setup: func(mcmanager.Manager) error { return nil }})
	mgr.WaitEngaged(t, region)
	h.Namespace(t, ns)
	return h, mgr, h.Fleet.Spokes[region].Client
}
