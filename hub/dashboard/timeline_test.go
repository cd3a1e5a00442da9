package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/dashboard"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/timeline"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/pkg/version"
)

// record records an Event on ro as the hub's Rollout controller does (events.k8s.io/v1).
func (f *fixture) record(ro *magosv1.Rollout, at time.Time, reason, action, note string) {
	f.t.Helper()
	f.create(&eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ro.Namespace, Name: fmt.Sprintf("%s.%s.%d", ro.Name, strings.ToLower(reason), at.UnixNano())},
		EventTime:  metav1.NewMicroTime(at), Type: corev1.EventTypeNormal, Reason: reason, Action: action, Note: note,
		ReportingController: "magos-hub-rollout", ReportingInstance: "magos-hub-rollout-test",
		Regarding: corev1.ObjectReference{Kind: "Rollout", APIVersion: magosv1.GroupVersion.String(), Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID},
	})
}

// steps is a timeline as "type step who", in order.
func steps(tl dashboard.Timeline) []string {
	out := make([]string, len(tl.Entries))
	for i, e := range tl.Entries {
		out[i] = strings.TrimSpace(fmt.Sprintf("%s %s %s", e.Type, e.Step, e.Who))
	}
	return out
}

// TestTimelineAPI: a Rollout's timeline merges the Events the hub's cache holds for it with
// the approvals in its spec (who approved, the plans' digests), oldest first; a caller who may
// get the Rollout reads it (RBAC on Events is not asked: the hub reads them), others are
// refused; its stream sends it again when a new Event is recorded on the Rollout.
func TestTimelineAPI(t *testing.T) {
	f := start(t)
	getter := f.user("team-a", "getter", rbacv1.PolicyRule{APIGroups: []string{magosv1.GroupVersion.Group}, Resources: []string{"rollouts"}, Verbs: []string{"get"}})
	outsider := f.user("team-b", "outsider")

	ro := hubtest.Rollout("team-a", "web", []string{"us", "eu"}, map[string]string{"region": "us-east-1"}, map[string]string{"region": "eu-west-1"})
	ro.Spec.Strategy.Steps[1].RequireApproval = true
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	// The approval's writer is the fixture's admin (the chart's admission policy holds approvedBy
	// to the writer's user name).
	ro.Spec.Approvals = []magosv1.StepApproval{{Step: "eu", ApprovedBy: "admin", ApprovedAt: metav1.NewTime(t0.Add(30 * time.Second)),
		Plans: []magosv1.ApprovedPlan{{Workspace: "eu-west-1/team-a/web", Digest: "d1g35t"}}}}
	f.create(ro)
	f.record(ro, t0.Add(20*time.Second), "StepCompleted", "Step us", "Step 1/2 us completed: 1/1 applied, 0 failed")
	f.record(ro, t0.Add(time.Second), "StepChanged", "Step us", "Step 1/2 us is current")
	f.record(ro, t0.Add(20*time.Second), "StepChanged", "Step eu", "Step 2/2 eu is current")
	f.record(ro, t0.Add(10*time.Second), "Granted", "Grant", "Granted apply to us-east-1/team-a/web")

	var e dashboard.Error
	if got := f.get(outsider, "/api/v1/namespaces/team-a/rollouts/web/timeline", &e); got != http.StatusForbidden || !strings.Contains(e.Error, "may not get rollouts web") {
		t.Errorf("a user of another namespace: %d %q, want 403", got, e.Error)
	}
	if got := f.get(getter, "/api/v1/namespaces/team-a/rollouts/nope/timeline", &e); got != http.StatusNotFound {
		t.Errorf("a Rollout that does not exist: %d %q, want 404", got, e.Error)
	}
	want := []string{"StepStarted us", "StepCompleted us", "StepStarted eu", "StepApproved eu admin"}
	var tl dashboard.Timeline
	testenv.Eventually(t, 30*time.Second, func() error {
		tl = dashboard.Timeline{}
		if got := f.get(getter, "/api/v1/namespaces/team-a/rollouts/web/timeline", &tl); got != http.StatusOK {
			return fmt.Errorf("timeline: %d", got)
		}
		if !slices.Equal(steps(tl), want) || tl.EventsUnavailable != "" {
			return fmt.Errorf("timeline %v (events unavailable: %q), want %v", steps(tl), tl.EventsUnavailable, want)
		}
		return nil
	})
	if a := tl.Entries[3]; len(a.Plans) != 1 || a.Plans[0].Digest != "d1g35t" || !a.Time.Equal(t0.Add(30*time.Second)) {
		t.Errorf("the approval %+v: want admin's, with its plan's digest and time", a)
	}

	// The stream wakes on a new Event.
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	stream := events(t, ctx, f, getter, "/api/v1/watch/namespaces/team-a/rollouts/web/timeline")
	next := func(want string) {
		t.Helper()
		awaitUpdate(t, ctx, stream, want, func(tl dashboard.Timeline) bool { return slices.Contains(steps(tl), want) })
	}
	next("StepApproved eu admin")
	f.record(ro, time.Now(), "RolloutCompleted", "Decide", "All 2 steps completed")
	next(timeline.RolloutCompleted)
}

