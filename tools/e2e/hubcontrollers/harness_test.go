// Package hubcontrollers_test holds the cross-cluster tests of the hub's Rollout and Project
// controllers. Nothing in them is simulated: the real magos-hub and magos-agent binaries run
// (tools/devfleet), the hub and three spokes are real API servers, every agent mirrors its
// Workspaces to the hub through agent/hubsync and carries the hub's decisions back, and every
// run is planned and applied by real tofu through the agent's local runner.
//
// The tests steer runs only through the module the Workspaces apply (gatedModule): an apply
// waits while a hold file exists and fails once when a fail file exists. They observe the system
// only from outside: the grants each spoke's Workspaces received, read from the spoke's API
// server (Grants), the applies the module itself recorded (the ledger), and the hub's objects.
package hubcontrollers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// Regions are the spokes, in promotion order.
var (
	regions                 = devfleet.DefaultSpokes
	usEast, euWest, apSouth = regions[0], regions[1], regions[2]
)

// wait bounds every wait of these tests: real runs take seconds each, on a shared machine.
const wait = 2 * time.Minute

// gatedModule is the root module every Workspace applies. Each apply replaces a terraform_data
// resource (its trigger is the apply time), whose local-exec provisioner, run by tofu on this
// machine (the local runner runs tofu as a child process):
//   - appends "<key> <unix-nanos>" to the ledger file in control, so the module itself records
//     every apply: nothing in Magos writes or prunes that file;
//   - waits while the file <control>/<key>.hold exists (a held run stays Applying);
//   - fails once when the file <control>/<key>.fail exists (it removes the file);
//
// and whose precondition fails the plan while the file <control>/<key>.planfail exists.
//
// key is cluster.namespace.name, set by the Workspace's own VariableSet.
func gatedModule(control string) string {
	return strings.ReplaceAll(`variable "key" {
  type = string
}

resource "terraform_data" "run" {
  triggers_replace = [timestamp()]

  provisioner "local-exec" {
    command = <<-EOT
      gate="@CONTROL@/$KEY"
      printf '%s %s\n' "$KEY" "$(date +%s%N)" >> "@CONTROL@/ledger"
      i=0
      while [ -e "$gate.hold" ]; do
        i=$((i+1))
        if [ "$i" -gt 6000 ]; then echo "held for ten minutes" >&2; exit 3; fi
        sleep 0.1
      done
      if [ -e "$gate.fail" ]; then rm -f "$gate.fail"; echo "failing on purpose" >&2; exit 1; fi
    EOT
    environment = {
      KEY = var.key
    }
  }

  lifecycle {
    precondition {
      condition     = !fileexists("@CONTROL@/${var.key}.planfail")
      error_message = "failing the plan on purpose"
    }
  }
}
`, "@CONTROL@", control)
}

// world is a running fleet with the module's repository, the control directory of its gates and
// the grant observer.
type world struct {
	f   *devfleet.Fleet
	ctx context.Context
	// repo is the URL of the module's repository, commit its commit.
	repo, commit string
	control      string
	grants       *Grants
	// metrics is the address of the (first) hub's metrics endpoint.
	metrics string
}

// start starts a fleet (three spokes, agent clusters) for the test, and its observers.
func start(t *testing.T, opts devfleet.Options) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	opts.Dir = t.TempDir()
	opts.Spokes = regions
	opts.HubMetricsAddress = devfleet.AnyAddress
	var progress bytes.Buffer
	opts.Progress = &progress
	f, err := devfleet.Start(ctx, opts)
	if err != nil {
		dumpLogs(t, opts.Dir)
		t.Fatalf("starting the fleet: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, f.Dir)
		}
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	w := &world{f: f, ctx: ctx, control: t.TempDir(), grants: &Grants{}, metrics: f.HubMetricsAddress()}
	repo := gitrepotest.New(t)
	w.commit = repo.Commit(t, "the gated module", map[string]string{"main.tf": gatedModule(w.control)})
	w.repo = repo.URL()
	for _, r := range regions {
		w.observe(t, r)
	}
	return w
}

// dumpLogs prints the end of every process log of the fleet, for a failed test.
func dumpLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("---- %s (end) ----\n%s", filepath.Base(l), b)
	}
}

// scrape returns the metric families the hub's metrics endpoint serves now.
func (w *world) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	var families map[string]*dto.MetricFamily
	testenv.Eventually(t, wait, func() error {
		resp, err := http.Get("http://" + w.metrics + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err = parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			return fmt.Errorf("parsing the metrics of %s: %w", w.metrics, err)
		}
		return nil
	})
	return families
}

