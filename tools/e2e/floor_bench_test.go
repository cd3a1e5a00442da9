package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/tools/scalebench"
)

// BenchmarkHandoffFloor is the floor under BenchmarkStepHandoff: the API requests and watch
// hops of the step handoff done by bare clients, with no Magos code, on local API servers started
// as the fleet's are (pkg/localcluster: a hub and two spokes, each its own etcd and
// kube-apiserver, the Magos CRDs and admission policies installed), against Workspaces shaped
// like the demo's. Each actor has a client (and a connection) of its own, as each process has.
// A sample runs from an observer's watch on spoke A seeing the Workspace Applied under a new run
// to its watch on spoke B seeing that run granted: the points BenchmarkStepHandoff polls for.
//
//   - two-hops: spoke A's status write, a watch on spoke A, one status patch of A's mirror on the
//     hub, a watch on the hub, one patch of spoke B's Workspace (the shortest handoff there could
//     be through the hub: an agent writes up, another agent carries down).
//   - product-path: the requests the product makes on the path, in order, none of its logic:
//     a watch on spoke A; A's mirror status patched on the hub; a watch on the hub; B's mirror
//     patched with the grant (fenced to the resourceVersion the hub's watch last showed, as the
//     hub's grant is); a watch on the hub in B's namespace; B's mirror read from the API server
//     (as copyDecisionDown reads the decision live); spoke B's Workspace patched with the grant.
//
// Both run on Workspaces of about 12 KB (a status with a history of 10 runs, as the demo's
// Workspaces carry after a few runs); product-path-small runs the product path on Workspaces
// with no run history (about 2 KB), to show what the size costs. Each iteration gives floorRuns
// samples, one handoff after the other; every wait is bounded.
func BenchmarkHandoffFloor(b *testing.B) {
	env, err := localcluster.New(localcluster.Options{Spokes: floorClusters[:]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.Stop(); err != nil {
			b.Errorf("stopping the API servers: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	for _, v := range []struct {
		name    string
		history int
	}{{"two-hops", 10}, {"product-path", 10}, {"product-path-small", 0}} {
		fl := newFloor(ctx, b, env, v.name, v.history)
		b.Run(v.name, func(b *testing.B) {
			var samples []time.Duration
			i := 0
			for b.Loop() {
				for range floorRuns {
					i++
					samples = append(samples, fl.handoff(ctx, b, fmt.Sprintf("%s-%d-%d", v.name, time.Now().UnixNano(), i)))
				}
			}
			reportPercentiles(b, "", samples)
		})
	}
}

// floorRuns is how many handoffs one iteration of BenchmarkHandoffFloor times.
const floorRuns = 5

// floorClusters are the spokes' names (on the hub: their mirror namespaces).
var floorClusters = [2]string{"floor-a", "floor-b"}

type floor struct {
	// name is the variant; its Workspaces live in the spokes' namespace of that name, and
	// twoHops says whether it is two-hops (else the product path).
	name    string
	twoHops bool
	history int
	// spokeA, spokeB and hub are the benchmark's own clients (the spoke runner's write).
	spokeA, spokeB, hub client.WithWatch
	// The actors, each with clients of its own: [0] writes, [1] watches (and reads).
	agentA, hubCtl, agentB, observer [2]client.WithWatch
	// mirrors are the mirrors of the Workspace of each spoke on the hub.
	mirrors [2]types.NamespacedName
	// applied and granted receive the run the observer saw Applied on spoke A, granted on B.
	applied, granted chan observed
}

type observed struct {
	run string
	at  time.Time
}

// newFloor creates the Workspaces and mirrors and starts the actors.
func newFloor(ctx context.Context, b testing.TB, env *localcluster.Fleet, name string, history int) *floor {
	b.Helper()
	newClient := func(c *localcluster.Cluster) client.WithWatch {
		cfg := rest.CopyConfig(c.Config)
		// A dialer of its own: client-go then gives the client its own transport (and HTTP/2
		// connection), as a process of its own would have.
		cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
		if err != nil {
			b.Fatal(err)
		}
		return cl
	}
	spokeA, spokeB, hub := env.Spokes[floorClusters[0]], env.Spokes[floorClusters[1]], env.Hub
	f := &floor{name: name, twoHops: name == "two-hops", history: history,
		spokeA: newClient(spokeA), spokeB: newClient(spokeB), hub: newClient(hub),
		agentA:   [2]client.WithWatch{newClient(hub), newClient(spokeA)},
		hubCtl:   [2]client.WithWatch{newClient(hub), newClient(hub)},
		agentB:   [2]client.WithWatch{newClient(spokeB), newClient(hub)},
		observer: [2]client.WithWatch{newClient(spokeA), newClient(spokeB)},
		applied:  make(chan observed, 16), granted: make(chan observed, 16),
	}
	_, template := demoscenario.SpokeObjects("floor", magosv1.Source{RepoURL: "file:///floor", TargetRevision: "main"}, false)
	for i, spoke := range []client.Client{f.spokeA, f.spokeB} {
		if err := spoke.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			b.Fatal(err)
		}
		ws := template.DeepCopy()
		ws.Namespace = name
		ws.Labels["region"] = floorClusters[i]
		if err := spoke.Create(ctx, ws); err != nil {
			b.Fatal(err)
		}
		ws.Status = floorStatus("initial", history)
		if err := spoke.Status().Update(ctx, ws); err != nil {
			b.Fatal(err)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace(floorClusters[i])}}
		if err := f.hub.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		m := &magosv1.Workspace{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: mirror.Name(ws.Namespace, ws.Name),
				Labels: mirror.Labels(floorClusters[i], ws)},
			Spec: ws.Spec,
		}
		if err := f.hub.Create(ctx, m); err != nil {
			b.Fatal(err)
		}
		m.Status = ws.Status
		m.Status.Origin = &magosv1.WorkspaceOrigin{Cluster: floorClusters[i], Namespace: ws.Namespace, Name: ws.Name,
			UID: string(ws.UID), Generation: ws.Generation}
		if err := f.hub.Status().Update(ctx, m); err != nil {
			b.Fatal(err)
		}
		f.mirrors[i] = client.ObjectKeyFromObject(m)
	}
	f.start(ctx, b)
	return f
}

