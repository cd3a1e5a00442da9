package fleet_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleet"
)

// TestWorkspaceTransform: the hub's caches keep Workspaces without managed fields and run
// records, and the rest of their status as it is.
func TestWorkspaceTransform(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "magos-agent"}}
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", ManagedFields: managed},
		Status: magosv1.WorkspaceStatus{Phase: magosv1.PhaseApplied, CurrentRunID: "r2",
			Runs: []magosv1.RunRecord{{RunID: "r2"}, {RunID: "r1"}}},
	}
	out, err := fleet.WorkspaceTransform()(ws)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*magosv1.Workspace)
	if got.Status.Runs != nil || got.ManagedFields != nil {
		t.Fatalf("cached Workspace keeps runs %v, managed fields %v", got.Status.Runs, got.ManagedFields)
	}
	if got.Status.Phase != magosv1.PhaseApplied || got.Status.CurrentRunID != "r2" || got.Name != "edge" {
		t.Fatalf("cached Workspace lost more than its runs: %+v", got)
	}
	// Anything else only loses its managed fields.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: managed}, Data: map[string]string{"k": "v"}}
	out, err = fleet.WorkspaceTransform()(cm)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.ConfigMap); got.ManagedFields != nil || got.Data["k"] != "v" {
		t.Fatalf("transformed ConfigMap %+v", got)
	}
}