// histogramCount returns the number of observations of a hub histogram, summed over its
// series.
func (w *world) histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range w.scrape(t)[name].GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// metric returns the value of the hub's counter or gauge series whose labels include labels,
// and whether there is such a series.
func (w *world) metric(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, m := range w.scrape(t)[name].GetMetric() {
		if !testenv.HasLabels(m, labels) {
			continue
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// metricValue is metric's value, 0 when there is no such series.
func (w *world) metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := w.metric(t, name, labels)
	return v
}

// key is how Grants and the ledger name a Workspace: cluster/namespace/name.
func key(cluster, ns, name string) string { return cluster + "/" + ns + "/" + name }

// gate is the file name stem of a Workspace's gates in the control directory.
func (w *world) gate(cluster, ns, name string) string {
	return filepath.Join(w.control, cluster+"."+ns+"."+name)
}

// Hold makes the Workspace's applies wait (Applying) until Release.
func (w *world) Hold(t *testing.T, cluster, ns, name string) {
	t.Helper()
	if err := os.WriteFile(w.gate(cluster, ns, name)+".hold", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Release lets a held Workspace's apply go on.
func (w *world) Release(t *testing.T, cluster, ns, name string) {
	t.Helper()
	if err := os.Remove(w.gate(cluster, ns, name) + ".hold"); err != nil {
		t.Fatal(err)
	}
}

// FailNext makes the Workspace's next apply fail.
func (w *world) FailNext(t *testing.T, cluster, ns, name string) {
	t.Helper()
	if err := os.WriteFile(w.gate(cluster, ns, name)+".fail", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FailPlans makes the Workspace's plans fail until PlanAgain.
func (w *world) FailPlans(t *testing.T, cluster, ns, name string) {
	t.Helper()
	if err := os.WriteFile(w.gate(cluster, ns, name)+".planfail", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// PlanAgain lets the Workspace's plans succeed again.
func (w *world) PlanAgain(t *testing.T, cluster, ns, name string) {
	t.Helper()
	if err := os.Remove(w.gate(cluster, ns, name) + ".planfail"); err != nil {
		t.Fatal(err)
	}
}

// Applies returns the keys of the applies the module recorded, in order, in namespace ns.
func (w *world) Applies(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, a := range w.appliesAt(t, ns) {
		out = append(out, a.key)
	}
	return out
}

// apply is one line of the module's ledger: which Workspace started an apply, and when.
type apply struct {
	key string
	at  time.Time
}

// appliesAt returns the applies the module recorded in namespace ns, in order, with their times.
func (w *world) appliesAt(t *testing.T, ns string) []apply {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(w.control, "ledger"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []apply
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		k, nanos, _ := strings.Cut(line, " ")
		parts := strings.SplitN(k, ".", 3)
		if len(parts) != 3 || parts[1] != ns {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(nanos), 10, 64)
		if err != nil {
			t.Fatalf("ledger line %q: %v", line, err)
		}
		out = append(out, apply{key: key(parts[0], parts[1], parts[2]), at: time.Unix(0, n)})
	}
	return out
}

// Namespace creates a namespace on the hub and on every spoke.
func (w *world) Namespace(t *testing.T, name string) {
	t.Helper()
	for _, c := range append([]string{"hub"}, regions...) {
		err := w.f.Client(c).Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s in %s: %v", name, c, err)
		}
	}
}

// Workspace creates, in a spoke, a Workspace of the Project with the labels, applying the gated
// module, and the VariableSet that gives the module its key.
func (w *world) Workspace(t *testing.T, cluster, ns, name, project string, labels map[string]string) {
	t.Helper()
	w.workspaceWith(t, cluster, ns, name, project, labels, nil)
}

// workspaceWith is Workspace with mutate applied to the Workspace before it is created.
func (w *world) workspaceWith(t *testing.T, cluster, ns, name, project string, labels map[string]string, mutate func(*magosv1.Workspace)) {
	t.Helper()
	w.variableSet(t, cluster, ns, name)
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef:      magosv1.ProjectReference{Name: project},
			Source:          magosv1.Source{RepoURL: w.repo, TargetRevision: "main"},
			Terraform:       magosv1.TerraformSpec{Version: demo.TofuVersion},
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: name}},
		},
	}
	if mutate != nil {
		mutate(ws)
	}
	if err := w.f.Client(cluster).Create(w.ctx, ws); err != nil {
		t.Fatalf("creating Workspace %s/%s in %s: %v", ns, name, cluster, err)
	}
}

// variableSet creates the VariableSet name in a spoke that sets the module's key to
// cluster.ns.name: the module's ledger records the applies under it.
func (w *world) variableSet(t *testing.T, cluster, ns, name string) {
	t.Helper()
	vs := &magosv1.VariableSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{
			{Name: "key", Value: ptr.To(cluster + "." + ns + "." + name)},
		}},
	}
	if err := w.f.Client(cluster).Create(w.ctx, vs); err != nil {
		t.Fatalf("creating VariableSet %s/%s in %s: %v", ns, name, cluster, err)
	}
}

// SpokeWorkspace reads a Workspace in its spoke.
func (w *world) SpokeWorkspace(t *testing.T, cluster, ns, name string) *magosv1.Workspace {
	t.Helper()
	ws := &magosv1.Workspace{}
	if err := w.f.Client(cluster).Get(w.ctx, types.NamespacedName{Namespace: ns, Name: name}, ws); err != nil {
		t.Fatalf("reading Workspace %s/%s in %s: %v", ns, name, cluster, err)
	}
	return ws
}

// Mirror reads the hub's mirror of a spoke Workspace.
func (w *world) Mirror(cluster, ns, name string) (*magosv1.Workspace, error) {
	m := &magosv1.Workspace{}
	err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: mirror.Namespace(cluster), Name: mirror.Name(ns, name)}, m)
	return m, err
}

