package decisiontest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runner"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// Revision is the commit every simulated run applies.
const Revision = "0123456789abcdef0123456789abcdef01234567"

// Grant is one grant a spoke Workspace received: the annotations changed to
// execution-allowed=true naming Run.
type Grant struct {
	// Key is cluster/namespace/name.
	Key string
	// Run is the granted run; By the granted-by value.
	Run string
	By  string
	// At is when the agent saw the grant.
	At time.Time
}

// Grants is the ordered log of the grants every Agent observed.
type Grants struct {
	mu      sync.Mutex
	entries []Grant
}

func (g *Grants) add(e Grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entries = append(g.entries, e)
}

// All returns the grants observed so far, in order.
func (g *Grants) All() []Grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.entries)
}

// For returns the grants observed on the given Workspaces (cluster/namespace/name), in order.
func (g *Grants) For(keys ...string) []Grant {
	var out []Grant
	for _, e := range g.All() {
		if slices.Contains(keys, e.Key) {
			out = append(out, e)
		}
	}
	return out
}

// InNamespace returns the grants observed on Workspaces of the namespace, in order.
func (g *Grants) InNamespace(ns string) []Grant {
	var out []Grant
	for _, e := range g.All() {
		if strings.Split(e.Key, "/")[1] == ns {
			out = append(out, e)
		}
	}
	return out
}

// Agent plays the agent of one spoke: it watches the spoke's Workspaces, gives each new
// Workspace a run (Pending/AwaitingRollout with a run ID, as the Workspace controller does on
// its first reconcile), and when a Workspace is granted its current run, moves it to Planning
// and then Applied (or Failed), with observedGeneration, currentRevision, observedRevision
// and the Ready condition. It records every grant it sees.
type Agent struct {
	// Cluster is the spoke's name.
	Cluster string

	c      client.WithWatch
	grants *Grants

	mu sync.Mutex
	// paused Workspaces do not start granted runs; held ones stop in Planning; failing ones
	// end their next run Failed.
	paused, held, failing map[types.NamespacedName]bool
	lastGrant             map[types.NamespacedName]string
}

// StartAgents starts an Agent for every spoke of h, logging grants into one Grants. They stop
// when the test ends.
func (h *Hub) StartAgents(t testing.TB) (map[string]*Agent, *Grants) {
	t.Helper()
	g := &Grants{}
	agents := map[string]*Agent{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for name, s := range h.Fleet.Spokes {
		c, err := client.NewWithWatch(s.Config, client.Options{Scheme: magosscheme.New()})
		if err != nil {
			t.Fatalf("agent client for %s: %v", name, err)
		}
		a := &Agent{Cluster: name, c: c, grants: g,
			paused: map[types.NamespacedName]bool{}, held: map[types.NamespacedName]bool{},
			failing: map[types.NamespacedName]bool{}, lastGrant: map[types.NamespacedName]string{}}
		agents[name] = a
		wg.Go(func() { a.run(ctx, t) })
	}
	return agents, g
}

func (a *Agent) run(ctx context.Context, t testing.TB) {
	for ctx.Err() == nil {
		var list magosv1.WorkspaceList
		if err := a.c.List(ctx, &list); err != nil {
			if ctx.Err() == nil {
				t.Logf("agent %s: listing Workspaces: %v", a.Cluster, err)
			}
			continue
		}
		for i := range list.Items {
			a.handle(ctx, t, &list.Items[i])
		}
		w, err := a.c.Watch(ctx, &magosv1.WorkspaceList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if ws, ok := ev.Object.(*magosv1.Workspace); ok {
				a.handle(ctx, t, ws)
			}
		}
		w.Stop()
	}
}

func (a *Agent) handle(ctx context.Context, t testing.TB, ws *magosv1.Workspace) {
	nn := client.ObjectKeyFromObject(ws)
	ann := ws.Annotations
	run := ann[keys.GrantedRun]
	granted := ann[keys.ExecutionAllowed] == "true"
	a.mu.Lock()
	if granted && a.lastGrant[nn] != run {
		a.grants.add(Grant{Key: a.Cluster + "/" + nn.String(), Run: run, By: ann[keys.GrantedBy], At: time.Now()})
	}
	if granted {
		a.lastGrant[nn] = run
	} else {
		a.lastGrant[nn] = ""
	}
	paused, held, failing := a.paused[nn], a.held[nn], a.failing[nn]
	a.mu.Unlock()

	var err error
	switch {
	case ws.Status.Phase == "":
		err = a.mint(ctx, nn, magosv1.ReasonAwaitingRollout, true)
	case ws.Status.Phase == magosv1.PhasePending && granted && run == ws.Status.CurrentRunID && !paused:
		err = a.setStatus(ctx, nn, func(w *magosv1.Workspace) bool {
			if w.Status.Phase != magosv1.PhasePending || w.Status.CurrentRunID != run {
				return false
			}
			w.Status.ObservedGeneration = w.Generation
			w.Status.CurrentRevision = Revision
			phase(w, magosv1.PhasePlanning, magosv1.ReasonPlanJobCreated, metav1.ConditionUnknown)
			return true
		})
		if err == nil && !held {
			err = a.finish(ctx, nn, failing)
		}
	}
	if err != nil && ctx.Err() == nil {
		t.Errorf("agent %s: Workspace %s: %v", a.Cluster, nn, err)
	}
}

// finish ends the Workspace's run: Applied, or Failed when fail is set.
func (a *Agent) finish(ctx context.Context, nn types.NamespacedName, fail bool) error {
	if fail {
		a.mu.Lock()
		delete(a.failing, nn)
		a.mu.Unlock()
	}
	return a.setStatus(ctx, nn, func(w *magosv1.Workspace) bool {
		if w.Status.Phase != magosv1.PhasePlanning && w.Status.Phase != magosv1.PhaseApplying {
			return false
		}
		if fail {
			phase(w, magosv1.PhaseFailed, magosv1.ReasonApplyFailed, metav1.ConditionFalse)
		} else {
			w.Status.ObservedRevision = Revision
			phase(w, magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, metav1.ConditionTrue)
		}
		return true
	})
}

// NewRun makes a run due on the Workspace, as the Workspace controller does on its first
// reconcile and on every reset: a new run ID and phase Pending with the given reason.
func (a *Agent) NewRun(t testing.TB, ns, name, reason string) string {
	t.Helper()
	nn := types.NamespacedName{Namespace: ns, Name: name}
	if err := a.mint(context.Background(), nn, reason, false); err != nil {
		t.Fatalf("new run on Workspace %s in %s: %v", nn, a.Cluster, err)
	}
	return a.Run(t, ns, name)
}

func (a *Agent) mint(ctx context.Context, nn types.NamespacedName, reason string, first bool) error {
	return a.setStatus(ctx, nn, func(w *magosv1.Workspace) bool {
		if first && w.Status.Phase != "" {
			return false
		}
		w.Status.CurrentRunID = RunID()
		w.Status.CurrentRunTrigger = magosv1.TriggerInitial
		if reason != magosv1.ReasonAwaitingRollout {
			w.Status.CurrentRunTrigger = magosv1.TriggerRetry
		}
		phase(w, magosv1.PhasePending, reason, metav1.ConditionUnknown)
		return true
	})
}

// Run returns the Workspace's current run ID.
func (a *Agent) Run(t testing.TB, ns, name string) string {
	t.Helper()
	ws := &magosv1.Workspace{}
	if err := a.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, ws); err != nil {
		t.Fatalf("reading Workspace %s/%s in %s: %v", ns, name, a.Cluster, err)
	}
	return ws.Status.CurrentRunID
}

