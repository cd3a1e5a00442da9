// Package scalebench measures one hub at fleet scale (make bench-scale, docs/performance.md): a
// real hub API server (etcd and kube-apiserver) and the real magos-hub binary, with N agent
// clusters registered through its config file, and N emulated agents.
//
// Each emulated agent speaks to the hub exactly as magos-agent does, because it is the same
// code: agent/hubsync, with the cluster's own confined credentials from
// registry.AgentKubeconfig, mirroring its Workspaces into its cluster namespace, carrying the
// hub's decisions down and heartbeating. What is emulated is the spoke side: all emulated
// clusters share one spoke API server and namespace (each agent's cache sees only its own
// Workspaces), and a small runner stands in for the agent's Workspace controller and tofu
// (runner.go says what it keeps and what it leaves out). The benchmark's own Ledger of runs,
// not the hub's objects, is what the step-order checks read.
package scalebench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/hubsync"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/tools/devfleet"
)

// Labels of the benchmark's Workspaces (besides ClusterLabel) and clusters.
const (
	// SetLabel is "stages" for the Workspaces of the 3-stage Rollout, "fleet" for the others.
	SetLabel = "magos-bench/set"
	// WaveLabel is the step (1, 2 or 3) of a "fleet" Workspace in its Project's Rollout.
	WaveLabel = "magos-bench/wave"
	// StageLabel is the label of a cluster (in the hub config) that the 3-stage Rollout's
	// steps select: 1 for the first 20 % of the clusters, 2 for the next 30 %, 3 for the rest.
	StageLabel = "magos-bench/stage"
)

// Namespace is the namespace of the Workspaces in the spoke and of the Projects and Rollouts on
// the hub.
const Namespace = "bench"

// StagesProject is the Project (and Rollout) of the 3-stage rollout: Workspace 0 of every
// cluster.
const StagesProject = "stages"

// Options configures Run.
type Options struct {
	// Clusters is N, the number of agent clusters.
	Clusters int
	// Workspaces is the number of Workspaces per cluster (at least 2): one in the 3-stage
	// Project, the others spread over the Concurrent Projects.
	Workspaces int
	// Repeats is how many commits the 3-stage Rollout rolls out, one after the other.
	Repeats int
	// Concurrent is the number of Projects, each with its own Rollout, that roll out one commit
	// at the same time. Each needs at least 3 Workspaces (one per step).
	Concurrent int
	// RunDelay is how long an emulated run takes from its grant to Applied (0: the control plane
	// alone).
	RunDelay time.Duration
	// HubBinary is the magos-hub binary to run.
	HubBinary string
	// HubArgs are more arguments for magos-hub (e.g. --kube-api-qps=200).
	HubArgs []string
	// Dir receives the hub's config file and log.
	Dir string
	// Timeout bounds each wait (default 10 minutes).
	Timeout time.Duration
	// Progress receives one line per phase (io.Discard if nil).
	Progress io.Writer
	// Logger receives the emulated agents' logs (discarded if zero).
	Logger logr.Logger
}

