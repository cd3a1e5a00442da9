package scalebench_test

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/devfleet"
	"github.com/magosfleet/magos/tools/scalebench"
)

// TestScaleBenchSmall runs make bench-scale's benchmark at a size that fits in make test: the
// real magos-hub, 5 emulated agents (agent/hubsync with their own credentials; the runner is the
// simulated stand-in of runner.go), two 3-stage rollouts and 3 concurrent Rollouts. Run checks
// every commit's step order on its own ledger; this test checks that every figure was measured.
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
	line := regexp.MustCompile(`^scale: clusters=5 workspaces=20 rollout_p90_s=[0-9.]+ concurrent_p90_s=[0-9.]+ hub_rss_mib=[0-9]+ hub_heap_mib=[0-9]+ requests_per_grant=[0-9.]+$`)
	if !line.MatchString(res.Line()) {
		t.Errorf("summary line %q does not match %s", res.Line(), line)
	}
}
