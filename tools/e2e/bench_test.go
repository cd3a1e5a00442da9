package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// BenchmarkStepHandoff measures the decision latency across clusters: from the moment the last
// Workspace of a step is Applied in its spoke to the moment the next step's grant for the
// current run arrives on the Workspace in another spoke. The path is the agent mirroring the
// status up, the hub deciding and patching the mirror, and the other agent carrying the grant
// down. Each iteration re-runs the whole Rollout (a reconcile-request on every Workspace) and
// gives two samples (us-east-1 -> eu-west-1, eu-west-1 -> ap-south-1), observed twice: by one
// poller reading every spoke's Workspace every 5ms (p50-ms, p90-ms, p99-ms, as since the
// benchmark was written), and by a watch on every spoke (watch-p50-ms...), as
// BenchmarkHandoffFloor observes the same path done by bare clients. The poller's reads take
// longer on a loaded machine, and its samples with them; a watch sees each change when an
// informer would. Percentiles are nearest rank.
//
// With MAGOS_BENCH_IDLE_CLUSTERS=N, N more agent clusters are registered in the hub's config
// file (bound to every namespace, as the spokes are), whose agents never connect: they stay
// unavailable (AgentNeverSeen). Each step of the Rollout then selects its own region's cluster
// (clusterSelector), so no step waits for them: they are registered, not selected.
func BenchmarkStepHandoff(b *testing.B) {
	f, _ := start(b)
	// The fleet's context lasts 10 minutes; the iterations may need longer.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if _, err := demo.Run(ctx, f, demo.Options{}); err != nil {
		b.Fatal(err)
	}
	if idle := idleClusters(b); idle > 0 {
		registerIdleClusters(ctx, b, f, idle)
	}
	var polled, watched []time.Duration
	var legs handoffLegs
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for b.Loop() {
		p, w, l := stepHandoffRound(ctx, b, f, tick)
		polled, watched = append(polled, p...), append(watched, w...)
		legs.up, legs.decide, legs.down = append(legs.up, l.up...), append(legs.decide, l.decide...), append(legs.down, l.down...)
	}
	reportPercentiles(b, "", polled)
	reportPercentiles(b, "watch-", watched)
	reportPercentiles(b, "up-", legs.up)
	reportPercentiles(b, "decide-", legs.decide)
	reportPercentiles(b, "down-", legs.down)
}

// handoffLegs split the watched handoffs along the path, as watches on the spokes and on the
// hub saw it: up from the previous step's Workspace Applied on its spoke to its mirror Applied
// on the hub (the agent's mirror write), decide from that mirror Applied to the next step's
// mirror granted (the hub's decision and grant write), and down from that grant on the hub to
// the grant on the next spoke (the agent's copy-down).
type handoffLegs struct {
	up, decide, down []time.Duration
}

// legsOf returns the legs of each handoff that spoke and hub watches both saw in order.
func legsOf(order []string, spoke, hub *handoffTimes) handoffLegs {
	var l handoffLegs
	for i := 1; i < len(order); i++ {
		prev, next := order[i-1], order[i]
		t := []time.Time{spoke.applied[prev], hub.applied[prev], hub.granted[next], spoke.granted[next]}
		if slices.ContainsFunc(t, time.Time.IsZero) || !slices.IsSortedFunc(t, time.Time.Compare) {
			continue
		}
		l.up, l.decide, l.down = append(l.up, t[1].Sub(t[0])), append(l.decide, t[2].Sub(t[1])), append(l.down, t[3].Sub(t[2]))
	}
	return l
}

// handoffTimes are when an observer first saw, in each spoke, the Workspace's new run (Pending)
// Applied and granted.
type handoffTimes struct {
	runs             map[string]string
	applied, granted map[string]time.Time
}

func newHandoffTimes() *handoffTimes {
	return &handoffTimes{runs: map[string]string{}, applied: map[string]time.Time{}, granted: map[string]time.Time{}}
}

