package decider

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/ownwrites"
	"github.com/magosfleet/magos/pkg/scheme"
)

// TestObjectMetrics: a kind's reconciles are counted by result under magos_<kind>_reconciles_total,
// and forgetting an object drops its own series but keeps its reconciles counted.
func TestObjectMetrics(t *testing.T) {
	m := NewObjectMetrics("Widget")
	size := m.Gauge("magos_widget_size", "Size of the Widget.")
	turns := m.Counter("magos_widget_turns_total", "Turns of the Widget.")
	nn := types.NamespacedName{Namespace: "ns", Name: "w"}
	m.count(nn, nil)
	m.count(nn, errors.New("boom"))
	m.count(nn, nil)
	size.WithLabelValues(nn.Namespace, nn.Name).Set(3)
	turns.WithLabelValues(nn.Namespace, nn.Name).Inc()

	if got := testutil.ToFloat64(m.reconciles.WithLabelValues("ns", "w", "success")); got != 2 {
		t.Errorf("successes: %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.reconciles.WithLabelValues("ns", "w", "error")); got != 1 {
		t.Errorf("errors: %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.reconciles, "magos_widget_reconciles_total"); n != 2 {
		t.Errorf("magos_widget_reconciles_total has %d series, want 2", n)
	}

	m.forget(nn)
	if n := testutil.CollectAndCount(size) + testutil.CollectAndCount(turns); n != 0 {
		t.Errorf("%d series left of a forgotten Widget, want 0", n)
	}
	if n := testutil.CollectAndCount(m.reconciles); n != 2 {
		t.Errorf("the reconciles of a forgotten Widget: %d series, want 2 (they stay counted)", n)
	}
}

// TestReconcileWaitsForItsOwnStatusWrite: after a status write made on resourceVersion V, a
// read that still shows V (a cache behind the write) decides nothing and comes back soon: it
// would decide on the status before the write, record again the Events of transitions already
// recorded, and have its write refused. A newer version is decided at once.
func TestReconcileWaitsForItsOwnStatusWrite(t *testing.T) {
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	hub := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ro).Build()
	c := Controller[*magosv1.Rollout]{Hub: hub, metrics: NewObjectMetrics("WaitWidget"), writes: &ownwrites.Tracker{}, waiting: &sync.Map{}}
	req := mcreconcile.Request{Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}}}
	decided := 0
	steps := Steps[*magosv1.Rollout]{Decide: func(context.Context, *magosv1.Rollout) (ctrl.Result, error) {
		decided++
		return ctrl.Result{}, nil
	}}
	reconcileOnce := func() ctrl.Result {
		t.Helper()
		res, err := c.Reconcile(context.Background(), req, &magosv1.Rollout{}, steps)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if reconcileOnce(); decided != 1 {
		t.Fatalf("decided %d times, want 1", decided)
	}
	read := &magosv1.Rollout{}
	if err := hub.Get(context.Background(), req.NamespacedName, read); err != nil {
		t.Fatal(err)
	}
	c.Wrote(req.NamespacedName, read.ResourceVersion, read.ResourceVersion+"1")
	if res := reconcileOnce(); decided != 1 || res.RequeueAfter != ConflictRecheck {
		t.Fatalf("on the version written from: decided %d times (want 1), requeue %s (want %s)", decided, res.RequeueAfter, ConflictRecheck)
	}
	// The write's own event (a status change, which the For predicates pass otherwise not)
	// brings the object back at once, once.
	seen := c.ownWriteSeen()
	written := read.DeepCopy()
	written.ResourceVersion = read.ResourceVersion + "1"
	if !seen.Update(event.UpdateEvent{ObjectOld: read, ObjectNew: written}) {
		t.Fatal("the event of the status write waited for did not reconcile the Rollout")
	}
	if seen.Update(event.UpdateEvent{ObjectOld: read, ObjectNew: written}) {
		t.Fatal("a second status event reconciled the Rollout again, though nothing waited")
	}
	read.Labels = map[string]string{"moved": "on"}
	if err := hub.Update(context.Background(), read); err != nil {
		t.Fatal(err)
	}
	if reconcileOnce(); decided != 2 {
		t.Fatalf("a newer version: decided %d times, want 2", decided)
	}
}
