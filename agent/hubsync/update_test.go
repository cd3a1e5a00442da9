package hubsync

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
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