// see records what Workspace w of cluster shows at time at. The run a Workspace was reset to is
// the first it shows Pending, so an old grant or an old Applied never counts.
func (h *handoffTimes) see(cluster string, w *magosv1.Workspace, at time.Time) {
	if w.Status.Phase == magosv1.PhasePending && h.runs[cluster] == "" {
		h.runs[cluster] = w.Status.CurrentRunID
	}
	run := h.runs[cluster]
	if run == "" {
		return
	}
	if _, ok := h.applied[cluster]; !ok && w.Status.Phase == magosv1.PhaseApplied && w.Status.CurrentRunID == run {
		h.applied[cluster] = at
	}
	if _, ok := h.granted[cluster]; !ok && w.Annotations[keys.GrantedRun] == run {
		h.granted[cluster] = at
	}
}

// done reports whether every spoke's run was seen Applied and every one after the first
// granted.
func (h *handoffTimes) done(order []string) bool {
	if len(h.applied) < len(order) {
		return false
	}
	for _, c := range order[1:] {
		if _, ok := h.granted[c]; !ok {
			return false
		}
	}
	return true
}

// handoffs returns, for each spoke after the first, the time from its predecessor's Applied to
// its grant. A grant seen before the predecessor's Applied is no handoff: the hub granted on the
// predecessor's earlier run, Applied at the same commit, before it saw the new one.
func (h *handoffTimes) handoffs(order []string) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(order); i++ {
		at, ok1 := h.applied[order[i-1]]
		g, ok2 := h.granted[order[i]]
		if ok1 && ok2 && !g.Before(at) {
			out = append(out, g.Sub(at))
		}
	}
	return out
}

// stepHandoffRound re-runs the demo's Rollout on fleet f once (a reconcile-request on every
// Workspace) and returns its handoffs as the poller saw them and as the watches saw them: for
// each step after the first, the time from the previous step's Workspace seen Applied under
// its new run to this step's Workspace seen granted its new run.
func stepHandoffRound(ctx context.Context, tb testing.TB, f *devfleet.Fleet, tick *time.Ticker) (polled, watched []time.Duration, legs handoffLegs) {
	tb.Helper()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan func(spoke, hub *handoffTimes), 64)
	// follow watches the Workspaces of namespace ("": all) with cfg and hands what
	// mirrored(ws) says (its cluster, and whether it is on the hub) to the round.
	follow := func(cfg *rest.Config, namespace string, mirrored func(*magosv1.Workspace) (string, bool)) {
		c, err := client.NewWithWatch(cfg, client.Options{Scheme: f.Hub.Client.Scheme()})
		if err != nil {
			tb.Fatal(err)
		}
		var list magosv1.WorkspaceList
		if err := c.List(wctx, &list, client.InNamespace(namespace)); err != nil {
			tb.Fatal(err)
		}
		w, err := c.Watch(wctx, &magosv1.WorkspaceList{}, client.InNamespace(namespace),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			tb.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				ws, ok := ev.Object.(*magosv1.Workspace)
				if !ok {
					continue
				}
				cluster, onHub := mirrored(ws)
				if cluster == "" {
					continue
				}
				at := time.Now()
				select {
				case seen <- func(spoke, hub *handoffTimes) {
					if onHub {
						hub.see(cluster, ws, at)
					} else {
						spoke.see(cluster, ws, at)
					}
				}:
				case <-wctx.Done():
					return
				}
			}
		}()
	}
	for _, cluster := range f.Order {
		follow(f.Spokes[cluster].Config, "default", func(ws *magosv1.Workspace) (string, bool) {
			if ws.Name != demo.Workspace {
				return "", false
			}
			return cluster, false
		})
	}
	follow(f.Hub.Config, "", func(ws *magosv1.Workspace) (string, bool) {
		id := mirror.IdentityOf(ws)
		if !id.Mirror || id.Namespace != "default" || id.Name != demo.Workspace {
			return "", false
		}
		return id.Cluster, true
	})
	for _, cluster := range f.Order {
		ws := &magosv1.Workspace{}
		ws.Namespace, ws.Name = "default", demo.Workspace
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, keys.ReconcileRequest, time.Now().Format(time.RFC3339Nano)))
		if err := f.Client(cluster).Patch(ctx, ws, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			tb.Fatal(err)
		}
	}
	poll, watch, hub := newHandoffTimes(), newHandoffTimes(), newHandoffTimes()
	deadline := time.Now().Add(3 * time.Minute)
	for !poll.done(f.Order) || !watch.done(f.Order) {
		if time.Now().After(deadline) {
			tb.Fatalf("rollout did not finish: polled applied %v granted %v; watched applied %v granted %v",
				poll.applied, poll.granted, watch.applied, watch.granted)
		}
		if !poll.done(f.Order) {
			for _, cluster := range f.Order {
				var w magosv1.Workspace
				if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "default", Name: demo.Workspace}, &w); err != nil {
					tb.Fatal(err)
				}
				poll.see(cluster, &w, time.Now())
			}
		}
		for drained := false; !drained; {
			select {
			case apply := <-seen:
				apply(watch, hub)
			default:
				drained = true
			}
		}
		<-tick.C
	}
	return poll.handoffs(f.Order), watch.handoffs(f.Order), legsOf(f.Order, watch, hub)
}

