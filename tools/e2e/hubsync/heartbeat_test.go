package hubsync_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// agentLease reads the cluster's heartbeat Lease on the hub.
func agentLease(cluster string) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := env.Hub.Client.Get(context.Background(), client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: keys.AgentLease}, l)
	return l, err
}

// syncedSince parses the Lease's synced-since (RFC 3339, UTC).
func syncedSince(l *coordinationv1.Lease) (time.Time, error) {
	v, ok := l.Annotations[keys.SyncedSince]
	if !ok {
		return time.Time{}, fmt.Errorf("the Lease has no %s", keys.SyncedSince)
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Location() != time.UTC {
		return time.Time{}, fmt.Errorf("%s %q is not RFC 3339 UTC: %v", keys.SyncedSince, v, err)
	}
	return t, nil
}

// spokeWorkspaces counts the spoke's Workspaces (the agent's Lease reports it as mirrored).
func spokeWorkspaces(t testing.TB, c client.Client) int {
	t.Helper()
	list := &magosv1.WorkspaceList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range list.Items {
		if !mirror.IsMirror(&list.Items[i]) {
			n++
		}
	}
	return n
}

// clusterAvailable checks the hub's Available condition of the cluster.
func clusterAvailable(cluster string, want bool) func() error {
	return func() error {
		cl := &magosv1.Cluster{}
		if err := env.Hub.Client.Get(context.Background(), client.ObjectKey{Name: cluster}, cl); err != nil {
			return err
		}
		c := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionAvailable)
		if got := c != nil && c.Status == metav1.ConditionTrue; got != want {
			return fmt.Errorf("Available = %+v, want available %t", c, want)
		}
		return nil
	}
}