// floorStatus is an Applied Workspace status of the size the demo's carries: its run, revision,
// conditions and a history of runs of a plan and an apply each (10 make about 12 KB of JSON, as
// the demo's Workspaces after a few runs).
func floorStatus(run string, history int) magosv1.WorkspaceStatus {
	phase := magosv1.PhaseApplied
	now := metav1.Now()
	const commit = "4659a48b84df934a4984aa4de7975e5e52601fc1"
	msg := fmt.Sprintf("Applied commit %.12s (run %s): 0 added, 0 changed, 0 destroyed", commit, run)
	st := magosv1.WorkspaceStatus{
		ObservedGeneration: 1, Phase: phase, Reason: magosv1.ReasonApplySucceeded, Message: msg,
		ObservedRevision: commit, CurrentRevision: commit, LastReconcileTime: &now, NextReconcileTime: &now,
		ObservedReconcileInterval: "1h0m0s", CurrentRunID: run, CurrentRunTrigger: "manual", PlanDigest: "812450e94cb2",
		ResourceChanges: &magosv1.ResourceChanges{},
		Conditions: []metav1.Condition{
			{Type: magosv1.ConditionReady, Status: metav1.ConditionTrue, Reason: magosv1.ReasonApplySucceeded, Message: msg, LastTransitionTime: now, ObservedGeneration: 1},
			{Type: magosv1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AsExpected", Message: "No errors", LastTransitionTime: now, ObservedGeneration: 1},
		},
	}
	for i := range history {
		id := fmt.Sprintf("%s-%02d", run, i)
		rec := magosv1.RunRecord{RunID: id, Trigger: "manual", Revision: commit, Generation: 1, StartedAt: &now, FinishedAt: &now,
			Phase: magosv1.PhaseApplied, Reason: magosv1.ReasonApplySucceeded, Message: msg, ResourceChanges: &magosv1.ResourceChanges{},
			PlanDigest: "812450e94cb2", Policy: "NotChecked"}
		for _, op := range []string{"plan", "apply"} {
			rec.Operations = append(rec.Operations, magosv1.RunOperation{Operation: op, Outcome: "Succeeded", StartedAt: &now, FinishedAt: &now,
				OutputSecret: demoscenario.Workspace + "-" + id + "-" + op})
		}
		st.Runs = append(st.Runs, rec)
	}
	return st
}

// start runs the actors of the variant: each watches what its process would and writes what it
// would. It returns once every watch is open.
func (f *floor) start(ctx context.Context, b testing.TB) {
	var ready sync.WaitGroup
	ready.Add(5)
	defer ready.Wait()
	// The observer: Applied under a new run on spoke A, that run granted on spoke B.
	go f.watch(ctx, b, &ready, f.observer[0], f.name, func(ws *magosv1.Workspace) {
		if ws.Status.Phase == magosv1.PhaseApplied && ws.Status.CurrentRunID != "initial" {
			f.applied <- observed{ws.Status.CurrentRunID, time.Now()}
		}
	})
	go f.watch(ctx, b, &ready, f.observer[1], f.name, func(ws *magosv1.Workspace) {
		if run := ws.Annotations[keys.GrantedRun]; run != "" {
			f.granted <- observed{run, time.Now()}
		}
	})
	// Agent A: spoke A's status, up to its mirror on the hub.
	seenA := ""
	go f.watch(ctx, b, &ready, f.agentA[1], f.name, func(ws *magosv1.Workspace) {
		run := ws.Status.CurrentRunID
		if ws.Status.Phase != magosv1.PhaseApplied || run == "initial" || run == seenA {
			return
		}
		seenA = run
		st := ws.Status.DeepCopy()
		st.Origin = &magosv1.WorkspaceOrigin{Cluster: floorClusters[0], Namespace: ws.Namespace, Name: ws.Name, UID: string(ws.UID), Generation: ws.Generation}
		f.patch(ctx, b, f.agentA[0], f.mirrors[0], true, map[string]any{"status": st})
	})
	// The hub: A's mirror Applied under a new run. two-hops: agent B carries it down at once.
	// product-path: the hub grants B's mirror, fenced to the version its watch (its cache) last
	// showed, as the hub's grant is.
	seenHub, versionB := "", ""
	go f.watch(ctx, b, &ready, f.hubCtl[1], "", func(m *magosv1.Workspace) {
		if client.ObjectKeyFromObject(m) == f.mirrors[1] {
			versionB = m.ResourceVersion
			return
		}
		run := m.Status.CurrentRunID
		if client.ObjectKeyFromObject(m) != f.mirrors[0] || m.Status.Phase != magosv1.PhaseApplied || run == "initial" || run == seenHub {
			return
		}
		seenHub = run
		if f.twoHops {
			f.patch(ctx, b, f.agentB[0], f.spokeKey(), false, grantPatch(run, ""))
			return
		}
		f.patch(ctx, b, f.hubCtl[0], f.mirrors[1], false, grantPatch(run, versionB))
	})
	// Agent B (product path): its mirror's grant, read again live, carried down to spoke B.
	seenB := ""
	go f.watch(ctx, b, &ready, f.agentB[1], f.mirrors[1].Namespace, func(m *magosv1.Workspace) {
		run := m.Annotations[keys.GrantedRun]
		if f.twoHops || client.ObjectKeyFromObject(m) != f.mirrors[1] || run == "" || run == seenB {
			return
		}
		seenB = run
		var live magosv1.Workspace
		if err := f.agentB[1].Get(ctx, f.mirrors[1], &live); err != nil {
			b.Error(err)
			return
		}
		f.patch(ctx, b, f.agentB[0], f.spokeKey(), false, grantPatch(live.Annotations[keys.GrantedRun], ""))
	})
}

// spokeKey is the variant's Workspace in either spoke.
func (f *floor) spokeKey() types.NamespacedName {
	return types.NamespacedName{Namespace: f.name, Name: demoscenario.Workspace}
}

// grantPatch is a merge patch writing a grant of run (fenced to resourceVersion when set).
func grantPatch(run, resourceVersion string) map[string]any {
	md := map[string]any{"annotations": map[string]any{
		keys.GrantedRun: run, keys.GrantedBy: keys.GrantedByRollout, keys.ExecutionAllowed: "true"}}
	if resourceVersion != "" {
		md["resourceVersion"] = resourceVersion
	}
	return map[string]any{"metadata": md}
}

// patch writes a JSON merge patch on the Workspace key (its status subresource when status).
func (f *floor) patch(ctx context.Context, b testing.TB, c client.Client, key types.NamespacedName, status bool, body map[string]any) {
	raw, err := json.Marshal(body)
	if err != nil {
		b.Error(err)
		return
	}
	ws := &magosv1.Workspace{}
	ws.Namespace, ws.Name = key.Namespace, key.Name
	if status {
		err = c.Status().Patch(ctx, ws, client.RawPatch(types.MergePatchType, raw))
	} else {
		err = c.Patch(ctx, ws, client.RawPatch(types.MergePatchType, raw))
	}
	if err != nil && ctx.Err() == nil {
		b.Error(err)
	}
}

// watch follows the Workspaces of namespace with c until ctx ends, calling on for every added or
// modified one, in order; a watch the API server closes is opened again where it ended. ready is
// done once the first watch is open (or failed).
func (f *floor) watch(ctx context.Context, b testing.TB, ready *sync.WaitGroup, c client.WithWatch, namespace string, on func(*magosv1.Workspace)) {
	opened := false
	defer func() {
		if !opened {
			ready.Done()
		}
	}()
	var list magosv1.WorkspaceList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		if ctx.Err() == nil {
			b.Error(err)
		}
		return
	}
	rv := list.ResourceVersion
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, &magosv1.WorkspaceList{}, client.InNamespace(namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			if ctx.Err() == nil {
				b.Error(err)
			}
			return
		}
		if !opened {
			opened = true
			ready.Done()
		}
		for ev := range w.ResultChan() {
			ws, ok := ev.Object.(*magosv1.Workspace)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			rv = ws.ResourceVersion
			on(ws)
		}
		w.Stop()
	}
}

