package tests

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestHubDashboardReadsEvents: with the dashboard enabled, the hub may list and watch the
// Rollouts' Events (events.k8s.io), which the dashboard's timeline of each Rollout shows, even
// without notification webhooks; with neither, it may not (TestHubNotificationAccess).
func TestHubDashboardReadsEvents(t *testing.T) {
	objs := render(t, "magos-hub", map[string]any{"dashboard": map[string]any{"enabled": true}})
	reads := false
	for _, r := range as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-hub"]).Rules {
		if slices.Contains(r.APIGroups, "events.k8s.io") && slices.Contains(r.Resources, "events") &&
			slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
			reads = true
		}
	}
	if !reads {
		t.Error("with the dashboard enabled, the hub may not list and watch Events (events.k8s.io): the timeline would show none")
	}
}
