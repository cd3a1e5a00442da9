package project_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/project"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

var usEast, euWest, apSouth = dt.Regions[0], dt.Regions[1], dt.Regions[2]

func setup(mgr mcmanager.Manager) error {
	if err := rollout.SetupWithManager(mgr, rollout.Options{SkipNameValidation: true}); err != nil {
		return err
	}
	return project.SetupWithManager(mgr, project.Options{SkipNameValidation: true, ParallelGracePeriod: parallelGrace})
}

// parallelGrace is how long a new Project waits for its Rollout in these tests.
const parallelGrace = 5 * time.Second

// waitProject waits until the hub Project satisfies check.
func waitProject(t *testing.T, h *dt.Hub, ns, name string, check func(*magosv1.Project) error) *magosv1.Project {
	t.Helper()
	p := &magosv1.Project{}
	testenv.Eventually(t, 0, func() error {
		if err := h.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			return err
		}
		return check(p)
	})
	return p
}

func reason(want string) func(*magosv1.Project) error {
	return func(p *magosv1.Project) error {
		if p.Status.Reason != want {
			return fmt.Errorf("project is %s/%s, want %s", p.Status.Phase, p.Status.Reason, want)
		}
		return nil
	}
}

// granted waits until each Workspace (cluster/ns/name) has been granted exactly once, by by.
func granted(t *testing.T, g *dt.Grants, by string, ks ...string) {
	t.Helper()
	testenv.Eventually(t, 0, func() error {
		got := g.For(ks...)
		seen := map[string]int{}
		for _, e := range got {
			if e.By != by {
				return fmt.Errorf("%s granted by %q, want %q", e.Key, e.By, by)
			}
			seen[e.Key]++
		}
		for _, k := range ks {
			if seen[k] != 1 {
				return fmt.Errorf("%s granted %d times, want once (grants %v)", k, seen[k], got)
			}
		}
		return nil
	})
}

func noGrants(g *dt.Grants, ks ...string) func() error {
	return func() error {
		if got := g.For(ks...); len(got) > 0 {
			return fmt.Errorf("unexpected grants %v", got)
		}
		return nil
	}
}