// idleClusters is $MAGOS_BENCH_IDLE_CLUSTERS: how many clusters BenchmarkStepHandoff registers
// besides the spokes (0 when unset).
func idleClusters(b testing.TB) int {
	v := os.Getenv("MAGOS_BENCH_IDLE_CLUSTERS")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("MAGOS_BENCH_IDLE_CLUSTERS=%q: not a number of clusters", v)
	}
	return n
}

// registerIdleClusters adds n agent clusters (idle-0000...), labelled region=idle and bound to
// every namespace, to the hub's config file, which the hub reloads; waits until the hub counts
// every one of them unavailable (their agents never connect); and gives each step of the
// demo's Rollout a clusterSelector for its own region, then waits for the Rollout to be
// Completed again.
func registerIdleClusters(ctx context.Context, b testing.TB, f *devfleet.Fleet, n int) {
	b.Helper()
	path := filepath.Join(f.Dir, "hub-config.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var cfg devfleet.HubConfig
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		b.Fatal(err)
	}
	idle := make([]string, n)
	for i := range idle {
		idle[i] = fmt.Sprintf("idle-%04d", i)
		cfg.Clusters = append(cfg.Clusters, devfleet.ClusterEntry{Name: idle[i], Labels: map[string]string{"region": "idle"}, Agent: &struct{}{}})
	}
	cfg.Bindings = append(cfg.Bindings, devfleet.Binding{Namespaces: []string{magosv1.AllNamespaces}, Clusters: idle})
	start := time.Now()
	if err := devfleet.WriteHubConfig(path, cfg); err != nil {
		b.Fatal(err)
	}
	err = localcluster.Poll(15*time.Minute, func() error {
		var list magosv1.ClusterList
		if err := f.Hub.Client.List(ctx, &list); err != nil {
			return err
		}
		seen := 0
		for _, c := range list.Items {
			if cond := meta.FindStatusCondition(c.Status.Conditions, magosv1.ConditionAvailable); cond != nil && cond.Reason == magosv1.ReasonAgentNeverSeen {
				seen++
			}
		}
		if seen < n {
			return fmt.Errorf("%d of %d idle clusters registered and counted unavailable", seen, n)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d idle clusters registered in %s", n, time.Since(start).Round(time.Second))
	ro := &magosv1.Rollout{}
	key := client.ObjectKey{Namespace: "default", Name: demo.Project}
	if err := f.Hub.Client.Get(ctx, key, ro); err != nil {
		b.Fatal(err)
	}
	before := ro.DeepCopy()
	for i := range ro.Spec.Strategy.Steps {
		sel := magosv1.MatchLabels(map[string]string{"region": ro.Spec.Strategy.Steps[i].Name})
		ro.Spec.Strategy.Steps[i].ClusterSelector = &sel
	}
	if err := f.Hub.Client.Patch(ctx, ro, client.MergeFrom(before)); err != nil {
		b.Fatal(err)
	}
	err = localcluster.Poll(5*time.Minute, func() error {
		if err := f.Hub.Client.Get(ctx, key, ro); err != nil {
			return err
		}
		if ro.Status.ObservedGeneration != ro.Generation || ro.Status.Reason != magosv1.ReasonRolloutCompleted {
			return fmt.Errorf("the Rollout is %s (%s), generation %d observed %d", ro.Status.Reason, ro.Status.Message, ro.Generation, ro.Status.ObservedGeneration)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