func (o *Options) validate() error {
	var errs []error
	if o.Clusters < 1 {
		errs = append(errs, fmt.Errorf("clusters %d: want at least 1", o.Clusters))
	}
	if o.Workspaces < 2 {
		errs = append(errs, fmt.Errorf("workspaces %d: want at least 2 per cluster (one 3-stage, one or more concurrent)", o.Workspaces))
	}
	if o.Repeats < 1 {
		errs = append(errs, fmt.Errorf("repeats %d: want at least 1", o.Repeats))
	}
	if o.Concurrent < 1 || o.Clusters*(o.Workspaces-1) < 3*o.Concurrent {
		errs = append(errs, fmt.Errorf("concurrent %d: want at least 1, and at most %d for %d clusters of %d Workspaces (each Rollout needs 3 Workspaces, one per step)",
			o.Concurrent, o.Clusters*(o.Workspaces-1)/3, o.Clusters, o.Workspaces))
	}
	if o.Clusters < 3 {
		errs = append(errs, fmt.Errorf("clusters %d: the 3-stage Rollout needs at least 3", o.Clusters))
	}
	if o.RunDelay < 0 {
		errs = append(errs, fmt.Errorf("run delay %s: want 0 or more", o.RunDelay))
	}
	if o.HubBinary == "" || o.Dir == "" {
		errs = append(errs, errors.New("the magos-hub binary and a work directory are required"))
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return errors.Join(errs...)
}

// Result is what one Run measured.
type Result struct {
	Clusters, Workspaces, Concurrent int
	RunDelay                         time.Duration
	// ColdEngage is from the hub's start until every Cluster is Engaged; ReloadEngage from a
	// config rewrite adding a tenth more clusters until they are Engaged; AgentsReady from the
	// agents' start until every Cluster is Ready (mirrored and heartbeating); Initial from the
	// Rollouts' creation until all of them completed the first commit.
	ColdEngage, ReloadEngage, AgentsReady, Initial time.Duration
	// Rollouts are the durations of the 3-stage rollouts, from the commit's detection until the
	// Rollout completed it.
	Rollouts []time.Duration
	// StepSpans and Handoffs split the 3-stage rollouts by step (StepTimes): each step's first
	// grant to its last apply, and each step's last apply to the next step's first grant.
	StepSpans, Handoffs []time.Duration
	// ConcurrentRollouts are the durations of the concurrent Rollouts, each from the commit's
	// detection until that Rollout completed it.
	ConcurrentRollouts []time.Duration
	// HubRSS and HubHeap are the peaks of the magos-hub process while the Rollouts ran, in bytes.
	HubRSS, HubHeap float64
	// Grants is the number of runs granted while the Rollouts were timed, HubRequests the hub's
	// API requests meanwhile.
	Grants      int
	HubRequests float64
	// HubRequestsByMethod splits HubRequests by HTTP method (PATCH: grants and revocations,
	// POST: Events, PUT: status updates, GET: reads past the cache).
	HubRequestsByMethod map[string]float64
	// HubEvents counts the Events recorded on the hub while the Rollouts were timed (by their
	// eventTime), by reason.
	HubEvents map[string]int
	// ClusterStatusChanges counts the changes of the Clusters' status while timed, by the field
	// changed (a change of several fields counts for each), as a watch of the benchmark's own
	// saw them.
	ClusterStatusChanges map[string]float64
	// SilentClusters is the number of clusters the hub judged silent while the Rollouts were
	// timed: those with an AgentSilent Event that occurred meanwhile (its first occurrence, or
	// the last of its series).
	SilentClusters int
	// RenewalGaps is, for each cluster, the longest time while timed between two of its
	// agent's Lease renewals landing, as the agents' own transport saw them answered
	// (requestCounter.renewalGaps): what the hub's judgment of silence should match, measured
	// apart from the hub.
	RenewalGaps map[string]time.Duration
	// AgentRequestsByMethod counts the emulated agents' requests to the hub API server while the
	// Rollouts were timed, by HTTP method (GET: get, list and watch; the others are writes), and
	// AgentWritesByResource their writes by resource, e.g. "workspaces/status" or "leases". Each
	// attempt counts, whatever its answer. Their requests to the spoke do not count.
	AgentRequestsByMethod, AgentWritesByResource map[string]float64
	// LeaseTimes are how long the emulated agents' heartbeat requests (the Lease's get and
	// update) took while the Rollouts were timed, LeaseFailed those that failed, by answer
	// ("error": no answer, or the HTTP status).
	LeaseTimes  []time.Duration
	LeaseFailed map[string]float64
	// HubQueueing is what the hub API server's priority and fairness did with the requests it
	// served meanwhile, by priority level (every client's: the hub's, the agents', the
	// benchmark's own reads).
	HubQueueing queueing
	// HubThrottled is how long the hub's requests waited meanwhile for its client's rate
	// limiter, summed over requests.
	HubThrottled float64
	// APIServerCPU is the CPU time the hub's etcd and kube-apiserver used while the Rollouts
	// were timed, Timed the wall time they were timed for.
	APIServerCPU float64
	// HubCPU is the CPU time magos-hub used meanwhile, SpokeCPU the spoke's etcd and
	// kube-apiserver, BenchCPU this process (the emulated agents and runners).
	HubCPU, SpokeCPU, BenchCPU float64
	Timed                      time.Duration
}

// RequestsPerGrant is the hub's API requests per granted run while the Rollouts were timed.
func (r Result) RequestsPerGrant() float64 {
	if r.Grants == 0 {
		return 0
	}
	return r.HubRequests / float64(r.Grants)
}

// AgentWrites is the emulated agents' writes to the hub API server (every request but get,
// list and watch: create, update, patch and delete) while the Rollouts were timed.
func (r Result) AgentWrites() float64 {
	var n float64
	for m, c := range r.AgentRequestsByMethod {
		if isWrite(m) {
			n += c
		}
	}
	return n
}

// AgentHeartbeats is the emulated agents' heartbeat writes to the hub API server (their Lease
// renewals, "leases" in AgentWritesByResource) while the Rollouts were timed: a cost of each
// cluster every 10 s, whatever its runs.
func (r Result) AgentHeartbeats() float64 {
	return r.AgentWritesByResource[heartbeatResource]
}

// heartbeatResource is the resource of the agents' heartbeat writes.
const heartbeatResource = "leases"

// AgentWritesPerRun is the writes the runs cost the emulated agents (AgentWrites without the
// heartbeats: the mirrors' metadata and status), per run granted meanwhile.
func (r Result) AgentWritesPerRun() float64 {
	if r.Grants == 0 {
		return 0
	}
	return (r.AgentWrites() - r.AgentHeartbeats()) / float64(r.Grants)
}

// AgentHeartbeatsPerRun is AgentHeartbeats per run granted meanwhile: it falls as the runs a
// second rise and grows with the clusters and the time the runs take.
func (r Result) AgentHeartbeatsPerRun() float64 {
	if r.Grants == 0 {
		return 0
	}
	return r.AgentHeartbeats() / float64(r.Grants)
}

// APIServerCPUPerRun is the CPU time of the hub's kube-apiserver and etcd while the Rollouts
// were timed, per run granted meanwhile, in milliseconds.
func (r Result) APIServerCPUPerRun() float64 {
	if r.Grants == 0 {
		return 0
	}
	return 1000 * r.APIServerCPU / float64(r.Grants)
}

// perGrant lists counts per grant, most first, leaving out those that keep returns false for
// (nil: none).
func (r Result) perGrant(counts map[string]float64, keep func(string) bool) string {
	var parts []string
	for _, k := range mostFirst(counts) {
		if n := counts[k]; n > 0 && (keep == nil || keep(k)) {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, n/float64(max(r.Grants, 1))))
		}
	}
	return strings.Join(parts, ", ")
}

