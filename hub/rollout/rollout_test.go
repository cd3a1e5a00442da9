package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/project"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

var (
	usEast, euWest, apSouth = dt.Regions[0], dt.Regions[1], dt.Regions[2]
)

// setup registers the hub's Rollout and Project controllers.
func setup(mgr mcmanager.Manager) error {
	if err := rollout.SetupWithManager(mgr, rollout.Options{SkipNameValidation: true}); err != nil {
		return err
	}
	return project.SetupWithManager(mgr, project.Options{SkipNameValidation: true})
}

// assertOrder checks that the grants are exactly one per Workspace of steps (cluster/ns/name
// keys) and that no Workspace of a step was granted before every Workspace of the step before.
func assertOrder(t *testing.T, grants []dt.Grant, steps ...[]string) {
	t.Helper()
	stepOf := map[string]int{}
	want := 0
	for i, s := range steps {
		for _, k := range s {
			stepOf[k] = i
			want++
		}
	}
	seen := map[string]int{}
	last := 0
	for _, g := range grants {
		i, ok := stepOf[g.Key]
		if !ok {
			t.Errorf("unexpected grant of run %s to %s", g.Run, g.Key)
			continue
		}
		seen[g.Key]++
		if i < last {
			t.Errorf("grant to %s (step %d) after a grant of step %d: order %v", g.Key, i, last, keysOf(grants))
		}
		last = max(last, i)
		if n := stepOf[g.Key]; n > 0 {
			for _, prev := range steps[n-1] {
				if seen[prev] == 0 {
					t.Errorf("grant to %s before %s of the previous step was granted", g.Key, prev)
				}
			}
		}
	}
	for k := range stepOf {
		if seen[k] != 1 {
			t.Errorf("%s was granted %d times, want once: %v", k, seen[k], keysOf(grants))
		}
	}
	if len(grants) != want {
		t.Errorf("%d grants, want %d: %v", len(grants), want, keysOf(grants))
	}
}

func keysOf(gs []dt.Grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Key + "@" + g.Run
	}
	return out
}

// regions creates one Workspace per region (env=prod, region=<r>) named name in namespace ns,
// each in the spoke of its region, and returns their keys in region order.
func regions(t *testing.T, h *dt.Hub, ns, name, project string) []string {
	t.Helper()
	var out []string
	for _, r := range dt.Regions {
		h.Create(t, r, dt.Workspace(ns, name, project, map[string]string{"env": "prod", "region": r}))
		out = append(out, dt.Key(r, ns, name))
	}
	return out
}

// regionRollout is the multi-region sequential Rollout of the seed.
func regionRollout(ns, project string) *magosv1.Rollout {
	var sels []map[string]string
	for _, r := range dt.Regions {
		sels = append(sels, map[string]string{"env": "prod", "region": r})
	}
	return dt.Rollout(ns, project, dt.Regions, sels...)
}

func envRollout(ns, project string) *magosv1.Rollout {
	return dt.Rollout(ns, project, []string{"dev", "staging", "prod"},
		map[string]string{"env": "dev"}, map[string]string{"env": "staging"}, map[string]string{"env": "prod"})
}

// noGrants checks that none of the given Workspaces was granted.
func noGrants(g *dt.Grants, keys ...string) func() error {
	return func() error {
		if got := g.For(keys...); len(got) > 0 {
			return fmt.Errorf("unexpected grants: %v", keysOf(got))
		}
		return nil
	}
}

// annotations reads a spoke Workspace's annotations.
func annotations(h *dt.Hub, cluster, ns, name string) (map[string]string, error) {
	ws := &magosv1.Workspace{}
	if err := h.Fleet.Spokes[cluster].Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, ws); err != nil {
		return nil, err
	}
	return ws.Annotations, nil
}