// WaitMirrored waits until the hub mirrors each Workspace (cluster/ns/name keys) with a run
// waiting for a grant.
func (w *world) WaitMirrored(t *testing.T, ks ...string) {
	t.Helper()
	testenv.Eventually(t, wait, func() error {
		for _, k := range ks {
			p := strings.SplitN(k, "/", 3)
			m, err := w.Mirror(p[0], p[1], p[2])
			if err != nil {
				return fmt.Errorf("mirror of %s: %w", k, err)
			}
			if m.Status.Phase != magosv1.PhasePending || m.Status.CurrentRunID == "" {
				return fmt.Errorf("mirror of %s is %s (run %q), want Pending with a run", k, m.Status.Phase, m.Status.CurrentRunID)
			}
		}
		return nil
	})
}

// CreateHub creates an object on the hub.
func (w *world) CreateHub(t *testing.T, obj client.Object) {
	t.Helper()
	if err := w.f.Client("hub").Create(w.ctx, obj); err != nil {
		t.Fatalf("creating %T %s on the hub: %v", obj, obj.GetName(), err)
	}
}

// WaitRollout waits until the hub Rollout's status satisfies check.
func (w *world) WaitRollout(t *testing.T, ns, name string, check func(*magosv1.Rollout) error) *magosv1.Rollout {
	t.Helper()
	ro := &magosv1.Rollout{}
	testenv.Eventually(t, wait, func() error {
		if err := w.f.Client("hub").Get(w.ctx, types.NamespacedName{Namespace: ns, Name: name}, ro); err != nil {
			return err
		}
		return check(ro)
	})
	return ro
}

