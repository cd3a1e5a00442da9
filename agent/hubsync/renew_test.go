package hubsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// TestRenewalIsOneRequest: on a real hub API server, the agent's first heartbeat reads and
// creates its Lease, and each renewal after is one update, without a read. When another writer
// changed the Lease meanwhile (the hub writes its version on it), the update is refused, and the
// same renewal reads the Lease and updates it: it renews, and keeps the other writer's change.
// A Lease deleted meanwhile is made again by the same renewal (the API server refuses the
// update of the old version as a conflict).
func TestRenewalIsOneRequest(t *testing.T) {
	ctx := context.Background()
	hub, _ := startHubAndSpoke(t)
	requests := map[string]int{}
	counted := interceptor.NewClient(hub, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			requests["get"]++
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			requests["create"]++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			requests["update"]++
			return c.Update(ctx, obj, opts...)
		},
	})
	ns := mirror.Namespace(updateTestCluster)
	h := &heartbeat{client: counted, namespace: ns, identity: "agent-a", version: "v0.1.0", duration: 40 * time.Second}
	now := time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)
	renew := func(what string, want map[string]int) {
		t.Helper()
		clear(requests)
		now = now.Add(10 * time.Second)
		if err := h.renew(ctx, now, mirror.Watermark{Since: now.Add(-time.Minute), At: now, Mirrored: 3}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if fmt.Sprint(requests) != fmt.Sprint(want) {
			t.Errorf("%s: requests %v, want %v", what, requests, want)
		}
		lease := &coordinationv1.Lease{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease); err != nil {
			t.Fatal(err)
		}
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.Time.Equal(now) {
			t.Errorf("%s: the Lease was renewed at %v, want %v", what, lease.Spec.RenewTime, now)
		}
	}
	renew("the first heartbeat", map[string]int{"get": 1, "create": 1})
	renew("the second", map[string]int{"update": 1})
	renew("the third", map[string]int{"update": 1})

	// The hub writes its version on the Lease between two renewals.
	lease := &coordinationv1.Lease{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease); err != nil {
		t.Fatal(err)
	}
	lease.Annotations[keys.HubVersion] = "v0.2.0"
	if err := hub.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	renew("a renewal after another writer's change", map[string]int{"update": 2, "get": 1})
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Annotations[keys.HubVersion] != "v0.2.0" {
		t.Errorf("the hub's version on the Lease is %q after the renewal, want v0.2.0", lease.Annotations[keys.HubVersion])
	}
	renew("the next", map[string]int{"update": 1})

	// The Lease is deleted between two renewals: the next one makes it again.
	if err := hub.Delete(ctx, lease); err != nil {
		t.Fatal(err)
	}
	renew("a renewal after the Lease was deleted", map[string]int{"update": 1, "get": 1, "create": 1})
	renew("the one after", map[string]int{"update": 1})
}
