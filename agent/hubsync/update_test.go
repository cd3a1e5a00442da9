package hubsync

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// updateTestCluster is the spoke's name in these tests; its mirrors live in its namespace on
// the hub.
const updateTestCluster = "eu"

// startHubAndSpoke starts a real hub and spoke API server (with the Magos CRDs) for a test and
// makes the cluster's namespace on the hub.
func startHubAndSpoke(t *testing.T) (hub client.WithWatch, spoke client.Client) {
	t.Helper()
	f := testenv.Start(t, localcluster.Options{Spokes: []string{updateTestCluster}})
	hub, err := client.NewWithWatch(f.Hub.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace(updateTestCluster)}}
	if err := hub.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return hub, f.Spokes[updateTestCluster].Client
}

// validSpec is a Workspace spec the API server takes (the demo's).
func validSpec() magosv1.WorkspaceSpec {
	_, ws := demoscenario.SpokeObjects("update", magosv1.Source{RepoURL: "file:///update", TargetRevision: "main"}, false)
	return ws.Spec
}

// TestMirrorMetadataWriteKeepsADecisionWrittenMeanwhile: the agent patches the mirror's
// metadata from a copy read before the hub granted a run on it (a real hub API server). The
// write is taken (it is not locked to the version the grant changed, so it costs no second
// attempt), it carries the new annotation up, and the grant stands.
func TestMirrorMetadataWriteKeepsADecisionWrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	hub, _ := startHubAndSpoke(t)
	m := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: mirror.Namespace(updateTestCluster), Name: "default.web",
		Labels: map[string]string{"region": "eu"}, Annotations: map[string]string{"owner": "a"}}, Spec: validSpec()}
	if err := hub.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
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
// nothing either; a new status of the spoke is written again. Hub and spoke are real API
// servers; only the hub cache behind is a stand-in (an interceptor answering reads with the
// copy from before the write), and the writes to the hub are counted on their way.
func TestNoWriteTwiceFromACacheBehind(t *testing.T) {
	ctx := context.Background()
	hubServer, spoke := startHubAndSpoke(t)
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"region": "eu"}}, Spec: validSpec()}
	if err := spoke.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	ws.Status.Phase, ws.Status.CurrentRunID = magosv1.PhasePending, "20261207T080000-0000aaaa"
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	want := desiredMirror(updateTestCluster, ws)
	m := &magosv1.Workspace{ObjectMeta: *want.ObjectMeta.DeepCopy(), Spec: want.Spec}
	if err := hubServer.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
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
	r := &syncer{cluster: updateTestCluster, namespace: mirror.Namespace(updateTestCluster), spoke: spoke, spokeLive: spoke,
		hub: hub, hubLive: hubServer}
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
