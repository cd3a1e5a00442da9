package workspace_test

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// BenchmarkLocalRun measures whole runs through the agent: create a Workspace with a trivial
// module, grant its first run, wait until it is Applied (plan + apply by the magos-agent
// runner and tofu, as child processes). It reports runs per minute, the API requests the agent
// made per run (counted by a RoundTripper on its rest.Config), and CPU time per run of the test
// process (the agent plus this benchmark's polling) and of the runner processes.
func BenchmarkLocalRun(b *testing.B) {
	for _, parallel := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel-%d", parallel), func(b *testing.B) {
			c := spoke.Client
			ns := newNamespace(b)
			repo, _ := newRepo(b, map[string]string{"main.tf": moduleEmpty})
			var self0, child0 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
			_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child0)
			calls0 := apiCalls.Load()
			start := time.Now()
			runs := 0
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for j := range parallel {
					key := newWorkspace(b, c, ns, fmt.Sprintf("bench-%d-%d", i, j), repo.URL(), nil)
					wg.Go(func() { runToApplied(b, c, key, magosv1.ReasonAwaitingRollout, "") })
					runs++
				}
				wg.Wait()
			}
			elapsed := time.Since(start)
			var self1, child1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
			_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child1)
			b.ReportMetric(float64(runs)/elapsed.Minutes(), "runs/min")
			b.ReportMetric(float64(apiCalls.Load()-calls0)/float64(runs), "api-requests/run")
			b.ReportMetric(cpuMillis(self0, self1)/float64(runs), "agent-cpu-ms/run")
			b.ReportMetric(cpuMillis(child0, child1)/float64(runs), "runner-cpu-ms/run")
		})
	}
}

func cpuMillis(before, after syscall.Rusage) float64 {
	d := func(tv syscall.Timeval) time.Duration { return time.Duration(tv.Nano()) }
	return float64((d(after.Utime)-d(before.Utime))+(d(after.Stime)-d(before.Stime))) / float64(time.Millisecond)
}