// events lists the Events recorded while timed by reason, most first.
func (r Result) events() string {
	var parts []string
	for _, reason := range mostFirst(r.HubEvents) {
		parts = append(parts, fmt.Sprintf("%s %d", reason, r.HubEvents[reason]))
	}
	return strings.Join(parts, ", ")
}

// mostFirst returns the keys of counts, the largest count first, ties by key.
func mostFirst[V cmp.Ordered](counts map[string]V) []string {
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	return keys
}

// Line is the one-line summary `make bench-scale` prints for the run.
func (r Result) Line() string {
	return fmt.Sprintf("scale: clusters=%d workspaces=%d rollout_p90_s=%.1f concurrent_p90_s=%.1f hub_rss_mib=%.0f hub_heap_mib=%.0f requests_per_grant=%.1f agent_writes_per_run=%.1f agent_heartbeats_per_run=%.1f apiserver_cpu_ms_per_run=%.1f",
		r.Clusters, r.Clusters*r.Workspaces, Percentile(r.Rollouts, 0.9).Seconds(), Percentile(r.ConcurrentRollouts, 0.9).Seconds(),
		r.HubRSS/(1<<20), r.HubHeap/(1<<20), r.RequestsPerGrant(), r.AgentWritesPerRun(), r.AgentHeartbeatsPerRun(), r.APIServerCPUPerRun())
}

// hubWrites are the writes the hub API server served while timed, by resource, less those of
// the emulated agents: the hub's own (and the benchmark's few: its Rollouts are created before).
func (r Result) hubWrites() map[string]float64 {
	out := map[string]float64{}
	for k, n := range r.HubQueueing.Writes {
		if n -= r.AgentWritesByResource[k]; n > 0 {
			out[k] = n
		}
	}
	return out
}