// TestFleetAPI: the fleet lists every registered cluster to a caller who may list clusters,
// with its health, agent version, heartbeat and sync watermark as the hub sees them, and the
// Rollouts waiting on it among those the caller may list; a caller who may not list clusters
// is refused.
func TestFleetAPI(t *testing.T) {
	f := start(t)
	viewer := f.user("team-a", "viewer", read("rollouts", "workspaces"))
	// May list clusters, and Rollouts in team-a only.
	operator := f.user("team-a", "operator", read("rollouts"))
	f.create(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-reader"}, Rules: []rbacv1.PolicyRule{read("clusters")}})
	f.create(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "operator"}}})

	waiting := func(ns, name string) {
		ro := hubtest.Rollout(ns, name, []string{"all"}, map[string]string{"tier": "web"})
		f.create(ro)
		ro.Status = magosv1.RolloutStatus{Phase: magosv1.PhaseReconciling, Reason: magosv1.ReasonWaitingForClusters, CurrentStepName: "all",
			Message: "Waiting for cluster eu-west-1: AgentNeverSeen (step all: 0/1 applied)", WaitingForClusters: []string{"eu-west-1"},
			Steps: []magosv1.StepStatus{{Name: "all", Phase: magosv1.StepWaiting, Clusters: []string{"eu-west-1", "us-east-1"}}}}
		if err := f.admin.Status().Update(f.ctx, ro); err != nil {
			t.Fatal(err)
		}
	}
	waiting("team-a", "web")
	waiting("team-b", "db") // the operator may not list team-b's Rollouts

	var e dashboard.Error
	if got := f.get(viewer, "/api/v1/fleet", &e); got != http.StatusForbidden || !strings.Contains(e.Error, "may not list clusters") {
		t.Errorf("a user who may not list clusters: %d %q, want 403", got, e.Error)
	}
	// us-east-1's agent heartbeats (its Lease, renewed as the agent does); eu-west-1's never did.
	syncedSince := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	var fl dashboard.Fleet
	testenv.Eventually(t, time.Minute, func() error {
		if err := heartbeat(f, "us-east-1", syncedSince); err != nil {
			return err
		}
		fl = dashboard.Fleet{}
		if got := f.get(operator, "/api/v1/fleet", &fl); got != http.StatusOK || len(fl.Items) != 2 {
			return fmt.Errorf("fleet: %d %+v", got, fl)
		}
		eu, us := fl.Items[0], fl.Items[1]
		if us.Name != "us-east-1" || us.Health != dashboard.ClusterHealthy || us.AgentVersion != version.Get() ||
			us.SyncedSince == nil || !us.SyncedSince.Time.Equal(syncedSince) || us.LastHeartbeatTime == nil || len(us.Waiting) != 0 {
			return fmt.Errorf("us-east-1 %+v: want healthy, agent %s, synced since %s, a heartbeat, nothing waiting", us, version.Get(), syncedSince)
		}
		if eu.Name != "eu-west-1" || eu.Health != dashboard.ClusterUnhealthy || eu.Available == nil || eu.Available.Reason != magosv1.ReasonAgentNeverSeen ||
			len(eu.Waiting) != 1 || eu.Waiting[0].Namespace != "team-a" || eu.Waiting[0].Name != "web" || eu.Waiting[0].Step != "all" {
			return fmt.Errorf("eu-west-1 %+v (available %+v): want unhealthy (AgentNeverSeen) with team-a/web waiting, not team-b/db", eu, eu.Available)
		}
		return nil
	})
}

// heartbeat renews cluster's agent Lease on the hub as its agent would: this build's version, a
// sync watermark.
func heartbeat(f *fixture, cluster string, syncedSince time.Time) error {
	ns := mirror.Namespace(cluster)
	lease := &coordinationv1.Lease{}
	err := f.admin.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentLease}}
	} else if err != nil {
		return err
	}
	holder, seconds := cluster+"/test", int32(60)
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &holder, &seconds
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	lease.Annotations = map[string]string{keys.AgentVersion: version.Get(), keys.SyncedSince: syncedSince.Format(time.RFC3339), keys.Mirrored: "1"}
	if lease.ResourceVersion == "" {
		return f.admin.Create(f.ctx, lease)
	}
	return f.admin.Update(f.ctx, lease)
}