// Pause stops the Workspace from starting granted runs until Resume.
func (a *Agent) Pause(ns, name string) { a.set(a.paused, ns, name, true) }

// Resume lets a paused Workspace start its granted run.
func (a *Agent) Resume(t testing.TB, ns, name string) {
	t.Helper()
	a.set(a.paused, ns, name, false)
	a.kick(t, ns, name)
}

// Hold makes the Workspace's next granted run stop in Planning until Release.
func (a *Agent) Hold(ns, name string) { a.set(a.held, ns, name, true) }

// Release completes a held run (Applied) and stops holding.
func (a *Agent) Release(t testing.TB, ns, name string) {
	t.Helper()
	a.set(a.held, ns, name, false)
	nn := types.NamespacedName{Namespace: ns, Name: name}
	testenv.Eventually(t, 0, func() error {
		ws := &magosv1.Workspace{}
		if err := a.c.Get(context.Background(), nn, ws); err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhasePlanning {
			return fmt.Errorf("Workspace %s in %s is %s, not Planning", nn, a.Cluster, ws.Status.Phase)
		}
		return a.finish(context.Background(), nn, false)
	})
}

// FailNext makes the Workspace's next run end Failed.
func (a *Agent) FailNext(ns, name string) { a.set(a.failing, ns, name, true) }

func (a *Agent) set(m map[types.NamespacedName]bool, ns, name string, v bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m[types.NamespacedName{Namespace: ns, Name: name}] = v
}

// kick re-handles a Workspace (after a Resume, nothing else may change it).
func (a *Agent) kick(t testing.TB, ns, name string) {
	t.Helper()
	ws := &magosv1.Workspace{}
	if err := a.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, ws); err != nil {
		t.Fatalf("reading Workspace %s/%s in %s: %v", ns, name, a.Cluster, err)
	}
	a.handle(context.Background(), t, ws)
}

// setStatus applies change to a fresh copy of the Workspace and updates its status, retrying
// on conflicts. change returns false to leave the Workspace as it is.
func (a *Agent) setStatus(ctx context.Context, nn types.NamespacedName, change func(*magosv1.Workspace) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ws := &magosv1.Workspace{}
		if err := a.c.Get(ctx, nn, ws); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !change(ws) {
			return nil
		}
		ws.Status.LastReconcileTime = &metav1.Time{Time: time.Now()}
		return a.c.Status().Update(ctx, ws)
	})
}

func phase(w *magosv1.Workspace, p magosv1.Phase, reason string, ready metav1.ConditionStatus) {
	w.Status.Phase, w.Status.Reason, w.Status.Message = p, reason, "set by the test agent"
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{
		Type: magosv1.ConditionReady, Status: ready, Reason: reason, Message: w.Status.Message,
		ObservedGeneration: w.Generation,
	})
}

// RunID mints a run ID as the Workspace controller does.
func RunID() string { return runner.NewRunID(time.Now()) }
