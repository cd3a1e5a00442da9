package hubsync

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/scheme"
)

// TestMirrorMetadataWriteKeepsADecisionWrittenMeanwhile: the agent patches the mirror's
// metadata from a copy read before the hub granted a run on it. The write is taken (it is not
// locked to the version the grant changed, so it costs no second attempt), it carries the new
// annotation up, and the grant stands.
func TestMirrorMetadataWriteKeepsADecisionWrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	m := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "magos-cluster-eu", Name: "default.web",
		Labels: map[string]string{"region": "eu"}, Annotations: map[string]string{"owner": "a"}}}
	hub := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(m).Build()
	r := &syncer{hub: hub}
	read := &magosv1.Workspace{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(m), read); err != nil {
		t.Fatal(err)
	}
	// The hub grants a run after the agent read the mirror.
	granted := read.DeepCopy()
	granted.Annotations[keys.GrantedRun] = "20261207T070000-0000aaaa"
	if err := hub.Update(ctx, granted); err != nil {
		t.Fatal(err)
	}
	want := read.DeepCopy()
	want.Annotations = map[string]string{"owner": "a", keys.DetectedRevision: "4659a48b84df"}
	if err := r.updateMirror(ctx, read, want); err != nil {
		t.Fatalf("the metadata write on a copy read before a grant: %v", err)
	}
	got := &magosv1.Workspace{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[keys.DetectedRevision] != "4659a48b84df" {
		t.Errorf("the detected revision did not travel up: %v", got.Annotations)
	}
	if got.Annotations[keys.GrantedRun] != "20261207T070000-0000aaaa" {
		t.Errorf("the grant written meanwhile is gone: %v", got.Annotations)
	}
}

// TestNoWriteTwiceFromACacheBehind: the syncer writes a mirror's new status once. A pass that
// reads the mirror from a hub cache that does not show that write yet writes nothing (it would
// send the same status again); a pass on the cache that shows it finds it in sync and writes
// nothing either; a new status of the spoke is written again.
func TestNoWriteTwiceFromACacheBehind(t *testing.T) {
	ctx := context.Background()
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web", Generation: 1,
		Labels: map[string]string{"region": "eu"}}}
	ws.Status.Phase, ws.Status.CurrentRunID = magosv1.PhasePending, "20261207T080000-0000aaaa"
	spoke := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ws).WithStatusSubresource(ws).Build()
	want := desiredMirror("eu", ws)
	m := &magosv1.Workspace{ObjectMeta: *want.ObjectMeta.DeepCopy(), Spec: want.Spec}
	hubServer := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(m).WithStatusSubresource(m).Build()
	var stale *magosv1.Workspace // when set, the "cache" shows this copy
	writes := 0
	hub := interceptor.NewClient(hubServer, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if w, ok := obj.(*magosv1.Workspace); ok && stale != nil {
				stale.DeepCopyInto(w)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	r := &syncer{cluster: "eu", namespace: mirror.Namespace("eu"), spoke: spoke, spokeLive: spoke, hub: hub, hubLive: hubServer, now: time.Now}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ws)}
	pass := func(name string, wantWrites int) {
		t.Helper()
		writes = 0
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if writes != wantWrites {
			t.Errorf("%s: %d writes to the hub, want %d", name, writes, wantWrites)
		}
	}
	before := &magosv1.Workspace{}
	if err := hubServer.Get(ctx, client.ObjectKeyFromObject(m), before); err != nil {
		t.Fatal(err)
	}
	pass("the new status", 1)
	stale = before
	pass("a cache from before that write", 0)
	stale = nil
	pass("a cache that shows it", 0)
	ws.Status.Phase = magosv1.PhaseApplied
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	pass("the next status", 1)
}
