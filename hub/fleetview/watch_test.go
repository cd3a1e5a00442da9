package fleetview_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/pkg/keys"
)

// TestMembershipChanged: of a Workspace's updates, only those of its spec, labels or deletion
// can change the Project it counts in; its status and the hub's decisions cannot.
func TestMembershipChanged(t *testing.T) {
	base := func() *magosv1.Workspace {
		ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{
			Namespace: "magos-cluster-eu", Name: "web", Generation: 3, ResourceVersion: "10",
			Labels:      map[string]string{keys.Mirror: "true", keys.Cluster: "eu", "env": "prod"},
			Annotations: map[string]string{},
		}}
		ws.Spec.ProjectRef.Name = "web"
		ws.Status.Phase = magosv1.PhasePending
		return ws
	}
	cases := []struct {
		name   string
		change func(*magosv1.Workspace)
		want   bool
	}{
		{"nothing but the resourceVersion", func(*magosv1.Workspace) {}, false},
		{"status", func(ws *magosv1.Workspace) {
			ws.Status.Phase, ws.Status.CurrentRunID = magosv1.PhaseApplying, "20261204T100000-0000abcd"
		}, false},
		{"a decision annotation", func(ws *magosv1.Workspace) { ws.Annotations[keys.ExecutionAllowed] = "true" }, false},
		{"spec (projectRef)", func(ws *magosv1.Workspace) { ws.Spec.ProjectRef.Name, ws.Generation = "api", 4 }, true},
		{"a label", func(ws *magosv1.Workspace) { ws.Labels["env"] = "dev" }, true},
		{"the cluster label", func(ws *magosv1.Workspace) { delete(ws.Labels, keys.Cluster) }, true},
		{"deletion", func(ws *magosv1.Workspace) { now := metav1.Now(); ws.DeletionTimestamp = &now }, true},
	}
	p := fleetview.MembershipChanged()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, cur := base(), base()
			cur.ResourceVersion = "11"
			c.change(cur)
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != c.want {
				t.Errorf("update passes: %v, want %v", got, c.want)
			}
		})
	}
	if !p.Create(event.CreateEvent{Object: base()}) || !p.Delete(event.DeleteEvent{Object: base()}) {
		t.Error("creations and deletions must pass")
	}
}