// eventNotes returns "reason: note" of the Events regarding a hub object.
func (w *world) eventNotes(t *testing.T, ns, kind, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := w.f.Client("hub").List(w.ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing Events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// spokeEventNotes returns "reason: note" of the Events regarding a spoke Workspace.
func (w *world) spokeEventNotes(t *testing.T, cluster, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := w.f.Client(cluster).List(w.ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing Events in %s: %v", cluster, err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Workspace" && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// Completed checks that a Rollout completed.
func Completed(ro *magosv1.Rollout) error {
	return phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted)(ro)
}

// phase checks a Rollout's phase and reason.
func phase(p magosv1.Phase, reason string) func(*magosv1.Rollout) error {
	return func(ro *magosv1.Rollout) error {
		if ro.Status.Phase != p || ro.Status.Reason != reason {
			return fmt.Errorf("rollout is %s/%s (%s), want %s/%s", ro.Status.Phase, ro.Status.Reason, ro.Status.Message, p, reason)
		}
		return nil
	}
}

// Stop suspends a spoke's agent (SIGSTOP); the returned function resumes it and is also run
// when the test ends.
func (w *world) Stop(t *testing.T, cluster string) (resume func()) {
	t.Helper()
	if err := w.f.StopProcess(cluster); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := w.f.ContinueProcess(cluster); err != nil {
				t.Errorf("resuming the agent of %s: %v", cluster, err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// WaitAvailable waits until the hub's Cluster object says the cluster is (or is not) Available.
func (w *world) WaitAvailable(t *testing.T, cluster string, available bool) {
	t.Helper()
	testenv.Eventually(t, wait, func() error {
		c := &magosv1.Cluster{}
		if err := w.f.Client("hub").Get(w.ctx, client.ObjectKey{Name: cluster}, c); err != nil {
			return err
		}
		if got := meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionAvailable); got != available {
			return fmt.Errorf("cluster %s Available=%t, want %t", cluster, got, available)
		}
		return nil
	})
}

// Retry asks for a new run of a spoke Workspace with `magosctl retry`, as an operator would.
func (w *world) Retry(t *testing.T, cluster, ns, name string) {
	t.Helper()
	var out bytes.Buffer
	cmd := cli.NewCommand(&out, &out)
	cmd.SetArgs([]string{"--kubeconfig", w.f.Kubeconfig(cluster), "retry", name, "-n", ns})
	if err := cmd.ExecuteContext(w.ctx); err != nil {
		t.Fatalf("magosctl retry %s/%s in %s: %v: %s", ns, name, cluster, err, out.String())
	}
}

// Grant is one grant a spoke Workspace received: its annotations changed to
// execution-allowed=true naming Run.
type Grant struct {
	// Key is cluster/namespace/name.
	Key string
	// Run is the granted run; By the granted-by value.
	Run, By string
}

// Grants is the ordered log of the grants the spokes' Workspaces received, read from the spokes'
// API servers (what the agents were told, after hubsync carried it down).
type Grants struct {
	mu      sync.Mutex
	entries []Grant
	last    map[string]string // key -> the run granted now ("" when not granted)
	// active are the Workspaces running now, by namespace: planning or applying, or waiting to
	// start with a grant for their current run (as the spokes' API servers say); peak is the
	// most of a namespace's Workspaces ever active at once.
	active map[string]map[string]bool
	peak   map[string]int
	// plans are, by key, the plan digests the Workspace's grants were bound to
	// (granted-plan), in order; lastPlan the one it carries now.
	plans    map[string][]string
	lastPlan map[string]string
}

// observe records the grants of a spoke's Workspaces until the test ends.
func (w *world) observe(t *testing.T, cluster string) {
	c, err := client.NewWithWatch(w.f.Spokes[cluster].Config, client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatalf("observer client for %s: %v", cluster, err)
	}
	testenv.Background(t, w.ctx, "observing "+cluster, func(ctx context.Context) error {
		for ctx.Err() == nil {
			var list magosv1.WorkspaceList
			if err := c.List(ctx, &list); err != nil {
				continue
			}
			for i := range list.Items {
				w.grants.see(cluster, &list.Items[i])
			}
			wt, err := c.Watch(ctx, &magosv1.WorkspaceList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
			if err != nil {
				continue
			}
			for ev := range wt.ResultChan() {
				if ws, ok := ev.Object.(*magosv1.Workspace); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					w.grants.see(cluster, ws)
				}
			}
			wt.Stop()
		}
		return nil
	})
}

func (g *Grants) see(cluster string, ws *magosv1.Workspace) {
	k := key(cluster, ws.Namespace, ws.Name)
	run, by := ws.Annotations[keys.GrantedRun], ws.Annotations[keys.GrantedBy]
	if ws.Annotations[keys.ExecutionAllowed] != "true" {
		run = ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last = map[string]string{}
	}
	if run != "" && g.last[k] != run {
		g.entries = append(g.entries, Grant{Key: k, Run: run, By: by})
	}
	g.last[k] = run
	if g.plans == nil {
		g.plans, g.lastPlan = map[string][]string{}, map[string]string{}
	}
	plan := ws.Annotations[keys.GrantedPlan]
	if run == "" {
		plan = ""
	}
	if plan != "" && g.lastPlan[k] != plan {
		g.plans[k] = append(g.plans[k], plan)
	}
	g.lastPlan[k] = plan

	// The observer's own notion of running, from the phase names the spoke reports.
	var active bool
	switch ws.Status.Phase {
	case "Planning", "Planned", "Applying":
		active = true
	case "Pending":
		active = run != "" && run == ws.Status.CurrentRunID
	}
	if g.active == nil {
		g.active, g.peak = map[string]map[string]bool{}, map[string]int{}
	}
	if g.active[ws.Namespace] == nil {
		g.active[ws.Namespace] = map[string]bool{}
	}
	if active {
		g.active[ws.Namespace][k] = true
	} else {
		delete(g.active[ws.Namespace], k)
	}
	g.peak[ws.Namespace] = max(g.peak[ws.Namespace], len(g.active[ws.Namespace]))
}

// PlansFor returns the plan digests the Workspace's grants were bound to, in order.
func (g *Grants) PlansFor(k string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.plans[k])
}

// Peak returns the most Workspaces of the namespace seen running at once (see Grants.active).
func (g *Grants) Peak(ns string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak[ns]
}

// All returns the grants observed so far, in order.
func (g *Grants) All() []Grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.entries)
}

// For returns the grants observed on the given Workspaces (cluster/namespace/name), in order.
func (g *Grants) For(ks ...string) []Grant {
	var out []Grant
	for _, e := range g.All() {
		if slices.Contains(ks, e.Key) {
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

// noGrants checks that none of the given Workspaces was granted.
func noGrants(g *Grants, ks ...string) func() error {
	return func() error {
		if got := g.For(ks...); len(got) > 0 {
			return fmt.Errorf("unexpected grants: %v", keysOf(got))
		}
		return nil
	}
}

func keysOf(gs []Grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Key + "@" + g.Run
	}
	return out
}

// assertOrder checks that the events (Workspace keys, as grants or applies, in order) are exactly
// one per Workspace of steps, and that no Workspace of a step came before every Workspace of the
// step before.
func assertOrder(t *testing.T, what string, events []string, steps ...[]string) {
	t.Helper()
	stepOf := map[string]int{}
	want := 0
	for i, s := range steps {
		for _, k := range s {
			stepOf[k] = i
			want++
		}
	}
	seen := map[string]int{}
	last := 0
	for _, k := range events {
		i, ok := stepOf[k]
		if !ok {
			t.Errorf("unexpected %s of %s", what, k)
			continue
		}
		seen[k]++
		if i < last {
			t.Errorf("%s of %s (step %d) after one of step %d: order %v", what, k, i, last, events)
		}
		last = max(last, i)
		if i > 0 {
			for _, prev := range steps[i-1] {
				if seen[prev] == 0 {
					t.Errorf("%s of %s before %s of the previous step", what, k, prev)
				}
			}
		}
	}
	for k := range stepOf {
		if seen[k] != 1 {
			t.Errorf("%s had %d %ss, want one: %v", k, seen[k], what, events)
		}
	}
	if len(events) != want {
		t.Errorf("%d %ss, want %d: %v", len(events), what, want, events)
	}
}

// grantKeys returns the keys of grants, in order.
func grantKeys(gs []Grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Key
	}
	return out
}

// assertStepOrder checks, on both independent records, that the namespace's Workspaces were
// granted and applied once each, step after step.
func (w *world) assertStepOrder(t *testing.T, ns string, steps ...[]string) {
	t.Helper()
	assertOrder(t, "grant", grantKeys(w.grants.InNamespace(ns)), steps...)
	assertOrder(t, "apply", w.Applies(t, ns), steps...)
}

// projectOf returns a Project with the given annotations.
func projectOf(ns, name string, annotations map[string]string) *magosv1.Project {
	return &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}}
}

// regionWorkspaces creates one Workspace per region (env=prod, region=<r>) named name in
// namespace ns, each in the spoke of its region, and returns their keys in region order.
func (w *world) regionWorkspaces(t *testing.T, ns, name, project string) []string {
	t.Helper()
	var out []string
	for _, r := range regions {
		w.Workspace(t, r, ns, name, project, map[string]string{"env": "prod", "region": r})
		out = append(out, key(r, ns, name))
	}
	return out
}

// regionRollout is the multi-region sequential Rollout of the seed.
func regionRollout(ns, project string) *magosv1.Rollout {
	var sels []map[string]string
	for _, r := range regions {
		sels = append(sels, map[string]string{"env": "prod", "region": r})
	}
	return hubtest.Rollout(ns, project, regions, sels...)
}

// devProd creates the Workspaces web-dev (env=dev, in us-east-1) and web-prod (env=prod, in
// eu-west-1) of the Project web in namespace ns, web-dev's applies held when holdDev is set, and
// waits until the hub mirrors both. It returns their keys.
func (w *world) devProd(t *testing.T, ns string, holdDev bool) (dev, prod string) {
	t.Helper()
	w.Namespace(t, ns)
	dev, prod = key(usEast, ns, "web-dev"), key(euWest, ns, "web-prod")
	if holdDev {
		w.Hold(t, usEast, ns, "web-dev")
	}
	w.Workspace(t, usEast, ns, "web-dev", "web", map[string]string{"env": "dev"})
	w.Workspace(t, euWest, ns, "web-prod", "web", map[string]string{"env": "prod"})
	w.WaitMirrored(t, dev, prod)
	return dev, prod
}

// devProdRollout is the Rollout dev -> prod of the Project web.
func devProdRollout(ns string) *magosv1.Rollout {
	return hubtest.Rollout(ns, "web", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prod"})
}
