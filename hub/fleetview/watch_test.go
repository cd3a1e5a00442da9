package fleetview_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
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

// TestClusterHealthEnqueuesTheDecisionsInvolved: a change of a cluster's health alone enqueues
// only the hub objects the caller keeps, told truthfully whether their Project has a Workspace
// in that cluster. A new registration (labels), a creation, a deletion, and a change of a
// cluster whose Workspaces cannot be read enqueue every object.
func TestClusterHealthEnqueuesTheDecisionsInvolved(t *testing.T) {
	const east, west, ns = "us-east-1", "eu-west-1", "cluster-health"
	h := dt.Start(t, east, west)
	mgr := h.StartManager(t, dt.ManagerOptions{Setup: func(mcmanager.Manager) error { return nil }})
	mgr.WaitEngaged(t, east, west)
	h.Namespace(t, ns)
	h.Create(t, east, dt.Workspace(ns, "web-1", "web", nil))
	h.Create(t, west, dt.Workspace(ns, "api-1", "api", nil))
	for _, name := range []string{"web", "api", "db"} {
		h.CreateHub(t, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}

	view := fleetview.NewView(mgr.Manager, fleetview.ViewOptions{})
	var told map[string]bool
	// The caller keeps the Projects with a Workspace in the cluster, and "db" always.
	hdl := view.EnqueueForCluster(&magosv1.ProjectList{}, func(o client.Object, hasWorkspaces bool) bool {
		told[o.GetName()] = hasWorkspaces
		return hasWorkspaces || o.GetName() == "db"
	})("", nil)
	enqueued := func(fire func(workqueue.TypedRateLimitingInterface[mcreconcile.Request])) []string {
		told = map[string]bool{}
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
		defer q.ShutDown()
		fire(q)
		var got []string
		for q.Len() > 0 {
			r, _ := q.Get()
			got = append(got, r.Name)
			q.Done(r)
		}
		slices.Sort(got)
		return got
	}
	cluster := func(name string, available metav1.ConditionStatus, labels map[string]string) *magosv1.Cluster {
		c := &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		c.Spec.Transport = magosv1.TransportDirect
		c.Status.Conditions = []metav1.Condition{{Type: magosv1.ConditionAvailable, Status: available, Reason: "Test"}}
		return c
	}
	flip := func(name string, labels map[string]string) func(q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
		return func(q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			hdl.Update(context.Background(), event.TypedUpdateEvent[client.Object]{
				ObjectOld: cluster(name, metav1.ConditionTrue, map[string]string{"tier": "1"}),
				ObjectNew: cluster(name, metav1.ConditionFalse, labels)}, q)
		}
	}
	all := []string{"api", "db", "web"}

	for _, c := range []struct {
		cluster string
		want    []string
		told    map[string]bool
	}{
		{east, []string{"db", "web"}, map[string]bool{"web": true, "api": false, "db": false}},
		{west, []string{"api", "db"}, map[string]bool{"web": false, "api": true, "db": false}},
	} {
		testenv.Eventually(t, 0, func() error {
			got := enqueued(flip(c.cluster, map[string]string{"tier": "1"}))
			if !slices.Equal(got, c.want) || !maps.Equal(told, c.told) {
				return fmt.Errorf("cluster %s turning unavailable enqueued %v, telling %v; want %v, telling %v", c.cluster, got, told, c.want, c.told)
			}
			return nil
		})
	}
	for name, fire := range map[string]func(workqueue.TypedRateLimitingInterface[mcreconcile.Request]){
		"new labels":            flip(east, map[string]string{"tier": "2"}),
		"a cluster not engaged": flip("nowhere", map[string]string{"tier": "1"}),
		"a creation": func(q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			hdl.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: cluster(east, metav1.ConditionTrue, nil)}, q)
		},
		"a deletion": func(q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			hdl.Delete(context.Background(), event.TypedDeleteEvent[client.Object]{Object: cluster(east, metav1.ConditionTrue, nil)}, q)
		},
	} {
		if got := enqueued(fire); !slices.Equal(got, all) {
			t.Errorf("%s enqueued %v, want every Project %v", name, got, all)
		}
	}
}