// leaseFailures lists the failed heartbeat requests by answer, or "none".
func (r Result) leaseFailures() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.LeaseFailed)) {
		if n := r.LeaseFailed[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Table is a short Markdown table of the run's figures.
func (r Result) Table() string {
	pct := func(ds []time.Duration) string {
		return fmt.Sprintf("p50 %.1f s, p90 %.1f s, p99 %.1f s, max %.1f s (%d)", Percentile(ds, 0.5).Seconds(), Percentile(ds, 0.9).Seconds(),
			Percentile(ds, 0.99).Seconds(), Percentile(ds, 1).Seconds(), len(ds))
	}
	cores := func(cpu float64) string {
		return fmt.Sprintf("%.1f s in %.1f s (%.2f cores)", cpu, r.Timed.Seconds(), cpu/max(r.Timed.Seconds(), 1e-9))
	}
	rows := [][2]string{
		{"clusters × Workspaces", fmt.Sprintf("%d × %d = %d, run delay %s", r.Clusters, r.Workspaces, r.Clusters*r.Workspaces, r.RunDelay)},
		{"engage, cold start", fmt.Sprintf("%.1f s", r.ColdEngage.Seconds())},
		{"engage, config reload (+10 %)", fmt.Sprintf("%.1f s", r.ReloadEngage.Seconds())},
		{"agents ready", fmt.Sprintf("%.1f s", r.AgentsReady.Seconds())},
		{"first commit, all Rollouts", fmt.Sprintf("%.1f s", r.Initial.Seconds())},
		{"3-stage rollout (20/30/50 % of clusters)", pct(r.Rollouts)},
		{"… a step, first grant to last apply", pct(r.StepSpans)},
		{"… between steps, last apply to next grant", pct(r.Handoffs)},
		{fmt.Sprintf("%d concurrent Rollouts", r.Concurrent), pct(r.ConcurrentRollouts)},
		{"hub peak RSS / heap", fmt.Sprintf("%.0f MiB / %.0f MiB", r.HubRSS/(1<<20), r.HubHeap/(1<<20))},
		{"hub API requests per grant", fmt.Sprintf("%.1f (%d grants)", r.RequestsPerGrant(), r.Grants)},
		{"… by method, per grant", r.perGrant(r.HubRequestsByMethod, nil)},
		{"… Events recorded, by reason", r.events()},
		{"clusters that went silent while timed", fmt.Sprintf("%d of %d (AgentSilent Events)", r.SilentClusters, r.Clusters)},
		{"… clusters without a renewal answered for a lease duration, as the agents saw them", fmt.Sprintf("%d of %d; each cluster's longest wait between renewals: %s",
			r.LateClusters(), r.Clusters, pct(slices.Collect(maps.Values(r.RenewalGaps))))},
		{"agent writes to the hub API server per run, heartbeats aside", fmt.Sprintf("%.1f (%.0f writes)", r.AgentWritesPerRun(), r.AgentWrites()-r.AgentHeartbeats())},
		{"agent heartbeats (Lease writes) per run", fmt.Sprintf("%.1f (%.0f writes)", r.AgentHeartbeatsPerRun(), r.AgentHeartbeats())},
		{"… by method, per run", r.perGrant(r.AgentRequestsByMethod, isWrite)},
		{"… by resource, per run", r.perGrant(r.AgentWritesByResource, nil)},
		{"agent reads of the hub API server (GET) per run", fmt.Sprintf("%.2f", r.AgentRequestsByMethod[http.MethodGet]/float64(max(r.Grants, 1)))},
		{"agent heartbeat requests (Lease get and update), time taken", pct(r.LeaseTimes)},
		{"… failed, by answer", r.leaseFailures()},
		{"hub API server queueing (priority and fairness), by priority level", r.HubQueueing.String()},
		{"writes the hub API server served, less the agents', by resource, per grant", r.perGrant(r.hubWrites(), nil)},
		{"… Clusters' status changes, by field changed, per grant", r.perGrant(r.ClusterStatusChanges, nil)},
		{"hub apiserver + etcd CPU", cores(r.APIServerCPU)},
		{"… per run", fmt.Sprintf("%.1f ms", r.APIServerCPUPerRun())},
		{"hub client rate-limiter waits", fmt.Sprintf("%.1f s in all, %.0f ms per request", r.HubThrottled, 1000*r.HubThrottled/max(r.HubRequests, 1))},
		{"magos-hub CPU", cores(r.HubCPU)},
		{"spoke apiserver + etcd CPU (emulation)", cores(r.SpokeCPU)},
		{"emulated agents and runners CPU", cores(r.BenchCPU)},
	}
	out := "| measure | value |\n|---|---|\n"
	for _, row := range rows {
		out += "| " + row[0] + " | " + row[1] + " |\n"
	}
	return out
}

// bench is one Run in progress.
type bench struct {
	opts         Options
	hub, spoke   *localcluster.Cluster
	names, extra []string
	hubCmd       *exec.Cmd
	hubDone      chan struct{}
	metrics      string
	ledger       *Ledger
	agents       []*agent
	// agentHub counts the emulated agents' requests to the hub API server.
	agentHub *requestCounter
	// hubVersion is what the magos-hub binary says it is: the emulated agents report it, so
	// that the hub's version skew policy takes them.
	hubVersion       string
	stages           [][]string            // the 3-stage Rollout's Workspaces by step, cluster/name
	projectSteps     map[string][][]string // the concurrent Rollouts' Workspaces by step
	stageWS, fleetWS []types.NamespacedName
	commitN          int
	progress         io.Writer
	started          time.Time
}

// Run runs the benchmark once at opts.Clusters and returns what it measured. It starts and
// stops everything it uses.
func Run(ctx context.Context, opts Options) (res Result, err error) {
	if err := opts.validate(); err != nil {
		return Result{}, fmt.Errorf("scalebench: %w", err)
	}
	b := &bench{opts: opts, ledger: &Ledger{}, agentHub: newRequestCounter(), progress: opts.Progress, projectSteps: map[string][][]string{}, started: time.Now()}
	res = Result{Clusters: opts.Clusters, Workspaces: opts.Workspaces, Concurrent: opts.Concurrent, RunDelay: opts.RunDelay}
	b.step("starting the hub and spoke API servers")
	env, err := localcluster.New(localcluster.Options{Spokes: []string{"spoke"}})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	b.hub, b.spoke = env.Hub, env.Spokes["spoke"]
	defer func() { err = errors.Join(err, b.stop()) }()
	for i := range opts.Clusters {
		b.names = append(b.names, fmt.Sprintf("c-%04d", i))
	}
	for i := range max(opts.Clusters/10, 1) {
		b.extra = append(b.extra, fmt.Sprintf("x-%04d", i))
	}

	if err := b.writeConfig(b.names); err != nil {
		return res, err
	}
	b.step("starting magos-hub with %d agent clusters in its config file", len(b.names))
	start := time.Now()
	if err := b.startHub(); err != nil {
		return res, err
	}
	if err := b.waitClusters(ctx, b.names, magosv1.ConditionEngaged); err != nil {
		return res, err
	}
	res.ColdEngage = time.Since(start)

	b.step("adding %d clusters to the config file", len(b.extra))
	start = time.Now()
	if err := b.writeConfig(append(slices.Clone(b.names), b.extra...)); err != nil {
		return res, err
	}
	if err := b.waitClusters(ctx, b.extra, magosv1.ConditionEngaged); err != nil {
		return res, err
	}
	res.ReloadEngage = time.Since(start)

	b.step("creating %d Workspaces in the spoke", opts.Clusters*opts.Workspaces)
	if err := b.createWorkspaces(ctx); err != nil {
		return res, err
	}
	b.step("starting %d emulated agents", len(b.names))
	start = time.Now()
	if err := b.startAgents(ctx); err != nil {
		return res, err
	}
	if err := b.waitClusters(ctx, b.names, magosv1.ConditionReady); err != nil {
		return res, err
	}
	res.AgentsReady = time.Since(start)

	b.step("creating %d Projects and Rollouts; the first commit rolls out", opts.Concurrent+1)
	start = time.Now()
	if err := b.createRollouts(ctx); err != nil {
		return res, err
	}
	all := append([]string{StagesProject}, slices.Sorted(maps.Keys(b.projectSteps))...)
	if _, err := b.waitRollouts(ctx, all, commitOf(0)); err != nil {
		return res, err
	}
	res.Initial = time.Since(start)

	samples := startSampler(ctx, b.hubCmd.Process.Pid, b.metrics)
	before, err := scrape(ctx, b.metrics)
	if err != nil {
		return res, err
	}
	hubPID := b.hubCmd.Process.Pid
	runsBefore, cpuBefore, hubBefore, timed := b.ledger.Len(), localcluster.CPUSeconds(b.hub.PIDs()...), localcluster.CPUSeconds(hubPID), time.Now()
	spokeBefore, benchBefore := localcluster.CPUSeconds(b.spoke.PIDs()...), localcluster.CPUSeconds(os.Getpid())
	agentBefore, agentWritesBefore := b.agentHub.snapshot()
	_, leasesBefore, leaseFailedBefore := b.agentHub.leases(0)
	queueBefore, err := scrapeQueueing(ctx, b.hub)
	if err != nil {
		return res, err
	}
	watcher, err := client.NewWithWatch(b.hub.Config, client.Options{Scheme: b.hub.Client.Scheme()})
	if err != nil {
		return res, fmt.Errorf("a watching client of the hub: %w", err)
	}
	clusterChanges, err := watchClusterStatus(ctx, watcher)
	if err != nil {
		return res, err
	}
	defer clusterChanges.close() // a run that fails stops it too
	for k := range opts.Repeats {
		commit := b.newCommit()
		b.step("3-stage rollout %d of %d: commit %s", k+1, opts.Repeats, short(commit))
		start := time.Now()
		if err := b.detect(ctx, b.stageWS, commit); err != nil {
			return res, err
		}
		done, err := b.waitRollouts(ctx, []string{StagesProject}, commit)
		if err != nil {
			return res, err
		}
		res.Rollouts = append(res.Rollouts, done[StagesProject].Sub(start))
		runs := b.ledger.Runs(commit)
		if err := CheckStepOrder(commit, runs, b.stages); err != nil {
			return res, err
		}
		spans, handoffs := StepTimes(runs, b.stages)
		res.StepSpans, res.Handoffs = append(res.StepSpans, spans...), append(res.Handoffs, handoffs...)
	}
	commit := b.newCommit()
	b.step("%d concurrent Rollouts: commit %s", opts.Concurrent, short(commit))
	start = time.Now()
	if err := b.detect(ctx, b.fleetWS, commit); err != nil {
		return res, err
	}
	projects := all[1:]
	done, err := b.waitRollouts(ctx, projects, commit)
	if err != nil {
		return res, err
	}
	for _, p := range projects {
		res.ConcurrentRollouts = append(res.ConcurrentRollouts, done[p].Sub(start))
	}
	runs := b.ledger.Runs(commit)
	for _, p := range projects {
		var mine []Record
		for _, r := range runs {
			if b.memberOf(p, r) {
				mine = append(mine, r)
			}
		}
		if err := CheckStepOrder(commit, mine, b.projectSteps[p]); err != nil {
			return res, fmt.Errorf("Rollout %s: %w", p, err)
		}
	}
	res.Timed = time.Since(timed)
	res.ClusterStatusChanges = clusterChanges.result()
	res.APIServerCPU = localcluster.CPUSeconds(b.hub.PIDs()...) - cpuBefore
	res.HubCPU = localcluster.CPUSeconds(hubPID) - hubBefore
	res.SpokeCPU = localcluster.CPUSeconds(b.spoke.PIDs()...) - spokeBefore
	res.BenchCPU = localcluster.CPUSeconds(os.Getpid()) - benchBefore
	res.Grants = b.ledger.Len() - runsBefore
	agentAfter, agentWritesAfter := b.agentHub.snapshot()
	res.AgentRequestsByMethod, res.AgentWritesByResource = since(agentBefore, agentAfter), since(agentWritesBefore, agentWritesAfter)
	leaseTimes, _, leaseFailedAfter := b.agentHub.leases(leasesBefore)
	res.LeaseTimes, res.LeaseFailed = leaseTimes, since(leaseFailedBefore, leaseFailedAfter)
	queueAfter, err := scrapeQueueing(ctx, b.hub)
	if err != nil {
		return res, err
	}
	res.HubQueueing = queueAfter.since(queueBefore)
	after, err := scrape(ctx, b.metrics)
	if err != nil {
		return res, err
	}
	res.HubRequests = after.Requests - before.Requests
	res.HubThrottled = after.Throttled - before.Throttled
	res.HubRequestsByMethod = since(before.ByMethod, after.ByMethod)
	res.HubRSS, res.HubHeap = samples.peaks()
	res.RenewalGaps = b.agentHub.renewalGaps(timed, time.Now())
	res.HubEvents, res.SilentClusters, err = b.eventsSince(ctx, timed)
	return res, err
}

// LateClusters is how many clusters went a lease duration (the agents' default) or longer
// without a renewal landing while timed, as the agents saw their renewals answered: those the
// hub had cause to judge silent. More silent clusters than late ones means the hub saw
// renewals later than the API server answered them.
func (r Result) LateClusters() int {
	n := 0
	for _, gap := range r.RenewalGaps {
		if gap >= hubsync.DefaultLeaseDuration {
			n++
		}
	}
	return n
}

// since returns the counts of after less those of before, by key.
func since(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, n := range after {
		out[k] = n - before[k]
	}
	return out
}

// eventsSince counts the Events the hub recorded since t, by reason, and the clusters with an
// AgentSilent Event that occurred since t: its first occurrence or, for a series of them, the
// last.
func (b *bench) eventsSince(ctx context.Context, t time.Time) (map[string]int, int, error) {
	var list eventsv1.EventList
	if err := b.hub.Client.List(ctx, &list); err != nil {
		return nil, 0, fmt.Errorf("listing the hub's Events: %w", err)
	}
	out := map[string]int{}
	silent := map[string]bool{}
	for _, e := range list.Items {
		// By when the hub recorded it, not when the API server created it: the hub writes its
		// Events in the background, and those of the Rollouts that completed just before t may
		// be created after it.
		if !e.EventTime.Time.Before(t) {
			out[e.Reason]++
		}
		last := e.EventTime.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if e.Reason == magosv1.ReasonAgentSilent && e.Regarding.Kind == "Cluster" && !last.Before(t) {
			silent[e.Regarding.Name] = true
		}
	}
	return out, len(silent), nil
}

func (b *bench) step(format string, args ...any) {
	fmt.Fprintf(b.progress, "bench-scale: %5.1fs clusters=%d: "+format+"\n",
		append([]any{time.Since(b.started).Seconds(), b.opts.Clusters}, args...)...)
}

// stage returns the StageLabel value of cluster i.
func (b *bench) stage(i int) string {
	switch n := b.opts.Clusters; {
	case i*10 < 2*n:
		return "1"
	case i*10 < 5*n:
		return "2"
	default:
		return "3"
	}
}

// writeConfig writes the hub's config file with the named clusters: those of b.names labelled
// with their stage and bound to Namespace; the extra ones (a reload) unlabelled and unbound,
// so that no Rollout waits for them.
func (b *bench) writeConfig(names []string) error {
	cfg := devfleet.HubConfig{Bindings: []devfleet.Binding{{Namespaces: []string{Namespace}, Clusters: b.names}}}
	for i, n := range names {
		e := devfleet.ClusterEntry{Name: n, Agent: &struct{}{}}
		if i < len(b.names) {
			e.Labels = map[string]string{StageLabel: b.stage(i)}
		}
		cfg.Clusters = append(cfg.Clusters, e)
	}
	return devfleet.WriteHubConfig(filepath.Join(b.opts.Dir, "hub-config.yaml"), cfg)
}

// startHub starts magos-hub against the hub API server, with its metrics and profiles on free
// loopback ports and its log in Dir, and returns once it listens on both. A port picked free
// can be taken by another process before the hub binds it: the hub is then started again on
// others, up to hubStartAttempts times.
func (b *bench) startHub() error {
	out, err := exec.Command(b.opts.HubBinary, "--version").Output()
	if err != nil {
		return fmt.Errorf("asking %s its version: %w", b.opts.HubBinary, err)
	}
	b.hubVersion = strings.TrimSpace(string(out))
	logPath := filepath.Join(b.opts.Dir, "magos-hub.log")
	for attempt := 1; ; attempt++ {
		err := b.startHubOnce(logPath)
		if err == nil || attempt == hubStartAttempts || b.hubExited() == nil {
			return err
		}
		if log, _ := os.ReadFile(logPath); !bytes.Contains(log, []byte(localcluster.AddressInUse)) {
			return err
		}
		b.step("a port chosen for magos-hub was taken meanwhile: starting it again on others (attempt %d of %d)", attempt+1, hubStartAttempts)
	}
}

// hubStartAttempts is how many times startHub starts magos-hub on newly chosen ports.
const hubStartAttempts = 5

// startHubOnce starts magos-hub once and waits until it listens on its metrics and profile
// addresses, or exits (its log is then logPath's last start).
func (b *bench) startHubOnce(logPath string) error {
	var err error
	if b.metrics, err = localcluster.FreeAddress(); err != nil {
		return err
	}
	pprof, err := localcluster.FreeAddress()
	if err != nil {
		return err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	args := append([]string{"controller", "--kubeconfig", b.hub.Kubeconfig,
		"--config", filepath.Join(b.opts.Dir, "hub-config.yaml"),
		"--metrics-bind-address", b.metrics, "--pprof-bind-address", pprof, "--health-probe-bind-address", "0"}, b.opts.HubArgs...)
	cmd := exec.Command(b.opts.HubBinary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting magos-hub: %w", err)
	}
	b.hubCmd, b.hubDone = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(done)
	}(b.hubDone)
	err = localcluster.WaitListening(context.Background(), cmd.Process.Pid, b.hubDone, 2*time.Minute, b.metrics, pprof)
	if errors.Is(err, localcluster.ErrExited) {
		return b.hubExited()
	}
	if err != nil {
		return fmt.Errorf("magos-hub: %w", err)
	}
	b.step("magos-hub runs, pid %d: metrics at http://%s/metrics, profiles at http://%s/debug/pprof/, log in %s",
		cmd.Process.Pid, b.metrics, pprof, logFile.Name())
	return nil
}

// stop stops the agents and the hub.
func (b *bench) stop() error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, a := range b.agents {
		wg.Go(func() {
			if err := a.stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if b.hubCmd != nil {
		_ = b.hubCmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.hubDone:
		case <-time.After(30 * time.Second):
			_ = b.hubCmd.Process.Kill()
			<-b.hubDone
		}
	}
	return errors.Join(errs...)
}

// hubExited returns an error if magos-hub has exited.
func (b *bench) hubExited() error {
	select {
	case <-b.hubDone:
		return fmt.Errorf("magos-hub exited: see %s", filepath.Join(b.opts.Dir, "magos-hub.log"))
	default:
		return nil
	}
}

// poll calls check every interval until it returns nil, ctx ends, magos-hub exits or the
// Timeout passes.
func (b *bench) poll(ctx context.Context, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(b.opts.Timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if exited := b.hubExited(); exited != nil {
			return errors.Join(exited, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", b.opts.Timeout, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// waitClusters waits until every named Cluster has condition cond True.
func (b *bench) waitClusters(ctx context.Context, names []string, cond string) error {
	return b.poll(ctx, 200*time.Millisecond, func() error {
		var list magosv1.ClusterList
		if err := b.hub.Client.List(ctx, &list); err != nil {
			return err
		}
		ok := map[string]bool{}
		for _, c := range list.Items {
			ok[c.Name] = meta.IsStatusConditionTrue(c.Status.Conditions, cond)
		}
		missing := 0
		for _, n := range names {
			if !ok[n] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d Clusters are not %s", missing, len(names), cond)
		}
		return nil
	})
}

// repoOf is the repository a Workspace set tracks.
func repoOf(set string) string { return "https://git.example.com/" + set + ".git" }

// commitOf returns the k-th commit the benchmark rolls out (0: the first, of every Rollout).
func commitOf(k int) string {
	sum := sha1.Sum([]byte("magos-bench commit " + strconv.Itoa(k)))
	return hex.EncodeToString(sum[:])
}

func (b *bench) newCommit() string {
	b.commitN++
	return commitOf(b.commitN)
}

// createWorkspaces creates every Workspace in the spoke, each detected at commit 0: Workspace 0
// of each cluster in StagesProject, the others spread over the concurrent Projects, each of
// which gets Workspaces of its steps (waves) in the proportions 20/30/50 %.
func (b *bench) createWorkspaces(ctx context.Context) error {
	for _, c := range []*localcluster.Cluster{b.hub, b.spoke} {
		if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
			return err
		}
	}
	perProject := b.opts.Clusters * (b.opts.Workspaces - 1) / b.opts.Concurrent
	b.stages = make([][]string, 3)
	var all []*magosv1.Workspace
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for i, cluster := range b.names {
		for j := range b.opts.Workspaces {
			name := fmt.Sprintf("ws-%04d-%02d", i, j)
			key := cluster + "/" + name
			lbl := map[string]string{ClusterLabel: cluster}
			var project string
			if j == 0 {
				project, lbl[SetLabel] = StagesProject, StagesProject
				s, _ := strconv.Atoi(b.stage(i))
				b.stages[s-1] = append(b.stages[s-1], key)
			} else {
				slot := i*(b.opts.Workspaces-1) + j - 1
				p, m := slot%b.opts.Concurrent, slot/b.opts.Concurrent
				if m >= perProject {
					// The remainder: no Project, so it takes part in nothing.
					continue
				}
				project, lbl[SetLabel] = fmt.Sprintf("p-%03d", p), "fleet"
				wave := 1
				if m*10 >= 2*perProject {
					wave = 2
				}
				if m*10 >= 5*perProject {
					wave = 3
				}
				lbl[WaveLabel] = strconv.Itoa(wave)
				steps := b.projectSteps[project]
				if steps == nil {
					steps = make([][]string, 3)
				}
				steps[wave-1] = append(steps[wave-1], key)
				b.projectSteps[project] = steps
			}
			ws := &magosv1.Workspace{
				ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, Labels: lbl, Annotations: map[string]string{
					keys.DetectedRevision: commitOf(0), keys.DetectedAt: now,
				}},
				Spec: magosv1.WorkspaceSpec{
					ProjectRef: magosv1.ProjectReference{Name: project},
					Source:     magosv1.Source{RepoURL: repoOf(lbl[SetLabel]), TargetRevision: "main", Path: "."},
					Terraform:  magosv1.TerraformSpec{Binary: magosv1.BinaryOpenTofu, Version: "1.10.6"},
				},
			}
			all = append(all, ws)
			ref := types.NamespacedName{Namespace: Namespace, Name: name}
			if j == 0 {
				b.stageWS = append(b.stageWS, ref)
			} else {
				b.fleetWS = append(b.fleetWS, ref)
			}
		}
	}
	return parallel(ctx, len(all), 32, func(i int) error { return b.spoke.Client.Create(ctx, all[i]) })
}

// memberOf reports whether a run is of a Workspace of the concurrent Project p.
func (b *bench) memberOf(p string, r Record) bool {
	for _, step := range b.projectSteps[p] {
		if slices.Contains(step, r.Cluster+"/"+r.Workspace) {
			return true
		}
	}
	return false
}

// startAgents mints every cluster's bootstrap credentials on the hub, as `magos-hub
// agent-kubeconfig` does, and starts its emulated agent with them.
func (b *bench) startAgents(ctx context.Context) error {
	b.agents = make([]*agent, len(b.names))
	return parallel(ctx, len(b.names), 16, func(i int) error {
		raw, err := registry.AgentKubeconfig(ctx, b.hub.Config, registry.AgentKubeconfigOptions{Cluster: b.names[i]})
		if err != nil {
			return err
		}
		hubCfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			return fmt.Errorf("the agent kubeconfig of %s: %w", b.names[i], err)
		}
		// Every client hubsync makes from it (rest.CopyConfig keeps the wrapper) counts its
		// requests to the hub API server; the spoke's config is not wrapped.
		hubCfg.Wrap(b.agentHub.wrap)
		a, err := startAgent(ctx, agentOptions{
			Cluster: b.names[i], Spoke: b.spoke.Config, Namespace: Namespace, Hub: hubCfg,
			RunDelay: b.opts.RunDelay, Ledger: b.ledger, Logger: b.opts.Logger, Version: b.hubVersion,
		})
		b.agents[i] = a
		return err
	})
}

// createRollouts creates the Projects and their Rollouts on the hub: StagesProject's steps
// select the clusters of each stage, the concurrent Projects' the Workspaces of each wave.
func (b *bench) createRollouts(ctx context.Context) error {
	var objs []client.Object
	add := func(project string, step func(int) magosv1.RolloutStep) {
		ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: project},
			Spec: magosv1.RolloutSpec{ProjectRef: project}}
		for s := range 3 {
			ro.Spec.Strategy.Steps = append(ro.Spec.Strategy.Steps, step(s+1))
		}
		objs = append(objs, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: project}}, ro)
	}
	add(StagesProject, func(s int) magosv1.RolloutStep {
		sel := magosv1.MatchLabels(map[string]string{StageLabel: strconv.Itoa(s)})
		return magosv1.RolloutStep{Name: "stage-" + strconv.Itoa(s),
			Selector: magosv1.MatchLabels(map[string]string{SetLabel: StagesProject}), ClusterSelector: &sel}
	})
	for _, p := range slices.Sorted(maps.Keys(b.projectSteps)) {
		add(p, func(s int) magosv1.RolloutStep {
			return magosv1.RolloutStep{Name: "wave-" + strconv.Itoa(s), Selector: magosv1.MatchLabels(map[string]string{WaveLabel: strconv.Itoa(s)})}
		})
	}
	return parallel(ctx, len(objs), 8, func(i int) error { return b.hub.Client.Create(ctx, objs[i]) })
}

