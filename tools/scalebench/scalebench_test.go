package scalebench_test

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/devfleet"
	"github.com/magosfleet/magos/tools/scalebench"
)

// TestScaleBenchSmall runs make bench-scale's benchmark at a size that fits in make test: the
// real magos-hub, 5 emulated agents (agent/hubsync with their own credentials; the runner is the
// simulated stand-in of runner.go), two 3-stage rollouts and 3 concurrent Rollouts. Run checks
// every commit's step order on its own ledger; this test checks that every figure was measured
// and is plausible.
func TestScaleBenchSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := devfleet.BuildBinaries(ctx, filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	var progress testenv.Buffer
	res, err := scalebench.Run(ctx, scalebench.Options{
		Clusters: 5, Workspaces: 4, Repeats: 2, Concurrent: 3,
		HubBinary: filepath.Join(dir, "bin", "magos-hub"), Dir: dir, Timeout: 3 * time.Minute, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("%s\n%s", res.Table(), res.Line())
	if len(res.Rollouts) != 2 || len(res.ConcurrentRollouts) != 3 {
		t.Errorf("%d 3-stage and %d concurrent rollouts measured, want 2 and 3", len(res.Rollouts), len(res.ConcurrentRollouts))
	}
	// 2 commits of the 5 Workspaces of the 3-stage Rollout, 1 of the 15 of the others.
	if res.Grants != 2*5+15 {
		t.Errorf("%d runs granted while timed, want %d", res.Grants, 2*5+15)
	}
	if res.HubRequests <= 0 || res.HubRSS <= 0 || res.HubHeap <= 0 || res.APIServerCPU <= 0 || res.ColdEngage <= 0 || res.ReloadEngage <= 0 {
		t.Errorf("a figure was not measured: %+v", res)
	}
	// Every run's Applied status reaches the hub only through its agent's write of the mirror:
	// at least one write per run, besides the heartbeats.
	if w := res.AgentWritesPerRun(); w < 1 {
		t.Errorf("the agents wrote %.2f times to the hub API server per run (%v), want at least 1", w, res.AgentRequestsByMethod)
	}
	if res.AgentRequestsByMethod[http.MethodPatch] <= 0 || res.AgentWritesByResource["workspaces/status"] <= 0 {
		t.Errorf("no patch of a mirror's status counted: by method %v, by resource %v", res.AgentRequestsByMethod, res.AgentWritesByResource)
	}
	// The API server's own count of the writes it served, by resource, has the creates (POST)
	// among them: the hub's Events.
	if res.HubQueueing.Writes["events"] < 1 {
		t.Errorf("the hub API server counted no Event written while timed (writes by resource %v); the hub recorded %v", res.HubQueueing.Writes, res.HubEvents)
	}
	if res.APIServerCPUPerRun() <= 0 {
		t.Errorf("the hub API server used %.1f ms of CPU per run, want more than 0", res.APIServerCPUPerRun())
	}
	line := regexp.MustCompile(`^scale: clusters=5 workspaces=20 rollout_p90_s=[0-9.]+ concurrent_p90_s=[0-9.]+ hub_rss_mib=[0-9]+ hub_heap_mib=[0-9]+ requests_per_grant=[0-9.]+ agent_writes_per_run=([0-9]+\.[0-9]) agent_heartbeats_per_run=[0-9]+\.[0-9] apiserver_cpu_ms_per_run=([0-9]+\.[0-9])$`)
	m := line.FindStringSubmatch(res.Line())
	if m == nil {
		t.Fatalf("summary line %q does not match %s", res.Line(), line)
	}
	for i, name := range []string{"agent_writes_per_run", "apiserver_cpu_ms_per_run"} {
		if v, err := strconv.ParseFloat(m[i+1], 64); err != nil || v <= 0 {
			t.Errorf("summary line %q: %s=%s, want a number above 0", res.Line(), name, m[i+1])
		}
	}
}
