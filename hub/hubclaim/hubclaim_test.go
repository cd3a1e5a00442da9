package hubclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/hub/hubclaim"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// kube is a cluster-admin client of the tests' API server: Leases only, no Magos kinds needed.
// The tests share it and run one at a time, each removing its Leases when it ends (Check and
// Claim see every namespace's).
var kube client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.MainOptions{
		Fleet: localcluster.Options{Bare: true},
		Setup: func(env *testenv.MainEnv) error {
			kube = env.Fleet.Hub.Client
			return nil
		},
	})
}

// interval paces the tests' Claims (the hub lists every second).
const interval = 200 * time.Millisecond

// leaderLease creates the hub leader Lease of namespace, held by holder (none: released) for
// seconds, renewed at renewed, naming version; the test deletes it when it ends.
func leaderLease(t *testing.T, namespace, holder string, seconds int32, renewed time.Time, version string) *coordinationv1.Lease {
	t.Helper()
	ctx := context.Background()
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: keys.HubLeaderLease},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To(seconds),
			AcquireTime:          &metav1.MicroTime{Time: renewed},
			RenewTime:            &metav1.MicroTime{Time: renewed},
		},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	if version != "" {
		l.Labels = map[string]string{keys.HubVersion: version}
	}
	if err := kube.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kube.Delete(context.Background(), l); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting Lease %s/%s: %v", l.Namespace, l.Name, err)
		}
	})
	return l
}

// renew renews the Lease namespace/keys.HubLeaderLease every 300 ms, as a running hub's leader
// election does (every 2 s), until the returned stop is called or the test ends. The renew time
// it writes runs an hour behind this machine's clock: a hub's clock must not matter.
func renew(t *testing.T, namespace string) (stop func()) {
	t.Helper()
	return testenv.Background(t, context.Background(), "renewing "+namespace, func(ctx context.Context) error {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			l := &coordinationv1.Lease{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: keys.HubLeaderLease}, l); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}
			if err := kube.Update(ctx, l); err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
				return err
			}
		}
	})
}

// release releases the Lease as a hub that stops cleanly does: no holder.
func release(t *testing.T, namespace string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		l := &coordinationv1.Lease{}
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: keys.HubLeaderLease}, l); err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		return kube.Update(context.Background(), l)
	})
}

// logLines is a logger that keeps its messages and values, one line each.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (l *logLines) find(parts ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		found := true
		for _, p := range parts {
			found = found && strings.Contains(line, p)
		}
		if found {
			return nil
		}
	}
	return fmt.Errorf("no log line with %q in:\n%s", parts, strings.Join(l.lines, "\n"))
}

