package hubcontrollers_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/devfleet"
)

// parallelGrace is how long a new Project waits for its Rollout in these tests (the hub's
// projectParallelGracePeriod).
const parallelGrace = 5 * time.Second

// waitProject waits until the hub Project satisfies check.
func (w *world) waitProject(t *testing.T, ns, name string, check func(*magosv1.Project) error) *magosv1.Project {
	t.Helper()
	p := &magosv1.Project{}
	testenv.Eventually(t, wait, func() error {
		if err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
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
func (w *world) granted(t *testing.T, by string, ks ...string) {
	t.Helper()
	testenv.Eventually(t, wait, func() error {
		got := w.grants.For(ks...)
		seen := map[string]int{}
		for _, e := range got {
			if e.By != by {
				return fmt.Errorf("%s granted by %q, want %q", e.Key, e.By, by)
			}
			seen[e.Key]++
		}
		for _, k := range ks {
			if seen[k] != 1 {
				return fmt.Errorf("%s granted %d times, want once (grants %v)", k, seen[k], keysOf(got))
			}
		}
		return nil
	})
}

// prodAfterDev releases the held web-dev and checks that the Rollout then grants web-prod, which
// applies after web-dev.
func (w *world) prodAfterDev(t *testing.T, ns, dev, prod string) {
	t.Helper()
	w.Release(t, usEast, ns, "web-dev")
	w.granted(t, keys.GrantedByRollout, prod)
	w.waitApplied(t, euWest, ns, "web-prod")
	assertOrder(t, "apply", w.Applies(t, ns), []string{dev}, []string{prod})
}

// waitApplied waits until a spoke Workspace is Applied.
func (w *world) waitApplied(t *testing.T, cluster, ns, name string) {
	t.Helper()
	testenv.Eventually(t, wait, func() error {
		ws := &magosv1.Workspace{}
		if err := w.f.Client(cluster).Get(w.ctx, types.NamespacedName{Namespace: ns, Name: name}, ws); err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhaseApplied {
			return fmt.Errorf("%s/%s in %s is %s", ns, name, cluster, ws.Status.Phase)
		}
		return nil
	})
}

func TestProject(t *testing.T) {
	w := start(t, devfleet.Options{ProjectParallelGracePeriod: parallelGrace})

	t.Run("without a Rollout every Workspace of the Project runs, in every cluster", func(t *testing.T) {
		ns := "parallel"
		w.Namespace(t, ns)
		var ks []string
		for _, r := range regions {
			w.Hold(t, r, ns, "web")
			w.Workspace(t, r, ns, "web", "web", map[string]string{"env": "prod", "region": r})
			ks = append(ks, key(r, ns, "web"))
		}
		w.WaitMirrored(t, ks...)
		w.CreateHub(t, projectOf(ns, "web", nil))
		// All three are granted, and apply together (held) before any finishes: parallel.
		w.granted(t, keys.GrantedByProject, ks...)
		testenv.Eventually(t, wait, func() error {
			if got := w.Applies(t, ns); len(got) != 3 {
				return fmt.Errorf("applies %v, want all three at once", got)
			}
			return nil
		})
		for _, r := range regions {
			w.Release(t, r, ns, "web")
		}
		for _, r := range regions {
			w.waitApplied(t, r, ns, "web")
		}
		p := w.waitProject(t, ns, "web", func(p *magosv1.Project) error {
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
		testenv.Eventually(t, wait, func() error {
			notes := w.eventNotes(t, ns, "Project", "web")
			// One Granted Event per write pass names every grant of the pass.
			for _, r := range regions {
				want := "run " + w.SpokeWorkspace(t, r, ns, "web").Status.CurrentRunID + " to " + key(r, ns, "web")
				if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, "Granted: ") && strings.Contains(n, want) }) {
					return fmt.Errorf("no Granted Event names %q in %q", want, notes)
				}
			}
			return nil
		})
		this := map[string]string{"namespace": ns, "name": "web"}
		if got := w.metricValue(t, "magos_project_reconciles_total", map[string]string{"namespace": ns, "name": "web", "result": "success"}); got < 1 {
			t.Errorf("project_reconcile_total{result=success} = %v, want at least 1", got)
		}
		if got := w.metricValue(t, "magos_project_workspaces", this); got != 3 {
			t.Errorf("magos_project_workspaces = %v, want 3", got)
		}
		if got, ok := w.metric(t, "magos_project_managed_by_rollout", this); !ok || got != 0 {
			t.Errorf("project_managed_by_rollout = %v (present %v), want 0: parallel", got, ok)
		}
	})

	t.Run("Workspaces of another Project or namespace are never granted", func(t *testing.T) {
		ns, other := "isolation", "isolation-other"
		w.Namespace(t, ns)
		w.Namespace(t, other)
		prod := map[string]string{"env": "prod"}
		w.Workspace(t, usEast, ns, "web", "web", prod)
		w.Workspace(t, usEast, ns, "api", "api", prod)
		w.Workspace(t, euWest, other, "web", "web", prod)
		w.WaitMirrored(t, key(usEast, ns, "web"), key(usEast, ns, "api"), key(euWest, other, "web"))
		w.CreateHub(t, projectOf(ns, "web", nil))
		w.granted(t, keys.GrantedByProject, key(usEast, ns, "web"))
		testenv.Consistently(t, 3*time.Second, noGrants(w.grants, key(usEast, ns, "api"), key(euWest, other, "web")))
		w.waitProject(t, ns, "web", func(p *magosv1.Project) error {
			if p.Status.Workspaces != 1 {
				return fmt.Errorf("project counts %d Workspaces, want 1", p.Status.Workspaces)
			}
			return nil
		})
	})

	t.Run("a Workspace in an unavailable cluster waits for it", func(t *testing.T) {
		ns := "unavailable"
		w.Namespace(t, ns)
		w.Workspace(t, usEast, ns, "web", "web", nil)
		w.Workspace(t, apSouth, ns, "web", "web", nil)
		w.WaitMirrored(t, key(usEast, ns, "web"), key(apSouth, ns, "web"))
		resume := w.Stop(t, apSouth)
		w.WaitAvailable(t, apSouth, false)
		w.CreateHub(t, projectOf(ns, "web", nil))
		w.granted(t, keys.GrantedByProject, key(usEast, ns, "web"))
		testenv.Consistently(t, 3*time.Second, func() error {
			// Read on the hub: the stopped agent could not carry a grant down anyway.
			if a, err := w.mirrorGrant(apSouth, ns, "web"); err != nil || len(a) > 0 {
				return fmt.Errorf("ap-south-1 granted on the hub while its agent is silent: %v (%v)", a, err)
			}
			return nil
		})
		resume()
		w.granted(t, keys.GrantedByProject, key(apSouth, ns, "web"))
	})

	t.Run("a Project applied right after its Rollout never runs its Workspaces in parallel", func(t *testing.T) {
		ns := "together"
		dev, prod := w.devProd(t, ns, true)
		w.CreateHub(t, devProdRollout(ns))
		w.CreateHub(t, projectOf(ns, "web", nil))
		w.granted(t, keys.GrantedByRollout, dev)
		w.waitProject(t, ns, "web", reason(magosv1.ReasonManagedByRollout))
		testenv.Consistently(t, 2*time.Second, noGrants(w.grants, prod))
		w.prodAfterDev(t, ns, dev, prod)
	})

	t.Run("a Project applied before its Rollout never runs its Workspaces in parallel", func(t *testing.T) {
		ns := "project-first"
		dev, prod := w.devProd(t, ns, true)
		w.CreateHub(t, projectOf(ns, "web", nil))
		w.waitProject(t, ns, "web", func(p *magosv1.Project) error {
			if p.Status.Phase != magosv1.PhasePending || p.Status.Reason != magosv1.ReasonAwaitingRollout || p.Status.Workspaces != 2 {
				return fmt.Errorf("project is %s/%s with %d Workspaces, want Pending/AwaitingRollout with 2", p.Status.Phase, p.Status.Reason, p.Status.Workspaces)
			}
			return nil
		})
		if got := w.grants.For(dev, prod); len(got) > 0 {
			t.Fatalf("granted before the Rollout came: %v", keysOf(got))
		}
		w.CreateHub(t, devProdRollout(ns))
		w.granted(t, keys.GrantedByRollout, dev)
		w.waitProject(t, ns, "web", reason(magosv1.ReasonManagedByRollout))
		testenv.Consistently(t, parallelGrace, noGrants(w.grants, prod))
		w.prodAfterDev(t, ns, dev, prod)
	})

	t.Run("a Rollout takes the Project over; once deleted, nothing runs until parallel is asked for", func(t *testing.T) {
		ns := "managed"
		w.Namespace(t, ns)
		dev, extra := key(usEast, ns, "web-dev"), key(euWest, ns, "web-extra")
		w.CreateHub(t, hubtest.Rollout(ns, "web", []string{"dev"}, map[string]string{"env": "dev"}))
		w.CreateHub(t, projectOf(ns, "web", nil))
		w.waitProject(t, ns, "web", reason(magosv1.ReasonManagedByRollout))
		testenv.Eventually(t, wait, func() error {
			if got := w.metricValue(t, "magos_project_managed_by_rollout", map[string]string{"namespace": ns, "name": "web"}); got != 1 {
				return fmt.Errorf("project_managed_by_rollout = %v, want 1", got)
			}
			return nil
		})
		w.Workspace(t, usEast, ns, "web-dev", "web", map[string]string{"env": "dev"})
		// Matched by no step of the Rollout: under the Rollout nobody grants it.
		w.Workspace(t, euWest, ns, "web-extra", "web", map[string]string{"env": "extra"})
		w.granted(t, keys.GrantedByRollout, dev)
		w.WaitMirrored(t, extra)
		// Under a Rollout the Project only counts its Workspaces, and still counts those that
		// join it when they do: well before its next resync (a minute) would.
		testenv.Eventually(t, 20*time.Second, func() error {
			p := &magosv1.Project{}
			if err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: ns, Name: "web"}, p); err != nil {
				return err
			}
			if p.Status.Workspaces != 2 || !slices.Equal(p.Status.Clusters, []string{euWest, usEast}) {
				return fmt.Errorf("project counts %d Workspaces in %v, want 2 in %v", p.Status.Workspaces, p.Status.Clusters, []string{euWest, usEast})
			}
			return nil
		})
		testenv.Consistently(t, 3*time.Second, noGrants(w.grants, extra))

		ro := &magosv1.Rollout{}
		ro.Namespace, ro.Name = ns, "web"
		if err := w.f.Client("hub").Delete(w.ctx, ro); err != nil {
			t.Fatalf("deleting the Rollout: %v", err)
		}
		p := w.waitProject(t, ns, "web", reason(magosv1.ReasonRolloutRemoved))
		if p.Status.Phase != magosv1.PhasePending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(w.grants, extra))
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, keys.Orchestration, keys.OrchestrationParallel))
		if err := w.f.Client("hub").Patch(w.ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("asking for parallel mode: %v", err)
		}
		w.waitProject(t, ns, "web", reason(magosv1.ReasonDefaultParallel))
		w.granted(t, keys.GrantedByProject, extra)
		w.waitApplied(t, euWest, ns, "web-extra")
	})

	t.Run("deleting a Project removes its finalizer and leaves its Workspaces alone; created again, it waits", func(t *testing.T) {
		ns := "deletion"
		w.Namespace(t, ns)
		w.Workspace(t, usEast, ns, "web", "web", nil)
		w.WaitMirrored(t, key(usEast, ns, "web"))
		w.CreateHub(t, projectOf(ns, "web", nil))
		w.granted(t, keys.GrantedByProject, key(usEast, ns, "web"))
		w.waitApplied(t, usEast, ns, "web")
		p := w.waitProject(t, ns, "web", func(p *magosv1.Project) error {
			if !controllerutil.ContainsFinalizer(p, keys.Finalizer) {
				return fmt.Errorf("no finalizer yet")
			}
			return nil
		})
		if err := w.f.Client("hub").Delete(w.ctx, p); err != nil {
			t.Fatalf("deleting the Project: %v", err)
		}
		testenv.Eventually(t, wait, func() error {
			err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &magosv1.Project{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("project still there (%v)", err)
		})
		ws := w.SpokeWorkspace(t, usEast, ns, "web")
		if ws.Annotations[keys.ExecutionAllowed] != "true" || ws.Annotations[keys.GrantedBy] != keys.GrantedByProject {
			t.Errorf("the Workspace's decision changed: %v", ws.Annotations)
		}
		if got := w.Applies(t, ns); len(got) != 1 {
			t.Errorf("applies %v, want one", got)
		}

		// Created again, without a Rollout, over a Workspace that applied before and a new one:
		// it waits, saying why, past its grace period, and grants nothing until asked for
		// parallel mode. (Before, it ran the new Workspace in parallel after its grace period.)
		fresh := key(usEast, ns, "web-2")
		w.Workspace(t, usEast, ns, "web-2", "web", nil)
		w.WaitMirrored(t, fresh)
		w.CreateHub(t, projectOf(ns, "web", nil))
		p = w.waitProject(t, ns, "web", func(p *magosv1.Project) error {
			if p.Status.Reason != magosv1.ReasonAwaitingRollout || !strings.Contains(p.Status.Message, "applied before") {
				return fmt.Errorf("project is %s/%s (%s), want AwaitingRollout saying its Workspaces applied before", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return nil
		})
		testenv.Consistently(t, 2*parallelGrace, noGrants(w.grants, fresh))
		if got := w.waitProject(t, ns, "web", reason(magosv1.ReasonAwaitingRollout)); got.Status.Phase != magosv1.PhasePending {
			t.Errorf("phase %s past the grace period, want Pending", got.Status.Phase)
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, keys.Orchestration, keys.OrchestrationParallel))
		if err := w.f.Client("hub").Patch(w.ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("asking for parallel mode: %v", err)
		}
		w.granted(t, keys.GrantedByProject, fresh)
	})
}
