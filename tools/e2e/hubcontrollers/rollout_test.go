package hubcontrollers_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/devfleet"
)

// envRollout is the dev -> staging -> prod Rollout of the Project.
func envRollout(ns, project string) *magosv1.Rollout {
	return hubtest.Rollout(ns, project, []string{"dev", "staging", "prod"},
		map[string]string{"env": "dev"}, map[string]string{"env": "staging"}, map[string]string{"env": "prod"})
}

// mirrorGrant returns the grant annotations of a Workspace's mirror on the hub: what the hub
// decided, whether or not the agent has carried it down yet.
func (w *world) mirrorGrant(cluster, ns, name string) (map[string]string, error) {
	m, err := w.Mirror(cluster, ns, name)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range []string{keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy} {
		if v, ok := m.Annotations[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

func TestRollout(t *testing.T) {
	// A stopped agent keeps its cluster Available for the lease (15s): long enough for a grant
	// to be decided on the hub and revoked before the agent could carry it down.
	wh := newWebhooks(t)
	w := start(t, devfleet.Options{HubLeaseDuration: 15 * time.Second, Notifications: wh.config()})

	t.Run("notifications: each step, the approval wait, the failure and completion reach the webhooks in order", func(t *testing.T) {
		w.notifications(t, wh)
	})

	t.Run("dev, staging, prod in order across clusters", func(t *testing.T) {
		ns := "envs"
		w.Namespace(t, ns)
		latencyBefore := w.histogramCount(t, "magos_hub_decision_latency_seconds")
		grantsBefore := w.metricValue(t, "magos_hub_grants_total", map[string]string{"by": keys.GrantedByRollout})
		w.Workspace(t, usEast, ns, "app-dev", "payments", map[string]string{"env": "dev"})
		w.Workspace(t, euWest, ns, "app-staging", "payments", map[string]string{"env": "staging"})
		w.Workspace(t, apSouth, ns, "app-prod", "payments", map[string]string{"env": "prod"})
		dev, staging, prod := key(usEast, ns, "app-dev"), key(euWest, ns, "app-staging"), key(apSouth, ns, "app-prod")
		w.WaitMirrored(t, dev, staging, prod)
		w.CreateHub(t, envRollout(ns, "payments"))

		ro := w.WaitRollout(t, ns, "payments", Completed)
		w.assertStepOrder(t, ns, []string{dev}, []string{staging}, []string{prod})
		if ro.Status.CurrentStep != 3 || ro.Status.AppliedWorkspaces != 3 || ro.Status.TotalWorkspaces != 3 {
			t.Errorf("status: currentStep %d, applied %d/%d; want 3, 3/3", ro.Status.CurrentStep, ro.Status.AppliedWorkspaces, ro.Status.TotalWorkspaces)
		}
		for i, s := range ro.Status.Steps {
			if s.Phase != magosv1.StepCompleted || s.Matched != 1 || s.Applied != 1 || len(s.Clusters) != 1 || s.Clusters[0] != regions[i] {
				t.Errorf("step %d status %+v, want Completed 1/1 in %s", i, s, regions[i])
			}
		}
		ready := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionReady)
		if ready == nil || ready.Status != "True" || ready.ObservedGeneration != ro.Generation || ro.Status.ObservedGeneration != ro.Generation {
			t.Errorf("Ready condition %+v, observedGeneration %d; want True for generation %d", ready, ro.Status.ObservedGeneration, ro.Generation)
		}
		if ro.Status.LastReconcileTime == nil {
			t.Error("lastReconcileTime not set")
		}
		devRun := w.SpokeWorkspace(t, usEast, ns, "app-dev").Status.CurrentRunID
		prodRun := w.SpokeWorkspace(t, apSouth, ns, "app-prod").Status.CurrentRunID
		testenv.Eventually(t, wait, func() error {
			notes := w.eventNotes(t, ns, "Rollout", "payments")
			for _, want := range []string{
				"Granted: Granted run " + devRun + " to " + dev,
				"Granted: Granted run " + prodRun + " to " + prod,
				"StepChanged: Step 2/3 staging is current",
				"RevisionChanged: Rolling out commit " + w.commit + " of " + w.repo + " (main)",
				"RolloutCompleted: All steps completed successfully",
			} {
				if !slices.Contains(notes, want) {
					return fmt.Errorf("no Event %q in %q", want, notes)
				}
			}
			return nil
		})
		// Scraped from the hub's own metrics endpoint.
		if got := w.histogramCount(t, "magos_hub_decision_latency_seconds"); got < latencyBefore+3 {
			t.Errorf("decision latency observations went from %d to %d, want 3 more (one per grant)", latencyBefore, got)
		}
		this := map[string]string{"namespace": ns, "name": "payments"}
		if got := w.metricValue(t, "magos_hub_grants_total", map[string]string{"by": keys.GrantedByRollout}); got < grantsBefore+3 {
			t.Errorf("magos_hub_grants_total{by=rollout} went from %v to %v, want 3 more", grantsBefore, got)
		}
		if got := w.metricValue(t, "magos_rollout_reconciles_total", map[string]string{"namespace": ns, "name": "payments", "result": "success"}); got < 1 {
			t.Errorf("magos_rollout_reconciles_total{result=success} = %v, want at least 1", got)
		}
		if got := w.metricValue(t, "magos_rollout_step_transitions_total", this); got < 3 {
			t.Errorf("magos_rollout_step_transitions_total = %v, want at least 3 (dev to staging to prod to done)", got)
		}
		testenv.Eventually(t, wait, func() error {
			if got := w.metricValue(t, "magos_rollout_current_step", this); got != 3 {
				return fmt.Errorf("magos_rollout_current_step = %v, want 3 (the number of steps: completed)", got)
			}
			return nil
		})
		// Every metric the hub serves follows the conventions (the scrape, not the hub's code,
		// says what it serves).
		var families []*dto.MetricFamily
		for _, f := range w.scrape(t) {
			families = append(families, f)
		}
		sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
		for _, err := range testenv.MetricConventionErrors(families) {
			t.Error(err)
		}
	})

	t.Run("multi-region prod, one region per cluster, in order", func(t *testing.T) {
		ns := "regions"
		w.Namespace(t, ns)
		ks := w.regionWorkspaces(t, ns, "cdn", "cdn-platform")
		w.WaitMirrored(t, ks...)
		w.CreateHub(t, regionRollout(ns, "cdn-platform"))
		w.WaitRollout(t, ns, "cdn-platform", Completed)
		w.assertStepOrder(t, ns, ks[:1], ks[1:2], ks[2:])
	})

	t.Run("cohorts run in parallel across clusters, cohorts in order", func(t *testing.T) {
		ns := "cohorts"
		w.Namespace(t, ns)
		cohort := map[string][]string{}
		for _, env := range []string{"dev", "staging", "prod"} {
			for _, r := range regions {
				name := "svc-" + env
				if env == "dev" {
					w.Hold(t, r, ns, name)
				}
				w.Workspace(t, r, ns, name, "platform", map[string]string{"env": env, "region": r})
				cohort[env] = append(cohort[env], key(r, ns, name))
			}
		}
		w.WaitMirrored(t, slices.Concat(cohort["dev"], cohort["staging"], cohort["prod"])...)
		w.CreateHub(t, envRollout(ns, "platform"))

		// The whole dev cohort is granted at once, across the three clusters, and applies
		// together (held) while staging waits.
		w.WaitRollout(t, ns, "platform", func(ro *magosv1.Rollout) error {
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
		testenv.Eventually(t, wait, func() error {
			if got := w.Applies(t, ns); len(got) != 3 {
				return fmt.Errorf("applies %v, want the three dev ones running together", got)
			}
			return nil
		})
		activeCount := func(want float64) func() error {
			return func() error {
				if got := w.metricValue(t, "magos_rollouts_in_progress", nil); got != want {
					return fmt.Errorf("magos_rollouts_in_progress = %v, want %v", got, want)
				}
				return nil
			}
		}
		testenv.Eventually(t, wait, activeCount(1)) // this one; the earlier ones completed
		testenv.Consistently(t, 2*time.Second, noGrants(w.grants, slices.Concat(cohort["staging"], cohort["prod"])...))
		for _, r := range regions {
			w.Release(t, r, ns, "svc-dev")
		}
		ro := w.WaitRollout(t, ns, "platform", Completed)
		testenv.Eventually(t, wait, activeCount(0))
		w.assertStepOrder(t, ns, cohort["dev"], cohort["staging"], cohort["prod"])
		if ro.Status.AppliedWorkspaces != 9 || ro.Status.TotalWorkspaces != 9 {
			t.Errorf("applied %d/%d, want 9/9", ro.Status.AppliedWorkspaces, ro.Status.TotalWorkspaces)
		}
		for _, s := range ro.Status.Steps {
			if s.Phase != magosv1.StepCompleted || s.Matched != 3 || s.Applied != 3 || s.Running != 0 || s.Failed != 0 {
				t.Errorf("step %+v, want Completed 3/3", s)
			}
		}
	})

	t.Run("a failure in us-east-1 freezes the rollout before eu-west-1; a retry resumes it", func(t *testing.T) {
		ns := "failure"
		w.Namespace(t, ns)
		w.FailNext(t, usEast, ns, "cdn")
		ks := w.regionWorkspaces(t, ns, "cdn", "cdn-platform")
		w.WaitMirrored(t, ks...)
		w.CreateHub(t, regionRollout(ns, "cdn-platform"))

		ro := w.WaitRollout(t, ns, "cdn-platform", phase(magosv1.PhaseFailed, magosv1.ReasonStepFailed))
		if s := ro.Status.Steps[0]; s.Failed != 1 || s.Phase != magosv1.StepFailed || ro.Status.CurrentStepName != usEast {
			t.Errorf("step status %+v at %s, want us-east-1 Failed with 1 failed", s, ro.Status.CurrentStepName)
		}
		if c := meta.FindStatusCondition(ro.Status.Conditions, magosv1.ConditionReady); c == nil || c.Status != "False" {
			t.Errorf("Ready condition %+v, want False", c)
		}
		if ws := w.SpokeWorkspace(t, usEast, ns, "cdn"); ws.Status.Phase != magosv1.PhaseFailed || ws.Status.Reason != magosv1.ReasonApplyFailed {
			t.Errorf("us-east-1 Workspace is %s/%s, want Failed/ApplyFailed", ws.Status.Phase, ws.Status.Reason)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(w.grants, ks[1:]...))

		first := w.SpokeWorkspace(t, usEast, ns, "cdn").Status.CurrentRunID
		w.Retry(t, usEast, ns, "cdn")
		w.WaitRollout(t, ns, "cdn-platform", Completed)
		second := w.SpokeWorkspace(t, usEast, ns, "cdn").Status.CurrentRunID
		if second == first {
			t.Fatalf("us-east-1 applied run %s again, want a new run after the retry", first)
		}
		got := w.grants.InNamespace(ns)
		want := []string{ks[0] + "@" + first, ks[0] + "@" + second, ks[1] + "@", ks[2] + "@"}
		if len(got) != 4 {
			t.Fatalf("grants %v, want %v", keysOf(got), want)
		}
		for i, g := range got {
			if !strings.HasPrefix(g.Key+"@"+g.Run, want[i]) {
				t.Errorf("grant %d is %s@%s, want %s", i, g.Key, g.Run, want[i])
			}
		}
		if applies := w.Applies(t, ns); !slices.Equal(applies, []string{ks[0], ks[0], ks[1], ks[2]}) {
			t.Errorf("applies %v, want us-east-1 twice (failed, then retried), then eu-west-1, then ap-south-1", applies)
		}
		testenv.Eventually(t, wait, func() error {
			for _, n := range w.eventNotes(t, ns, "Rollout", "cdn-platform") {
				if strings.HasPrefix(n, "StepFailed: One or more workspaces failed in step us-east-1") {
					return nil
				}
			}
			return fmt.Errorf("no StepFailed Event")
		})
	})

	t.Run("a typo in a selector fails with NoWorkspacesFound and grants nothing", func(t *testing.T) {
		ns := "typo"
		w.Namespace(t, ns)
		w.Workspace(t, usEast, ns, "app-dev", "shop", map[string]string{"env": "dev"})
		w.Workspace(t, euWest, ns, "app-prod", "shop", map[string]string{"env": "prod"})
		dev, prod := key(usEast, ns, "app-dev"), key(euWest, ns, "app-prod")
		w.WaitMirrored(t, dev, prod)
		ro := hubtest.Rollout(ns, "shop", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prdo"})
		w.CreateHub(t, ro)
		got := w.WaitRollout(t, ns, "shop", phase(magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound))
		if got.Status.CurrentStep != 1 || got.Status.CurrentStepName != "prod" {
			t.Errorf("current step %d %q, want 1 prod", got.Status.CurrentStep, got.Status.CurrentStepName)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(w.grants, dev, prod))

		testenv.Eventually(t, wait, func() error {
			cur := &magosv1.Rollout{}
			if err := w.f.Client("hub").Get(w.ctx, client.ObjectKeyFromObject(ro), cur); err != nil {
				return err
			}
			cur.Spec.Strategy.Steps[1].Selector = magosv1.MatchLabels(map[string]string{"env": "prod"})
			return w.f.Client("hub").Update(w.ctx, cur)
		})
		w.WaitRollout(t, ns, "shop", Completed)
		w.assertStepOrder(t, ns, []string{dev}, []string{prod})
	})

	t.Run("Workspaces of another Project or namespace with matching labels are never granted", func(t *testing.T) {
		ns, other := "isolation", "isolation-other"
		w.Namespace(t, ns)
		w.Namespace(t, other)
		prod := map[string]string{"env": "prod"}
		w.Workspace(t, usEast, ns, "payments-db", "payments", prod)
		w.Workspace(t, usEast, ns, "billing-db", "billing", prod)
		w.Workspace(t, euWest, ns, "billing-cache", "billing", prod)
		w.Workspace(t, euWest, other, "payments-db", "payments", prod)
		w.WaitMirrored(t, key(usEast, ns, "payments-db"), key(usEast, ns, "billing-db"), key(euWest, ns, "billing-cache"), key(euWest, other, "payments-db"))
		w.CreateHub(t, hubtest.Rollout(ns, "payments", []string{"prod"}, prod))

		ro := w.WaitRollout(t, ns, "payments", Completed)
		if ro.Status.TotalWorkspaces != 1 {
			t.Errorf("total %d, want 1", ro.Status.TotalWorkspaces)
		}
		testenv.Consistently(t, 3*time.Second, noGrants(w.grants,
			key(usEast, ns, "billing-db"), key(euWest, ns, "billing-cache"), key(euWest, other, "payments-db")))
		w.assertStepOrder(t, ns, []string{key(usEast, ns, "payments-db")})
		if got := w.Applies(t, other); len(got) > 0 {
			t.Errorf("applies in %s: %v, want none", other, got)
		}
	})

	t.Run("a Rollout created over a Project in parallel mode revokes the grants its order does not allow", func(t *testing.T) {
		ns := "takeover"
		dev, prod := w.devProd(t, ns, true)
		revokesBefore := w.metricValue(t, "magos_hub_revokes_total", map[string]string{"by": keys.GrantedByRollout})

		// The eu-west-1 agent is stopped: the Project's grant of web-prod is decided on the hub
		// but not carried down before the Rollout takes over.
		resume := w.Stop(t, euWest)
		w.CreateHub(t, projectOf(ns, "web", map[string]string{keys.Orchestration: keys.OrchestrationParallel}))
		testenv.Eventually(t, wait, func() error {
			a, err := w.mirrorGrant(euWest, ns, "web-prod")
			if err != nil {
				return err
			}
			if a[keys.ExecutionAllowed] != "true" || a[keys.GrantedBy] != keys.GrantedByProject {
				return fmt.Errorf("web-prod's mirror carries %v, want the Project's grant", a)
			}
			return nil
		})
		w.CreateHub(t, devProdRollout(ns))
		testenv.Eventually(t, wait, func() error {
			a, err := w.mirrorGrant(euWest, ns, "web-prod")
			if err != nil {
				return err
			}
			if len(a) > 0 {
				return fmt.Errorf("web-prod's mirror still carries %v", a)
			}
			return nil
		})
		testenv.Eventually(t, wait, func() error {
			p := &magosv1.Project{}
			if err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: ns, Name: "web"}, p); err != nil {
				return err
			}
			if p.Status.Reason != magosv1.ReasonManagedByRollout {
				return fmt.Errorf("project is %s/%s", p.Status.Phase, p.Status.Reason)
			}
			return nil
		})
		if a := w.SpokeWorkspace(t, usEast, ns, "web-dev").Annotations; a[keys.ExecutionAllowed] != "true" {
			t.Errorf("web-dev lost its grant (%v); the current step keeps it", a)
		}
		testenv.Eventually(t, wait, func() error {
			if want, notes := "Revoked: Revoked the grant of "+prod, w.eventNotes(t, ns, "Rollout", "web"); !slices.Contains(notes, want) {
				return fmt.Errorf("no Event %q in %q", want, notes)
			}
			return nil
		})
		if got := w.metricValue(t, "magos_hub_revokes_total", map[string]string{"by": keys.GrantedByRollout}); got < revokesBefore+1 {
			t.Errorf("magos_hub_revokes_total{by=rollout} went from %v to %v, want 1 more", revokesBefore, got)
		}

		// Back, the agent never runs the revoked grant: web-prod waits for dev.
		resume()
		testenv.Consistently(t, 3*time.Second, func() error {
			if err := noGrants(w.grants, prod)(); err != nil {
				return err
			}
			if got := w.Applies(t, ns); slices.Contains(got, prod) {
				return fmt.Errorf("applies %v: web-prod ran while dev is held", got)
			}
			return nil
		})
		w.Release(t, usEast, ns, "web-dev")
		w.WaitRollout(t, ns, "web", Completed)
		if got := w.grants.For(prod); len(got) != 1 || got[0].By != keys.GrantedByRollout {
			t.Errorf("web-prod grants %v, want one, by the Rollout", got)
		}
		if got := w.Applies(t, ns); !slices.Equal(got, []string{dev, prod}) {
			t.Errorf("applies %v, want dev then prod", got)
		}
	})

	t.Run("a step waits on an unavailable cluster and does not advance", func(t *testing.T) {
		ns := "unavailable"
		w.Namespace(t, ns)
		ks := w.regionWorkspaces(t, ns, "cdn", "cdn-platform")
		w.WaitMirrored(t, ks...)
		resume := w.Stop(t, euWest)
		w.WaitAvailable(t, euWest, false)
		w.CreateHub(t, regionRollout(ns, "cdn-platform"))

		ro := w.WaitRollout(t, ns, "cdn-platform", phase(magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters))
		if ro.Status.CurrentStepName != euWest || ro.Status.Steps[1].Phase != magosv1.StepWaiting || !strings.Contains(ro.Status.Message, magosv1.ReasonAgentSilent) {
			t.Errorf("status at %s, step %+v, message %q; want waiting on eu-west-1 (AgentSilent)", ro.Status.CurrentStepName, ro.Status.Steps[1], ro.Status.Message)
		}
		testenv.Eventually(t, wait, func() error {
			notes := w.eventNotes(t, ns, "Rollout", "cdn-platform")
			for _, n := range notes {
				if strings.HasPrefix(n, "WaitingForClusters: ") && strings.Contains(n, euWest) {
					return nil
				}
			}
			return fmt.Errorf("no WaitingForClusters Event naming %s in %q", euWest, notes)
		})
		testenv.Consistently(t, 3*time.Second, func() error {
			for _, r := range regions[1:] {
				if a, err := w.mirrorGrant(r, ns, "cdn"); err != nil || len(a) > 0 {
					return fmt.Errorf("%s granted on the hub while eu-west-1 is silent: %v (%v)", r, a, err)
				}
			}
			cur := &magosv1.Rollout{}
			if err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: ns, Name: "cdn-platform"}, cur); err != nil {
				return err
			}
			if cur.Status.Reason != magosv1.ReasonWaitingForClusters || cur.Status.CurrentStep != 1 {
				return fmt.Errorf("rollout moved to %s at step %d", cur.Status.Reason, cur.Status.CurrentStep)
			}
			return nil
		})
		resume()
		w.WaitRollout(t, ns, "cdn-platform", Completed)
		w.assertStepOrder(t, ns, ks[:1], ks[1:2], ks[2:])
	})

	t.Run("a grant for a run the agent replaced is never run; the new run is granted", func(t *testing.T) {
		ns := "stale"
		w.Namespace(t, ns)
		k := key(usEast, ns, "queue")
		w.Workspace(t, usEast, ns, "queue", "queue", map[string]string{"env": "prod"})
		w.WaitMirrored(t, k)
		m, err := w.Mirror(usEast, ns, "queue")
		if err != nil {
			t.Fatal(err)
		}
		old := m.Status.CurrentRunID

		// The hub grants the run while the agent is stopped; meanwhile the Workspace's labels
		// change, so the agent, back, replaces the run and must not run the old grant.
		resume := w.Stop(t, usEast)
		w.CreateHub(t, hubtest.Rollout(ns, "queue", []string{"prod"}, map[string]string{"env": "prod"}))
		testenv.Eventually(t, wait, func() error {
			a, err := w.mirrorGrant(usEast, ns, "queue")
			if err != nil {
				return err
			}
			if a[keys.GrantedRun] != old {
				return fmt.Errorf("queue's mirror carries %v, want a grant of run %s", a, old)
			}
			return nil
		})
		ws := w.SpokeWorkspace(t, usEast, ns, "queue")
		ws.Labels["team"] = "messaging"
		if err := w.f.Client(usEast).Update(w.ctx, ws); err != nil {
			t.Fatal(err)
		}
		resume()

		w.WaitRollout(t, ns, "queue", Completed)
		applied := w.SpokeWorkspace(t, usEast, ns, "queue")
		if applied.Status.CurrentRunID == old || applied.Status.Phase != magosv1.PhaseApplied {
			t.Errorf("the Workspace is %s with run %s; want the run that replaced %s Applied", applied.Status.Phase, applied.Status.CurrentRunID, old)
		}
		if got := w.grants.For(k); len(got) == 0 || got[len(got)-1].Run != applied.Status.CurrentRunID {
			t.Errorf("grants %v, want the last one for run %s", keysOf(got), applied.Status.CurrentRunID)
		}
		if got := w.Applies(t, ns); !slices.Equal(got, []string{k}) {
			t.Errorf("applies %v, want exactly one", got)
		}
	})

	t.Run("each new commit the Rollout adopts is a RevisionChanged Event, and is applied", func(t *testing.T) {
		ns := "revisions"
		w.Namespace(t, ns)
		// A repository of its own, so that its new commit concerns this Workspace only, polled
		// every 5s (the shortest interval an agent accepts).
		repo := gitrepotest.New(t)
		first := repo.Commit(t, "the gated module", map[string]string{"main.tf": gatedModule(w.control)})
		w.workspaceWith(t, usEast, ns, "app", "app", map[string]string{"env": "prod"}, func(ws *magosv1.Workspace) {
			ws.Spec.Source.RepoURL = repo.URL()
			ws.Annotations = map[string]string{keys.GitPollInterval: "5s"}
		})
		w.WaitMirrored(t, key(usEast, ns, "app"))
		w.CreateHub(t, hubtest.Rollout(ns, "app", []string{"prod"}, map[string]string{"env": "prod"}))
		w.WaitRollout(t, ns, "app", Completed)
		revisionEvent := func(commit string) func() error {
			return func() error {
				want := "RevisionChanged: Rolling out commit " + commit + " of " + repo.URL() + " (main)"
				if notes := w.eventNotes(t, ns, "Rollout", "app"); !slices.Contains(notes, want) {
					return fmt.Errorf("no Event %q in %q", want, notes)
				}
				return nil
			}
		}
		testenv.Eventually(t, wait, revisionEvent(first))

		next := repo.Commit(t, "a second commit", map[string]string{"README.md": "v2\n"})
		testenv.Eventually(t, wait, revisionEvent(next))
		testenv.Eventually(t, wait, func() error {
			ws := w.SpokeWorkspace(t, usEast, ns, "app")
			if ws.Status.Phase != magosv1.PhaseApplied || ws.Status.ObservedRevision != next {
				return fmt.Errorf("app is %s at %q, want Applied at %s", ws.Status.Phase, ws.Status.ObservedRevision, next)
			}
			return nil
		})
		if got := w.Applies(t, ns); len(got) != 2 {
			t.Errorf("applies %v, want two: the first commit, then the next", got)
		}
	})
}