func TestProject(t *testing.T) {
	h := dt.Start(t, dt.Regions...)
	agents, grants := h.StartAgents(t)
	mgr := h.StartManager(t, dt.ManagerOptions{Setup: setup})
	mgr.WaitEngaged(t, dt.Regions...)

	t.Run("without a Rollout every Workspace of the Project runs, in every cluster", func(t *testing.T) {
		ns := "parallel"
		h.Namespace(t, ns)
		var ks []string
		for _, r := range dt.Regions {
			agents[r].Hold(ns, "web")
			h.Create(t, r, dt.Workspace(ns, "web", "web", map[string]string{"env": "prod", "region": r}))
			ks = append(ks, dt.Key(r, ns, "web"))
		}
		h.CreateHub(t, dt.Project(ns, "web"))
		// All three are granted before any finishes: parallel.
		granted(t, grants, keys.GrantedByProject, ks...)
		for _, r := range dt.Regions {
			agents[r].Release(t, ns, "web")
		}
		p := waitProject(t, h, ns, "web", func(p *magosv1.Project) error {
			if p.Status.Workspaces != 3 || !slices.Equal(p.Status.Clusters, []string{apSouth, euWest, usEast}) {
				return fmt.Errorf("status counts %d Workspaces in %v", p.Status.Workspaces, p.Status.Clusters)
			}
			return reason(magosv1.ReasonDefaultParallel)(p)
		})
		if p.Status.Phase != magosv1.PhaseReady || p.Status.ObservedGeneration != p.Generation {
			t.Errorf("phase %s, observedGeneration %d; want Ready for %d", p.Status.Phase, p.Status.ObservedGeneration, p.Generation)
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, magosv1.ConditionReady); c == nil || c.Status != "True" || c.ObservedGeneration != p.Generation {
			t.Errorf("Ready condition %+v, want True", c)
		}
		if !controllerutil.ContainsFinalizer(p, keys.Finalizer) {
			t.Errorf("finalizers %v, want %s", p.Finalizers, keys.Finalizer)
		}
		testenv.Eventually(t, 0, func() error {
			notes := eventNotes(t, h, ns, "web")
			for _, r := range dt.Regions {
				want := "Granted: Granted run " + agents[r].Run(t, ns, "web") + " to " + dt.Key(r, ns, "web")
				if !slices.Contains(notes, want) {
					return fmt.Errorf("no Event %q in %q", want, notes)
				}
			}
			return nil
		})
		this := map[string]string{"namespace": ns, "name": "web"}
		if got := metricValue(t, "project_reconcile_total", map[string]string{"namespace": ns, "name": "web", "result": "success"}); got < 1 {
			t.Errorf("project_reconcile_total{result=success} = %v, want at least 1", got)
		}
		if got := metricValue(t, "project_workspace_count", this); got != 3 {
			t.Errorf("project_workspace_count = %v, want 3", got)
		}
		if got, ok := metricSeries(t, "project_managed_by_rollout", this); !ok || got != 0 {
			t.Errorf("project_managed_by_rollout = %v (present %v), want 0: parallel", got, ok)
		}
	})

	t.Run("Workspaces of another Project or namespace are never granted", func(t *testing.T) {
		ns, other := "isolation", "isolation-other"
		h.Namespace(t, ns)
		h.Namespace(t, other)
		prod := map[string]string{"env": "prod"}
		h.Create(t, usEast, dt.Workspace(ns, "web", "web", prod))
		h.Create(t, usEast, dt.Workspace(ns, "api", "api", prod))
		h.Create(t, euWest, dt.Workspace(other, "web", "web", prod))
		h.CreateHub(t, dt.Project(ns, "web"))
		granted(t, grants, keys.GrantedByProject, dt.Key(usEast, ns, "web"))
		testenv.Consistently(t, 3*time.Second, noGrants(grants, dt.Key(usEast, ns, "api"), dt.Key(euWest, other, "web")))
		waitProject(t, h, ns, "web", func(p *magosv1.Project) error {
			if p.Status.Workspaces != 1 {
				return fmt.Errorf("project counts %d Workspaces, want 1", p.Status.Workspaces)
			}
			return nil
		})
	})

	t.Run("a Workspace in an unavailable cluster waits for it", func(t *testing.T) {
		ns := "unavailable"
		h.Namespace(t, ns)
		h.SetAvailable(t, apSouth, false, magosv1.ReasonAgentSilent)
		t.Cleanup(func() { h.SetAvailable(t, apSouth, true, magosv1.ReasonReachable) })
		h.Create(t, usEast, dt.Workspace(ns, "web", "web", nil))
		h.Create(t, apSouth, dt.Workspace(ns, "web", "web", nil))
		h.CreateHub(t, dt.Project(ns, "web"))
		granted(t, grants, keys.GrantedByProject, dt.Key(usEast, ns, "web"))
		testenv.Consistently(t, 3*time.Second, noGrants(grants, dt.Key(apSouth, ns, "web")))
		h.SetAvailable(t, apSouth, true, magosv1.ReasonReachable)
		granted(t, grants, keys.GrantedByProject, dt.Key(apSouth, ns, "web"))
	})

	t.Run("a Project applied right after its Rollout never runs its Workspaces in parallel", func(t *testing.T) {
		ns := "together"
		h.Namespace(t, ns)
		dev, prod := dt.Key(usEast, ns, "web-dev"), dt.Key(euWest, ns, "web-prod")
		agents[usEast].Hold(ns, "web-dev")
		h.Create(t, usEast, dt.Workspace(ns, "web-dev", "web", map[string]string{"env": "dev"}))
		h.Create(t, euWest, dt.Workspace(ns, "web-prod", "web", map[string]string{"env": "prod"}))
		testenv.Eventually(t, 0, func() error { // both wait for a grant
			if agents[usEast].Run(t, ns, "web-dev") == "" || agents[euWest].Run(t, ns, "web-prod") == "" {
				return fmt.Errorf("no runs yet")
			}
			return nil
		})
		h.CreateHub(t, dt.Rollout(ns, "web", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prod"}))
		h.CreateHub(t, dt.Project(ns, "web"))
		granted(t, grants, keys.GrantedByRollout, dev)
		waitProject(t, h, ns, "web", reason(magosv1.ReasonManagedByRollout))
		testenv.Consistently(t, 2*time.Second, noGrants(grants, prod))
		agents[usEast].Release(t, ns, "web-dev")
		granted(t, grants, keys.GrantedByRollout, prod)
	})

	t.Run("a Project applied before its Rollout never runs its Workspaces in parallel", func(t *testing.T) {
		ns := "project-first"
		h.Namespace(t, ns)
		dev, prod := dt.Key(usEast, ns, "web-dev"), dt.Key(euWest, ns, "web-prod")
		agents[usEast].Hold(ns, "web-dev")
		h.Create(t, usEast, dt.Workspace(ns, "web-dev", "web", map[string]string{"env": "dev"}))
		h.Create(t, euWest, dt.Workspace(ns, "web-prod", "web", map[string]string{"env": "prod"}))
		h.CreateHub(t, dt.Project(ns, "web"))
		waitProject(t, h, ns, "web", func(p *magosv1.Project) error {
			if p.Status.Phase != magosv1.PhasePending || p.Status.Reason != magosv1.ReasonAwaitingRollout || p.Status.Workspaces != 2 {
				return fmt.Errorf("project is %s/%s with %d Workspaces, want Pending/AwaitingRollout with 2", p.Status.Phase, p.Status.Reason, p.Status.Workspaces)
			}
			return nil
		})
		if got := grants.For(dev, prod); len(got) > 0 {
			t.Fatalf("granted before the Rollout came: %v", got)
		}
		h.CreateHub(t, dt.Rollout(ns, "web", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prod"}))
		granted(t, grants, keys.GrantedByRollout, dev)
		waitProject(t, h, ns, "web", reason(magosv1.ReasonManagedByRollout))
		testenv.Consistently(t, parallelGrace, noGrants(grants, prod))
		agents[usEast].Release(t, ns, "web-dev")
		granted(t, grants, keys.GrantedByRollout, prod)
	})

	t.Run("a Rollout takes the Project over; once deleted, nothing runs until parallel is asked for", func(t *testing.T) {
		ns := "managed"
		h.Namespace(t, ns)
		dev, extra := dt.Key(usEast, ns, "web-dev"), dt.Key(euWest, ns, "web-extra")
		h.CreateHub(t, dt.Rollout(ns, "web", []string{"dev"}, map[string]string{"env": "dev"}))
		h.CreateHub(t, dt.Project(ns, "web"))
		waitProject(t, h, ns, "web", reason(magosv1.ReasonManagedByRollout))
		testenv.Eventually(t, 0, func() error {
			if got := metricValue(t, "project_managed_by_rollout", map[string]string{"namespace": ns, "name": "web"}); got != 1 {
				return fmt.Errorf("project_managed_by_rollout = %v, want 1", got)
			}
			return nil
		})
		h.Create(t, usEast, dt.Workspace(ns, "web-dev", "web", map[string]string{"env": "dev"}))
		// Matched by no step of the Rollout: under the Rollout nobody grants it.
		h.Create(t, euWest, dt.Workspace(ns, "web-extra", "web", map[string]string{"env": "extra"}))
		granted(t, grants, keys.GrantedByRollout, dev)
		testenv.Consistently(t, 3*time.Second, noGrants(grants, extra))

		ro := &magosv1.Rollout{}
		ro.Namespace, ro.Name = ns, "web"
		if err := h.Client.Delete(context.Background(), ro); err != nil {
			t.Fatalf("deleting the Rollout: %v", err)
		}
		p := waitProject(t, h, ns, "web", reason(magosv1.ReasonRolloutRemoved))
		if p.Status.Phase != magosv1.PhasePending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(grants, extra))
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, keys.Orchestration, keys.OrchestrationParallel))
		if err := h.Client.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("asking for parallel mode: %v", err)
		}
		waitProject(t, h, ns, "web", reason(magosv1.ReasonDefaultParallel))
		granted(t, grants, keys.GrantedByProject, extra)
	})

	t.Run("deleting a Project removes its finalizer and leaves its Workspaces alone", func(t *testing.T) {
		ns := "deletion"
		h.Namespace(t, ns)
		agents[usEast].Pause(ns, "web")
		h.Create(t, usEast, dt.Workspace(ns, "web", "web", nil))
		h.CreateHub(t, dt.Project(ns, "web"))
		granted(t, grants, keys.GrantedByProject, dt.Key(usEast, ns, "web"))
		p := waitProject(t, h, ns, "web", func(p *magosv1.Project) error {
			if !controllerutil.ContainsFinalizer(p, keys.Finalizer) {
				return fmt.Errorf("no finalizer yet")
			}
			return nil
		})
		if err := h.Client.Delete(context.Background(), p); err != nil {
			t.Fatalf("deleting the Project: %v", err)
		}
		testenv.Eventually(t, 0, func() error {
			err := h.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, &magosv1.Project{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("project still there (%v)", err)
		})
		ws := &magosv1.Workspace{}
		if err := h.Fleet.Spokes[usEast].Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, ws); err != nil {
			t.Fatalf("the Workspace is gone: %v", err)
		}
		if ws.Annotations[keys.ExecutionAllowed] != "true" || ws.Annotations[keys.GrantedBy] != keys.GrantedByProject {
			t.Errorf("the Workspace's decision changed: %v", ws.Annotations)
		}
	})
}

// eventNotes returns "reason: note" of the Events regarding the hub Project ns/name.
func eventNotes(t *testing.T, h *dt.Hub, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := h.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing Events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Project" && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// metricValue returns the value of a counter or gauge of the controller-runtime registry whose
// labels include labels, or 0 when it has no such series.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := metricSeries(t, name, labels)
	return v
}

// metricSeries returns the value of a counter or gauge of the controller-runtime registry whose
// labels include labels, and whether there is such a series.
func metricSeries(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && have[k] == v
			}
			if !match {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