// detect marks the Workspaces as having detected commit, as the agents' ref watchers do when
// the ref moves.
func (b *bench) detect(ctx context.Context, wss []types.NamespacedName, commit string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		keys.DetectedRevision, commit, keys.DetectedAt, time.Now().UTC().Format(time.RFC3339Nano))
	return parallel(ctx, len(wss), 32, func(i int) error {
		ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: wss[i].Namespace, Name: wss[i].Name}}
		return b.spoke.Client.Patch(ctx, ws, client.RawPatch(types.MergePatchType, patch))
	})
}

// waitRollouts waits until every named Rollout completed commit, and returns when the
// benchmark first saw each complete.
func (b *bench) waitRollouts(ctx context.Context, names []string, commit string) (map[string]time.Time, error) {
	done := map[string]time.Time{}
	err := b.poll(ctx, 100*time.Millisecond, func() error {
		var list magosv1.RolloutList
		if err := b.hub.Client.List(ctx, &list, client.InNamespace(Namespace)); err != nil {
			return err
		}
		now := time.Now()
		for _, ro := range list.Items {
			if _, seen := done[ro.Name]; seen || !slices.Contains(names, ro.Name) {
				continue
			}
			if completed(&ro, commit) {
				done[ro.Name] = now
			}
			if ro.Status.Phase == magosv1.PhaseFailed {
				return fmt.Errorf("Rollout %s failed: %s: %s", ro.Name, ro.Status.Reason, ro.Status.Message)
			}
		}
		if len(done) < len(names) {
			return fmt.Errorf("%d of %d Rollouts have not completed commit %s", len(names)-len(done), len(names), short(commit))
		}
		return nil
	})
	return done, err
}

// completed reports whether the Rollout completed, rolling commit out.
func completed(ro *magosv1.Rollout, commit string) bool {
	if ro.Status.Phase != magosv1.PhaseApplied || ro.Status.Reason != magosv1.ReasonRolloutCompleted {
		return false
	}
	return slices.ContainsFunc(ro.Status.Revisions, func(r magosv1.RolloutRevision) bool { return r.Commit == commit })
}

// parallel calls do(0..n-1), at most limit at once, and returns the errors joined.
func parallel(ctx context.Context, n, limit int, do func(i int) error) error {
	sem := make(chan struct{}, limit)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := do(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}