// handoff times one handoff under a new run: spoke A's Workspace turns Applied, and the
// observer waits to see it Applied on A and granted on B.
func (f *floor) handoff(ctx context.Context, b testing.TB, run string) time.Duration {
	b.Helper()
	f.patch(ctx, b, f.spokeA, f.spokeKey(), true, map[string]any{"status": floorStatus(run, f.history)})
	timeout := time.After(30 * time.Second)
	var applied, granted time.Time
	for applied.IsZero() || granted.IsZero() {
		select {
		case o := <-f.applied:
			if o.run == run {
				applied = o.at
			}
		case o := <-f.granted:
			if o.run == run {
				granted = o.at
			}
		case <-timeout:
			b.Fatalf("%s: run %s was not handed off within 30s (applied at %v, granted at %v)", f.name, run, applied, granted)
		}
	}
	return granted.Sub(applied)
}

// reportPercentiles reports the samples' p50, p90 and p99 in milliseconds (nearest rank,
// scalebench.Percentile) and their number, as <prefix>p50-ms... and <prefix>samples.
func reportPercentiles(b *testing.B, prefix string, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		b.Fatal("no samples")
	}
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
		b.ReportMetric(float64(scalebench.Percentile(samples, q.q).Microseconds())/1000, prefix+q.name+"-ms")
	}
	b.ReportMetric(float64(len(samples)), prefix+"samples")
}