func newClaim(t *testing.T, namespace string, log logr.Logger, mutate ...func(*hubclaim.Options)) *hubclaim.Claim {
	t.Helper()
	opts := hubclaim.Options{Reader: kube, Namespace: namespace, Interval: interval, Logger: log}
	for _, m := range mutate {
		m(&opts)
	}
	c, err := hubclaim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCheckRefusesBesideARenewedLease: a leader Lease in another namespace that the hub sees
// renewed is another hub: Check refuses, naming its Lease, holder and version, within a few
// renewals, although the renew times it writes lie an hour in the past (the other hub's clock is
// not compared with this one's). The hub's own namespace's Lease, renewed too, is its replicas'
// and no reason to refuse.
func TestCheckRefusesBesideARenewedLease(t *testing.T) {
	leaderLease(t, "live-a", "hub-a-0", 15, time.Now().Add(-time.Hour), "v9.8.7")
	renew(t, "live-a")

	start := time.Now()
	err := newClaim(t, "live-b", logr.Discard()).Check(context.Background())
	want := "another magos hub runs on this API server: its leader Lease live-a/" + keys.HubLeaderLease +
		" is held by hub-a-0 (version v9.8.7) and renewed; two hubs must not share one API server"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check beside a renewed Lease: %v, want an error containing %q", err, want)
	}
	var another *hubclaim.AnotherHubError
	if !errors.Is(err, hubclaim.ErrAnotherHub) || !errors.As(err, &another) || another.Holder != "hub-a-0" {
		t.Errorf("Check's error %#v is not an AnotherHubError naming hub-a-0", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Check took %s to find a Lease renewed every 300ms, want a few renewals", took)
	}

	if err := newClaim(t, "live-a", logr.Discard()).Check(context.Background()); err != nil {
		t.Errorf("Check of the hub whose own Lease it is: %v, want nil", err)
	}
}

// TestCheckIgnoresLeftoverLeases: a leader Lease held but not renewed (a killed hub's leftover,
// its renew time in the future as a fast clock would write it) and a released one (a hub that
// stopped cleanly) are no hub: Check returns nil after watching the held one for its duration,
// and logs that it ignores it.
func TestCheckIgnoresLeftoverLeases(t *testing.T) {
	leaderLease(t, "left-a", "hub-gone-0", 2, time.Now().Add(time.Hour), "v1.0.0")
	leaderLease(t, "left-b", "", 15, time.Now(), "")

	var log logLines
	start := time.Now()
	if err := newClaim(t, "left-c", log.logger()).Check(context.Background()); err != nil {
		t.Fatalf("Check beside leftover Leases: %v, want nil", err)
	}
	if took := time.Since(start); took < 2*time.Second || took > 10*time.Second {
		t.Errorf("Check took %s, want about the leftover Lease's duration (2s) and an interval", took)
	}
	for _, want := range [][]string{
		{"found another hub's leader Lease", "left-a/" + keys.HubLeaderLease, "hub-gone-0"},
		{"ignoring another hub's leader Lease: held but not renewed", "left-a/" + keys.HubLeaderLease, "hub-gone-0", "v1.0.0"},
		{"ignoring another hub's leader Lease: released", "left-b/" + keys.HubLeaderLease},
	} {
		if err := log.find(want...); err != nil {
			t.Error(err)
		}
	}
}

// TestClaimYoungerHubStops: two hubs that both lead (they started together, and each passed its
// Check before the other held a Lease). The one whose Lease is younger stops: its Claim returns
// the AnotherHubError, and it never lets the registry remove anything (Wait).
func TestClaimYoungerHubStops(t *testing.T) {
	leaderLease(t, "race-a", "hub-a-0", 15, time.Now(), "v9.8.7")
	renew(t, "race-a")
	// Created after race-a's, or in the same second with a namespace that sorts after it.
	leaderLease(t, "race-z", "hub-z-0", 15, time.Now(), "")

	c := newClaim(t, "race-z", logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.Start(ctx)
	want := "its leader Lease race-a/" + keys.HubLeaderLease + " is held by hub-a-0 (version v9.8.7) and renewed, and it is older than this hub's race-z/" +
		keys.HubLeaderLease + ", which leads too: this hub stops"
	if !errors.Is(err, hubclaim.ErrAnotherHub) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the younger hub's Claim: %v, want an error containing %q", err, want)
	}
	short, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stop()
	if err := c.Wait(short); err == nil {
		t.Error("the younger hub's Claim let the registry remove clusters")
	}
	if c.Judged() {
		t.Error("the younger hub's Claim let the Rollouts and Projects be decided")
	}
}

// TestClaimOlderHubWaitsForTheYounger: the hub with the older Lease keeps leading and removes
// nothing (Wait blocks) while the younger is seen renewed; once the younger stops (its Lease
// released), the older's Claim ends and removal may proceed. A younger hub that does not stop
// within YieldTimeout (a hub of a version without this check) makes the older stop instead.
func TestClaimOlderHubWaitsForTheYounger(t *testing.T) {
	leaderLease(t, "old-a", "hub-a-0", 15, time.Now(), "")
	// Created after old-a's, or in the same second with a namespace that sorts after it.
	leaderLease(t, "old-z", "hub-z-0", 15, time.Now(), "v9.8.7")
	stopRenewing := renew(t, "old-z")

	var log logLines
	c := newClaim(t, "old-a", log.logger())
	claimed := testenv.Go(context.Background(), c.Start)
	testenv.Eventually(t, 10*time.Second, func() error {
		return log.find("another hub leads on this API server too, and its leader Lease is younger than this hub's", "old-z/"+keys.HubLeaderLease)
	})
	testenv.Consistently(t, time.Second, func() error {
		short, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer stop()
		if c.Wait(short) == nil {
			return errors.New("the older hub's Claim let the registry remove clusters while a younger hub leads")
		}
		if c.Judged() {
			return errors.New("the older hub's Claim let the Rollouts and Projects be decided while a younger hub leads")
		}
		return nil
	})
	stopRenewing()
	release(t, "old-z")
	wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := c.Wait(wait); err != nil {
		t.Fatalf("the older hub's Claim after the younger hub stopped: %v", err)
	}
	if err := claimed(); err != nil {
		t.Errorf("the older hub's Claim ended with %v, want nil", err)
	}

	// A younger hub that does not yield.
	renew(t, "old-z")
	testenv.Eventually(t, 10*time.Second, func() error {
		l := &coordinationv1.Lease{}
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "old-z", Name: keys.HubLeaderLease}, l); err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("hub-z-1")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](15)
		return kube.Update(context.Background(), l)
	})
	c = newClaim(t, "old-a", logr.Discard(), func(o *hubclaim.Options) { o.YieldTimeout = 2 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.Start(ctx)
	want := "its leader Lease old-z/" + keys.HubLeaderLease + " is held by hub-z-1 (version v9.8.7) and renewed, and it did not stop within 2s although its Lease is younger than this hub's old-a/" + keys.HubLeaderLease
	if !errors.Is(err, hubclaim.ErrAnotherHub) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the older hub's Claim beside a younger hub that does not stop: %v, want an error containing %q", err, want)
	}
}

// TestClaimAlone: with no other hub's Lease the leading hub's Claim ends at once, and removal
// may proceed.
func TestClaimAlone(t *testing.T) {
	leaderLease(t, "alone", "hub-0", 15, time.Now(), "")
	c := newClaim(t, "alone", logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.Judged() {
		t.Fatal("judged, yet Judged reports false: no Rollout would ever be decided")
	}
}