func TestRollout(t *testing.T) {
	h := dt.Start(t, dt.Regions...)
	agents, grants := h.StartAgents(t)
	mgr := h.StartManager(t, dt.ManagerOptions{Setup: setup})
	mgr.WaitEngaged(t, dt.Regions...)

	t.Run("dev, staging, prod in order across clusters", func(t *testing.T) {
		ns := "envs"
		h.Namespace(t, ns)
		latencyBefore := histogramCount(t, "magos_hub_decision_latency_seconds")
		grantsBefore := metricValue(t, "magos_hub_grants_total", map[string]string{"by": keys.GrantedByRollout})
		h.Create(t, usEast, dt.Workspace(ns, "app-dev", "payments", map[string]string{"env": "dev"}))
		h.Create(t, euWest, dt.Workspace(ns, "app-staging", "payments", map[string]string{"env": "staging"}))
		h.Create(t, apSouth, dt.Workspace(ns, "app-prod", "payments", map[string]string{"env": "prod"}))
		h.CreateHub(t, envRollout(ns, "payments"))

		ro := h.WaitRollout(t, ns, "payments", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		assertOrder(t, grants.InNamespace(ns),
			[]string{dt.Key(usEast, ns, "app-dev")}, []string{dt.Key(euWest, ns, "app-staging")}, []string{dt.Key(apSouth, ns, "app-prod")})

		if ro.Status.CurrentStep != 3 || ro.Status.AppliedWorkspaces != 3 || ro.Status.TotalWorkspaces != 3 {
			t.Errorf("status: currentStep %d, applied %d/%d; want 3, 3/3", ro.Status.CurrentStep, ro.Status.AppliedWorkspaces, ro.Status.TotalWorkspaces)
		}
		for i, s := range ro.Status.Steps {
			if s.Phase != magosv1.StepCompleted || s.Matched != 1 || s.Applied != 1 || len(s.Clusters) != 1 || s.Clusters[0] != dt.Regions[i] {
				t.Errorf("step %d status %+v, want Completed 1/1 in %s", i, s, dt.Regions[i])
			}
		}
		ready := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionReady)
		if ready == nil || ready.Status != "True" || ready.ObservedGeneration != ro.Generation || ro.Status.ObservedGeneration != ro.Generation {
			t.Errorf("Ready condition %+v, observedGeneration %d; want True for generation %d", ready, ro.Status.ObservedGeneration, ro.Generation)
		}
		if ro.Status.LastReconcileTime == nil {
			t.Error("lastReconcileTime not set")
		}

		testenv.Eventually(t, 0, func() error {
			notes := eventNotes(t, h, ns, "Rollout", "payments")
			for _, want := range []string{
				"Granted: Granted run " + agents[usEast].Run(t, ns, "app-dev") + " to " + dt.Key(usEast, ns, "app-dev"),
				"Granted: Granted run " + agents[apSouth].Run(t, ns, "app-prod") + " to " + dt.Key(apSouth, ns, "app-prod"),
				"StepChanged: Step 2/3 staging is current",
				"RevisionChanged: Rolling out commit " + dt.Revision + " of https://git.example.com/infra.git (main)",
				"RolloutCompleted: All steps completed successfully",
			} {
				if !slices.Contains(notes, want) {
					return fmt.Errorf("no Event %q in %q", want, notes)
				}
			}
			return nil
		})
		if got := histogramCount(t, "magos_hub_decision_latency_seconds"); got < latencyBefore+3 {
			t.Errorf("decision latency observations went from %d to %d, want 3 more (one per grant)", latencyBefore, got)
		}
		this := map[string]string{"namespace": ns, "name": "payments"}
		if got := metricValue(t, "magos_hub_grants_total", map[string]string{"by": keys.GrantedByRollout}); got < grantsBefore+3 {
			t.Errorf("magos_hub_grants_total{by=rollout} went from %v to %v, want 3 more", grantsBefore, got)
		}
		if got := metricValue(t, "rollout_reconcile_total", map[string]string{"namespace": ns, "name": "payments", "result": "success"}); got < 1 {
			t.Errorf("rollout_reconcile_total{result=success} = %v, want at least 1", got)
		}
		if got := metricValue(t, "rollout_level_transitions_total", this); got < 3 {
			t.Errorf("rollout_level_transitions_total = %v, want at least 3 (dev to staging to prod to done)", got)
		}
		testenv.Eventually(t, 0, func() error {
			if got := metricValue(t, "rollout_current_level", this); got != 3 {
				return fmt.Errorf("rollout_current_level = %v, want 3 (the number of steps: completed)", got)
			}
			return nil
		})
	})

	t.Run("multi-region prod, one region per cluster, in order", func(t *testing.T) {
		ns := "regions"
		h.Namespace(t, ns)
		ks := regions(t, h, ns, "cdn", "cdn-platform")
		h.CreateHub(t, regionRollout(ns, "cdn-platform"))
		h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		assertOrder(t, grants.InNamespace(ns), ks[:1], ks[1:2], ks[2:])
	})

	t.Run("cohorts run in parallel across clusters, cohorts in order", func(t *testing.T) {
		ns := "cohorts"
		h.Namespace(t, ns)
		cohort := map[string][]string{}
		for _, env := range []string{"dev", "staging", "prod"} {
			for _, r := range dt.Regions {
				name := "svc-" + env
				h.Create(t, r, dt.Workspace(ns, name, "platform", map[string]string{"env": env, "region": r}))
				cohort[env] = append(cohort[env], dt.Key(r, ns, name))
				if env == "dev" {
					agents[r].Hold(ns, name)
				}
			}
		}
		h.CreateHub(t, envRollout(ns, "platform"))

		// The whole dev cohort is granted at once, across the three clusters, and runs
		// together while staging waits.
		h.WaitRollout(t, ns, "platform", func(ro *magosv1.Rollout) error {
			if len(ro.Status.Steps) != 3 {
				return fmt.Errorf("steps %+v", ro.Status.Steps)
			}
			s := ro.Status.Steps[0]
			if s.Phase != magosv1.StepProgressing || s.Matched != 3 || s.Running != 3 || s.Applied != 0 || len(s.Clusters) != 3 {
				return fmt.Errorf("dev step %+v, want Progressing with 3 running in 3 clusters", s)
			}
			if p := ro.Status.Steps[1]; p.Phase != magosv1.StepPending || p.Matched != 3 || p.Applied != 0 {
				return fmt.Errorf("staging step %+v, want Pending with 3 matched", p)
			}
			return nil
		})
		if got := grants.For(cohort["dev"]...); len(got) != 3 {
			t.Fatalf("dev grants %v, want 3", keysOf(got))
		}
		activeCount := func(want float64) func() error {
			return func() error {
				if got := metricValue(t, "rollout_active_count", nil); got != want {
					return fmt.Errorf("rollout_active_count = %v, want %v", got, want)
				}
				return nil
			}
		}
		testenv.Eventually(t, 0, activeCount(1)) // this one; the earlier ones completed
		testenv.Consistently(t, 2*time.Second, noGrants(grants, append(cohort["staging"], cohort["prod"]...)...))
		for _, r := range dt.Regions {
			agents[r].Release(t, ns, "svc-dev")
		}
		ro := h.WaitRollout(t, ns, "platform", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		testenv.Eventually(t, 0, activeCount(0))
		assertOrder(t, grants.InNamespace(ns), cohort["dev"], cohort["staging"], cohort["prod"])
		if ro.Status.AppliedWorkspaces != 9 || ro.Status.TotalWorkspaces != 9 {
			t.Errorf("applied %d/%d, want 9/9", ro.Status.AppliedWorkspaces, ro.Status.TotalWorkspaces)
		}
		for _, s := range ro.Status.Steps {
			if s.Phase != magosv1.StepCompleted || s.Matched != 3 || s.Applied != 3 || s.Running != 0 || s.Failed != 0 {
				t.Errorf("step %+v, want Completed 3/3", s)
			}
		}
	})

	t.Run("a failure in us-east-1 freezes the rollout before eu-west-1; a new run resumes it", func(t *testing.T) {
		ns := "failure"
		h.Namespace(t, ns)
		agents[usEast].FailNext(ns, "cdn")
		ks := regions(t, h, ns, "cdn", "cdn-platform")
		h.CreateHub(t, regionRollout(ns, "cdn-platform"))

		ro := h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseFailed, magosv1.ReasonStepFailed))
		if s := ro.Status.Steps[0]; s.Failed != 1 || s.Phase != magosv1.StepFailed || ro.Status.CurrentStepName != usEast {
			t.Errorf("step status %+v at %s, want us-east-1 Failed with 1 failed", s, ro.Status.CurrentStepName)
		}
		if c := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionReady); c == nil || c.Status != "False" {
			t.Errorf("Ready condition %+v, want False", c)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(grants, ks[1:]...))

		first := agents[usEast].Run(t, ns, "cdn")
		second := agents[usEast].NewRun(t, ns, "cdn", magosv1.ReasonRetryApply)
		h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		got := grants.InNamespace(ns)
		want := []string{ks[0] + "@" + first, ks[0] + "@" + second, ks[1] + "@", ks[2] + "@"}
		if len(got) != 4 {
			t.Fatalf("grants %v, want %v", keysOf(got), want)
		}
		for i, g := range got {
			if !strings.HasPrefix(g.Key+"@"+g.Run, want[i]) {
				t.Errorf("grant %d is %s@%s, want %s", i, g.Key, g.Run, want[i])
			}
		}
		testenv.Eventually(t, 0, func() error {
			notes := eventNotes(t, h, ns, "Rollout", "cdn-platform")
			for _, n := range notes {
				if strings.HasPrefix(n, "StepFailed: One or more workspaces failed in step us-east-1") {
					return nil
				}
			}
			return fmt.Errorf("no StepFailed Event in %q", notes)
		})
	})

	t.Run("a typo in a selector fails with NoWorkspacesFound and grants nothing", func(t *testing.T) {
		ns := "typo"
		h.Namespace(t, ns)
		h.Create(t, usEast, dt.Workspace(ns, "app-dev", "shop", map[string]string{"env": "dev"}))
		h.Create(t, euWest, dt.Workspace(ns, "app-prod", "shop", map[string]string{"env": "prod"}))
		ro := dt.Rollout(ns, "shop", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prdo"})
		h.CreateHub(t, ro)
		got := h.WaitRollout(t, ns, "shop", dt.Phase(magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound))
		if got.Status.CurrentStep != 1 || got.Status.CurrentStepName != "prod" {
			t.Errorf("current step %d %q, want 1 prod", got.Status.CurrentStep, got.Status.CurrentStepName)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(grants, dt.Key(usEast, ns, "app-dev"), dt.Key(euWest, ns, "app-prod")))

		testenv.Eventually(t, 0, func() error {
			cur := &magosv1.Rollout{}
			if err := h.Client.Get(context.Background(), client.ObjectKeyFromObject(ro), cur); err != nil {
				return err
			}
			cur.Spec.Strategy.Steps[1].Selector = magosv1.MatchLabels(map[string]string{"env": "prod"})
			return h.Client.Update(context.Background(), cur)
		})
		h.WaitRollout(t, ns, "shop", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		assertOrder(t, grants.InNamespace(ns), []string{dt.Key(usEast, ns, "app-dev")}, []string{dt.Key(euWest, ns, "app-prod")})
	})

	t.Run("Workspaces of another Project or namespace with matching labels are never granted", func(t *testing.T) {
		ns, other := "isolation", "isolation-other"
		h.Namespace(t, ns)
		h.Namespace(t, other)
		prod := map[string]string{"env": "prod"}
		h.Create(t, usEast, dt.Workspace(ns, "payments-db", "payments", prod))
		h.Create(t, usEast, dt.Workspace(ns, "billing-db", "billing", prod))
		h.Create(t, euWest, dt.Workspace(ns, "billing-cache", "billing", prod))
		h.Create(t, euWest, dt.Workspace(other, "payments-db", "payments", prod))
		h.CreateHub(t, dt.Rollout(ns, "payments", []string{"prod"}, prod))

		ro := h.WaitRollout(t, ns, "payments", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		if ro.Status.TotalWorkspaces != 1 {
			t.Errorf("total %d, want 1", ro.Status.TotalWorkspaces)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(grants,
			dt.Key(usEast, ns, "billing-db"), dt.Key(euWest, ns, "billing-cache"), dt.Key(euWest, other, "payments-db")))
		assertOrder(t, grants.InNamespace(ns), []string{dt.Key(usEast, ns, "payments-db")})
	})

	t.Run("a Rollout created over a Project in parallel mode revokes its later steps' grants", func(t *testing.T) {
		ns := "takeover"
		h.Namespace(t, ns)
		dev, prod := dt.Key(usEast, ns, "web-dev"), dt.Key(euWest, ns, "web-prod")
		revokesBefore := metricValue(t, "magos_hub_revokes_total", map[string]string{"by": keys.GrantedByRollout})
		agents[usEast].Pause(ns, "web-dev")
		agents[euWest].Pause(ns, "web-prod")
		h.Create(t, usEast, dt.Workspace(ns, "web-dev", "web", map[string]string{"env": "dev"}))
		h.Create(t, euWest, dt.Workspace(ns, "web-prod", "web", map[string]string{"env": "prod"}))
		h.CreateHub(t, dt.Project(ns, "web"))
		testenv.Eventually(t, 0, func() error {
			if got := grants.For(dev, prod); len(got) != 2 || got[0].By != keys.GrantedByProject || got[1].By != keys.GrantedByProject {
				return fmt.Errorf("grants %v, want both Workspaces granted by the Project", got)
			}
			return nil
		})

		h.CreateHub(t, dt.Rollout(ns, "web", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prod"}))
		testenv.Eventually(t, 0, func() error {
			a, err := annotations(h, euWest, ns, "web-prod")
			if err != nil {
				return err
			}
			for _, k := range []string{keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy} {
				if _, ok := a[k]; ok {
					return fmt.Errorf("web-prod still carries %s", k)
				}
			}
			return nil
		})
		if a, err := annotations(h, usEast, ns, "web-dev"); err != nil || a[keys.ExecutionAllowed] != "true" {
			t.Errorf("web-dev lost its grant (%v, %v); the current step keeps it", a, err)
		}
		testenv.Eventually(t, 0, func() error {
			if want, notes := "Revoked: Revoked the grant of "+prod, eventNotes(t, h, ns, "Rollout", "web"); !slices.Contains(notes, want) {
				return fmt.Errorf("no Event %q in %q", want, notes)
			}
			return nil
		})
		if got := metricValue(t, "magos_hub_revokes_total", map[string]string{"by": keys.GrantedByRollout}); got < revokesBefore+1 {
			t.Errorf("magos_hub_revokes_total{by=rollout} went from %v to %v, want 1 more", revokesBefore, got)
		}
		testenv.Eventually(t, 0, func() error {
			p := &magosv1.Project{}
			if err := h.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, p); err != nil {
				return err
			}
			if p.Status.Reason != magosv1.ReasonManagedByRollout {
				return fmt.Errorf("project is %s/%s", p.Status.Phase, p.Status.Reason)
			}
			return nil
		})

		agents[euWest].Resume(t, ns, "web-prod") // not granted any more: it must not run
		agents[usEast].Resume(t, ns, "web-dev")
		h.WaitRollout(t, ns, "web", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		got := grants.For(prod)
		if len(got) != 2 || got[1].By != keys.GrantedByRollout {
			t.Errorf("web-prod grants %v, want the Project's then the Rollout's", got)
		}
	})

	t.Run("a step waits on an unavailable cluster and does not advance", func(t *testing.T) {
		ns := "unavailable"
		h.Namespace(t, ns)
		h.SetAvailable(t, euWest, false, magosv1.ReasonAgentSilent)
		t.Cleanup(func() { h.SetAvailable(t, euWest, true, magosv1.ReasonReachable) })
		ks := regions(t, h, ns, "cdn", "cdn-platform")
		h.CreateHub(t, regionRollout(ns, "cdn-platform"))

		ro := h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters))
		if ro.Status.CurrentStepName != euWest || ro.Status.Steps[1].Phase != magosv1.StepWaiting || !strings.Contains(ro.Status.Message, magosv1.ReasonAgentSilent) {
			t.Errorf("status at %s, step %+v, message %q; want waiting on eu-west-1 (AgentSilent)", ro.Status.CurrentStepName, ro.Status.Steps[1], ro.Status.Message)
		}
		testenv.Eventually(t, 0, func() error {
			notes := eventNotes(t, h, ns, "Rollout", "cdn-platform")
			for _, n := range notes {
				if strings.HasPrefix(n, "WaitingForClusters: ") && strings.Contains(n, euWest) {
					return nil
				}
			}
			return fmt.Errorf("no WaitingForClusters Event naming %s in %q", euWest, notes)
		})
		testenv.Consistently(t, 3*time.Second, func() error {
			if err := noGrants(grants, ks[1:]...)(); err != nil {
				return err
			}
			cur := &magosv1.Rollout{}
			if err := h.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "cdn-platform"}, cur); err != nil {
				return err
			}
			if cur.Status.Reason != magosv1.ReasonWaitingForClusters || cur.Status.CurrentStep != 1 {
				return fmt.Errorf("rollout moved to %s at step %d", cur.Status.Reason, cur.Status.CurrentStep)
			}
			return nil
		})
		h.SetAvailable(t, euWest, true, magosv1.ReasonReachable)
		h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		assertOrder(t, grants.InNamespace(ns), ks[:1], ks[1:2], ks[2:])
	})

	t.Run("a stale grant for an old run is granted again for the new run", func(t *testing.T) {
		ns := "stale"
		h.Namespace(t, ns)
		key := dt.Key(usEast, ns, "queue")
		agents[usEast].Pause(ns, "queue")
		h.Create(t, usEast, dt.Workspace(ns, "queue", "queue", map[string]string{"env": "prod"}))
		h.CreateHub(t, dt.Rollout(ns, "queue", []string{"prod"}, map[string]string{"env": "prod"}))
		testenv.Eventually(t, 0, func() error {
			if len(grants.For(key)) != 1 {
				return fmt.Errorf("grants %v", grants.For(key))
			}
			return nil
		})
		old := agents[usEast].Run(t, ns, "queue")
		// The spec changed before the run started: the Workspace controller minted a new run,
		// and the grant it carries names the old one.
		fresh := agents[usEast].NewRun(t, ns, "queue", magosv1.ReasonConfigurationChanged)
		testenv.Eventually(t, 0, func() error {
			a, err := annotations(h, usEast, ns, "queue")
			if err != nil {
				return err
			}
			if a[keys.GrantedRun] != fresh || a[keys.ExecutionAllowed] != "true" || a[keys.GrantedBy] != keys.GrantedByRollout {
				return fmt.Errorf("annotations %v, want a grant of run %s", a, fresh)
			}
			return nil
		})
		agents[usEast].Resume(t, ns, "queue")
		h.WaitRollout(t, ns, "queue", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		got := grants.For(key)
		if len(got) != 2 || got[0].Run != old || got[1].Run != fresh {
			t.Errorf("grants %v, want %s then %s", keysOf(got), old, fresh)
		}
	})

	// Last: the Rollout stays in progress (the test agent never runs the new commit).
	t.Run("each new commit the Rollout adopts is a RevisionChanged Event", func(t *testing.T) {
		ns := "revisions"
		h.Namespace(t, ns)
		h.Create(t, usEast, dt.Workspace(ns, "app", "app", map[string]string{"env": "prod"}))
		h.CreateHub(t, dt.Rollout(ns, "app", []string{"prod"}, map[string]string{"env": "prod"}))
		h.WaitRollout(t, ns, "app", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		revisionEvent := func(commit string) func() error {
			return func() error {
				want := "RevisionChanged: Rolling out commit " + commit + " of https://git.example.com/infra.git (main)"
				if notes := eventNotes(t, h, ns, "Rollout", "app"); !slices.Contains(notes, want) {
					return fmt.Errorf("no Event %q in %q", want, notes)
				}
				return nil
			}
		}
		testenv.Eventually(t, 0, revisionEvent(dt.Revision))

		// The agent's ref watcher saw the branch move.
		const next = "fedcba9876543210fedcba9876543210fedcba98"
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
			keys.DetectedRevision, next, keys.DetectedAt, time.Now().UTC().Format(time.RFC3339))
		ws := dt.Workspace(ns, "app", "app", nil)
		if err := h.Fleet.Spokes[usEast].Client.Patch(context.Background(), ws, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("marking the detection: %v", err)
		}
		h.WaitRollout(t, ns, "app", func(ro *magosv1.Rollout) error {
			if len(ro.Status.Revisions) != 1 || ro.Status.Revisions[0].Commit != next {
				return fmt.Errorf("revisions %+v, want %s", ro.Status.Revisions, next)
			}
			return nil
		})
		testenv.Eventually(t, 0, revisionEvent(next))
	})
}

// eventNotes returns "reason: note" of the Events regarding a hub object.
func eventNotes(t *testing.T, h *dt.Hub, ns, kind, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := h.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing Events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// histogramCount returns the number of observations of a histogram in the controller-runtime
// registry, summed over its label values.
func histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// metricValue returns the value of a counter or gauge of the controller-runtime registry whose
// labels include labels (nil: the unlabelled series), or 0 when it has no such series.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
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
			match := len(labels) > 0 || len(have) == 0
			for k, v := range labels {
				match = match && have[k] == v
			}
			if !match {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
