package hubsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
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

// TestSlowRenewalKeepsItsPlace: a renewal that the hub API server answers only after more than
// one heartbeat interval still renews the Lease, as long as it is answered within the lease
// duration less one interval (renewalDeadline); one answered later fails and is counted, and
// every renewal's time is recorded in magos_agent_heartbeat_duration_seconds. The hub here is a
// real API server; its slowness is a stand-in: the client holds each update for a while before
// sending it, as a saturated API server's queue would (a real one cannot be made slow on cue).
func TestSlowRenewalKeepsItsPlace(t *testing.T) {
	for _, tc := range []struct{ interval, duration, want time.Duration }{
		{10 * time.Second, 40 * time.Second, 30 * time.Second},
		{time.Second, 4 * time.Second, 3 * time.Second},
		{10 * time.Second, 15 * time.Second, 10 * time.Second},
		{10 * time.Second, 10 * time.Second, 10 * time.Second},
	} {
		if got := renewalDeadline(tc.interval, tc.duration); got != tc.want {
			t.Errorf("renewalDeadline(%s, %s) = %s, want %s", tc.interval, tc.duration, got, tc.want)
		}
	}

	ctx := context.Background()
	hub, _ := startHubAndSpoke(t)
	var delay time.Duration
	slow := interceptor.NewClient(hub, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return ctx.Err()
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	ns := mirror.Namespace(updateTestCluster)
	// One interval is 1 s, the deadline 3 s.
	h := &heartbeat{client: slow, namespace: ns, identity: "agent-a", version: "v0.1.0", interval: time.Second, duration: 4 * time.Second}
	now := time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)
	renew := func(what string, wait time.Duration, wantErr bool) {
		t.Helper()
		delay = wait
		failures, renewals := testutil.ToFloat64(heartbeatFailures), sampleCount(t, heartbeatDuration)
		now = now.Add(time.Second)
		err := h.renewWithin(ctx, now, mirror.Watermark{Since: now.Add(-time.Minute), At: now, Mirrored: 3})
		if (err != nil) != wantErr {
			t.Fatalf("%s: renewal error %v (want one: %v)", what, err, wantErr)
		}
		wantFailures := 0.0
		if wantErr {
			wantFailures = 1
		}
		if got := testutil.ToFloat64(heartbeatFailures) - failures; got != wantFailures {
			t.Errorf("%s: %v failures counted, want %v", what, got, wantFailures)
		}
		if got := sampleCount(t, heartbeatDuration) - renewals; got != 1 {
			t.Errorf("%s: %d renewal times recorded, want 1", what, got)
		}
		lease := &coordinationv1.Lease{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease); err != nil {
			t.Fatal(err)
		}
		renewed := lease.Spec.RenewTime != nil && lease.Spec.RenewTime.Time.Equal(now)
		if renewed == wantErr {
			t.Errorf("%s: the Lease's renew time is %v (renewed: %v), want renewed: %v", what, lease.Spec.RenewTime, renewed, !wantErr)
		}
	}
	renew("the first heartbeat (a create)", 0, false)
	renew("an update at once", 0, false)
	renew("an update answered after 2 intervals", 2*time.Second, false)
	renew("an update not answered within the deadline", 5*time.Second, true)
	renew("the next, answered at once", 0, false)
}

// sampleCount is how many observations histogram h has recorded.
func sampleCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