// TestHeartbeatIsSyncLiveness: the agent writes its Lease only once the initial sync is done,
// with synced-since and the number of Workspaces mirrored, and keeps synced-since while the
// sync keeps up. When one mirror's status cannot be written (a test fault standing for a hub
// that refuses it, or an API server too busy to take it), the agent goes on renewing the Lease
// once the grace has passed, without synced-since and with how far behind it is: the Cluster
// stays Available (a lagging agent is not a silent one: no flap) while its status loses
// syncedSince, so the hub counts its Workspaces unknown and no step that needs them goes on.
// Once the write goes through again synced-since returns, a new one.
func TestHeartbeatIsSyncLiveness(t *testing.T) {
	ctx := context.Background()
	const (
		cluster   = "ap-south-1"
		ns        = "liveness-test"
		heartbeat = 300 * time.Millisecond
		lease     = 3 * time.Second
		grace     = lease / 2 // the default
	)
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, ns)
	names := []string{"steady", "stuck"}
	for _, name := range names {
		if err := spoke.Create(ctx, newWorkspace(ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	stuck := types.NamespacedName{Namespace: ns, Name: "stuck"}
	var refuse atomic.Bool
	var refused atomic.Int64
	fault := func(origin types.NamespacedName) error {
		if refuse.Load() && origin == stuck {
			refused.Add(1)
			return errors.New("test fault: the hub refuses this mirror's status")
		}
		return nil
	}
	started := time.Now().Truncate(time.Second) // synced-since has second precision
	startAgent(t, cluster, agentOptions{heartbeat: heartbeat, lease: lease, statusFault: fault})

	// The first Lease of this agent is the initial-sync watermark: every mirror is there.
	var first time.Time
	var l *coordinationv1.Lease
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		if l, err = agentLease(cluster); err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(started) {
			return errors.New("not renewed by this agent yet")
		}
		for _, name := range names {
			m, err := mirrorOf(cluster, ns, name)
			if err != nil || m.Status.Origin == nil {
				t.Fatalf("the Lease was renewed before the initial sync: the mirror of %s is %v (%v)", name, m.Status.Origin, err)
			}
		}
		if first, err = syncedSince(l); err != nil {
			return err
		}
		return nil
	})
	if first.Before(started) {
		t.Errorf("synced-since %s, before the agent started (%s)", first, started)
	}
	if got, want := l.Annotations[keys.Mirrored], strconv.Itoa(spokeWorkspaces(t, spoke)); got != want {
		t.Errorf("mirrored %q, want %s", got, want)
	}
	// The completeness watermark: every change before it is mirrored; here, nothing is in flight.
	if at, err := time.Parse(time.RFC3339Nano, l.Annotations[keys.SyncedAt]); err != nil || at.Before(first) {
		t.Errorf("synced-at %q (%v), want a time not before synced-since %s", l.Annotations[keys.SyncedAt], err, first)
	}
	if v := l.Annotations[keys.AgentVersion]; v != "v0.1.3-test" {
		t.Errorf("agent version %q", v)
	}
	// While the sync keeps up, the Lease is renewed and synced-since stays.
	renewed := l.Spec.RenewTime.Time
	testenv.Eventually(t, 30*time.Second, func() error {
		l, err := agentLease(cluster)
		if err != nil {
			return err
		}
		if since, err := syncedSince(l); err != nil || !since.Equal(first) {
			t.Fatalf("synced-since became %s (%v) while in sync, want %s kept", since, err, first)
		}
		if !l.Spec.RenewTime.Time.After(renewed) {
			return errors.New("not renewed again")
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, clusterAvailable(cluster, true))

	// The sync breaks for one Workspace: its mirror's status stays stale.
	refuse.Store(true)
	ws := &magosv1.Workspace{}
	if err := spoke.Get(ctx, stuck, ws); err != nil {
		t.Fatal(err)
	}
	ws.Status = magosv1.WorkspaceStatus{Phase: magosv1.PhasePending, Reason: magosv1.ReasonAwaitingRollout,
		CurrentRunID: "20260101T000000-0badc0de", ObservedGeneration: 1}
	broke := time.Now()
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	var lagging *coordinationv1.Lease
	testenv.Eventually(t, 30*time.Second, func() error {
		l, err := agentLease(cluster)
		if err != nil {
			return err
		}
		if _, ok := l.Annotations[keys.SyncedSince]; ok {
			return fmt.Errorf("synced-since %s is still on the Lease", l.Annotations[keys.SyncedSince])
		}
		lagging = l
		return nil
	})
	if d := time.Since(broke); d > grace+2*heartbeat+3*time.Second {
		t.Errorf("synced-since left the Lease %s after the sync broke, want about the grace (%s)", d, grace)
	}
	if refused.Load() == 0 {
		t.Fatal("the fault never refused a write: the test tested nothing")
	}
	w := mirror.WatermarkOf(lagging.Annotations)
	if w.Behind < 1 || w.Lag < grace {
		t.Errorf("the lagging Lease reports %d mirror(s) behind by %s (%v), want at least 1 behind by the grace %s", w.Behind, w.Lag, lagging.Annotations, grace)
	}
	// The hub counts the cluster's Workspaces unknown, and the cluster stays Available: the
	// Lease goes on being renewed, past what one lease would last.
	testenv.Eventually(t, 30*time.Second, func() error {
		cl := &magosv1.Cluster{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: cluster}, cl); err != nil {
			return err
		}
		if cl.Status.SyncedSince != nil {
			return fmt.Errorf("the Cluster's status still shows syncedSince %s", cl.Status.SyncedSince)
		}
		return nil
	})
	lastRenewal := lagging.Spec.RenewTime.Time
	testenv.Consistently(t, lease+time.Second, clusterAvailable(cluster, true))
	l, err := agentLease(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Spec.RenewTime.Time.After(lastRenewal) {
		t.Errorf("the Lease was not renewed while the sync lagged (last at %s)", lastRenewal)
	}
	stopped := lastRenewal

	// The hub takes the write again: the mirror catches up and the Lease resumes, with a new
	// synced-since.
	fixed := time.Now().Truncate(time.Second)
	refuse.Store(false)
	testenv.Eventually(t, 90*time.Second, func() error {
		m, err := mirrorOf(cluster, ns, "stuck")
		if err != nil {
			return err
		}
		if m.Status.CurrentRunID != ws.Status.CurrentRunID {
			return fmt.Errorf("the mirror's run is %q, want %q", m.Status.CurrentRunID, ws.Status.CurrentRunID)
		}
		l, err := agentLease(cluster)
		if err != nil {
			return err
		}
		if !l.Spec.RenewTime.Time.After(stopped) {
			return errors.New("the Lease is not renewed yet")
		}
		since, err := syncedSince(l)
		if err != nil {
			return err
		}
		if since.Before(fixed) || !since.After(first) {
			return fmt.Errorf("synced-since %s, want a new one (not before %s)", since, fixed)
		}
		if w := mirror.WatermarkOf(l.Annotations); w.Behind != 0 {
			return fmt.Errorf("the Lease still reports %d mirror(s) behind", w.Behind)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		cl := &magosv1.Cluster{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: cluster}, cl); err != nil {
			return err
		}
		if cl.Status.SyncedSince == nil {
			return errors.New("the Cluster's status shows no syncedSince again yet")
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, clusterAvailable(cluster, true))
}
