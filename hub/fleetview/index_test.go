package fleetview_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/magosfleet/magos/hub/fleetview"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestSnapshotReadsOneProject: a Snapshot holds the Workspaces of its Project only (read through
// fleetview.ProjectIndex), not the other Projects' of the namespace nor those of a Project of the
// same name in another namespace.
func TestSnapshotReadsOneProject(t *testing.T) {
	const region, ns, other = "us-east-1", "one-project", "another-namespace"
	h := dt.Start(t, region)
	mgr := h.StartManager(t, dt.ManagerOptions{Setup: func(mcmanager.Manager) error { return nil }})
	mgr.WaitEngaged(t, region)
	h.Namespace(t, ns)
	h.Namespace(t, other)
	h.Create(t, region, dt.Workspace(ns, "web-1", "web", nil))
	h.Create(t, region, dt.Workspace(ns, "web-2", "web", nil))
	h.Create(t, region, dt.Workspace(ns, "api-1", "api", nil))
	h.Create(t, region, dt.Workspace(other, "web-3", "web", nil))
	view := fleetview.NewView(mgr.Manager, fleetview.ViewOptions{})
	for project, want := range map[string][]string{"web": {"web-1", "web-2"}, "api": {"api-1"}, "none": nil} {
		testenv.Eventually(t, 0, func() error {
			s, err := view.Snapshot(context.Background(), ns, project)
			if err != nil {
				return err
			}
			var got []string
			for _, w := range s.Workspaces {
				got = append(got, w.Key.Namespace+"/"+w.Key.Name)
			}
			slices.Sort(got)
			var wantKeys []string
			for _, n := range want {
				wantKeys = append(wantKeys, ns+"/"+n)
			}
			if !slices.Equal(got, wantKeys) || len(s.Targets) != len(want) {
				return fmt.Errorf("Snapshot of Project %s/%s holds %v (%d targets), want %v", ns, project, got, len(s.Targets), wantKeys)
			}
			return nil
		})
	}
}
