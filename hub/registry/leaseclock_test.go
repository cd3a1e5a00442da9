package registry

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLeaseClock: liveness is judged by when the hub saw a Lease renewed, whatever time the
// agent wrote: an agent ten minutes ahead that stops renewing expires a lease duration after the
// hub saw its last renewal; one ten minutes behind that renews stays live; a Lease seen for the
// first time is not live until the hub sees it renewed.
func TestLeaseClock(t *testing.T) {
	hub := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	lease := func(holder string, renew time.Time) *coordinationv1.Lease {
		secs := int32(40)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "magos-cluster-a"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &metav1.MicroTime{Time: renew}}}
	}
	for _, tc := range []struct {
		name string
		skew time.Duration
	}{{"ahead", 10 * time.Minute}, {"behind", -10 * time.Minute}, {"in sync", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newLeaseClock()
			agent := func(at time.Time) time.Time { return at.Add(tc.skew) }
			if _, exp := c.times(lease("a-0", agent(hub)), hub); !exp.IsZero() {
				t.Fatalf("first sight: expires %v, want no renewal seen", exp)
			}
			// Renewals every 10s, seen by the hub as they come.
			var expires time.Time
			for i := 1; i <= 3; i++ {
				now := hub.Add(time.Duration(i) * 10 * time.Second)
				_, expires = c.times(lease("a-0", agent(now)), now)
				if !now.Before(expires) {
					t.Fatalf("renewal %d seen at %v: expires %v, want live", i, now, expires)
				}
			}
			// Silence: the same Lease, read again later.
			last := hub.Add(30 * time.Second)
			for _, after := range []time.Duration{10 * time.Second, 39 * time.Second} {
				if _, e := c.times(lease("a-0", agent(last)), last.Add(after)); !last.Add(after).Before(e) {
					t.Fatalf("%s after the last renewal: expired at %v, want live until %v", after, e, last.Add(40*time.Second))
				}
			}
			if _, e := c.times(lease("a-0", agent(last)), last.Add(41*time.Second)); last.Add(41 * time.Second).Before(e) {
				t.Fatalf("41s after the last renewal: expires %v, want silent", e)
			}
		})
	}
	// expires reads what the hub saw without observing: nothing before a renewal was seen.
	c := newLeaseClock()
	c.times(lease("a-0", hub), hub)
	if e := c.expires("magos-cluster-a", 40*time.Second); !e.IsZero() {
		t.Fatalf("expires before any renewal seen: %v, want zero", e)
	}
	c.times(lease("a-0", hub.Add(time.Minute)), hub.Add(2*time.Second))
	if e := c.expires("magos-cluster-a", 40*time.Second); !e.Equal(hub.Add(42 * time.Second)) {
		t.Fatalf("expires %v, want 40s after the hub saw the renewal (%v)", e, hub.Add(42*time.Second))
	}
	// firstSeen is the hub's first sight, kept across renewals.
	if f := c.firstSeen("magos-cluster-a"); !f.Equal(hub) {
		t.Fatalf("firstSeen %v, want the first sight %v", f, hub)
	}
	// A new holder (another agent replica) counts as a renewal.
	c = newLeaseClock()
	c.times(lease("a-0", hub), hub)
	if _, e := c.times(lease("a-1", hub), hub.Add(time.Second)); e.IsZero() {
		t.Fatal("a new holder with the same renew time is not a renewal")
	}
}

// TestLeaseClockOffset: the offset of an agent's clock is the renew time it wrote less the hub's
// time when it saw the renewal, the largest over the last renewals: a renewal seen late (a slow
// watch) makes a sample smaller, never the measure. The first sight of a Lease (a renewal of
// unknown age) and a Lease read again without a renewal give no sample.
func TestLeaseClockOffset(t *testing.T) {
	hub := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	lease := func(renew time.Time) *coordinationv1.Lease {
		holder, secs := "a-0", int32(40)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "magos-cluster-a"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &metav1.MicroTime{Time: renew}}}
	}
	const skew = 7 * time.Minute
	c := newLeaseClock()
	c.observe(lease(hub.Add(skew-time.Hour)), hub) // an old renewal, seen at the hub's start
	if _, ok := c.offset("magos-cluster-a"); ok {
		t.Fatal("an offset from the first sight of a Lease, whose renewal may be of any age")
	}
	// Renewals every 10 s, seen after 2 s, 50 ms and 900 ms.
	for i, delay := range []time.Duration{2 * time.Second, 50 * time.Millisecond, 900 * time.Millisecond} {
		wrote := hub.Add(time.Duration(i+1) * 10 * time.Second)
		c.observe(lease(wrote.Add(skew)), wrote.Add(delay))
		c.observe(lease(wrote.Add(skew)), wrote.Add(delay+5*time.Second)) // read again: no renewal
	}
	if off, ok := c.offset("magos-cluster-a"); !ok || off != skew-50*time.Millisecond {
		t.Fatalf("offset %v (%v), want %v: the skew less the least delay seen", off, ok, skew-50*time.Millisecond)
	}
	// Only the last offsetSamples renewals count: the agent's clock corrected to the hub's.
	for i := range offsetSamples {
		wrote := hub.Add(time.Hour + time.Duration(i)*10*time.Second)
		c.observe(lease(wrote), wrote.Add(10*time.Millisecond))
	}
	if off, _ := c.offset("magos-cluster-a"); off != -10*time.Millisecond {
		t.Fatalf("offset %v after %d renewals in sync, want -10ms", off, offsetSamples)
	}
}
