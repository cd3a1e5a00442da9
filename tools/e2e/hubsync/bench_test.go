package hubsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
)

// parallel runs do for 0..n-1 on 8 goroutines and returns the first error.
func parallel(n int, do func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := do(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// mirrored waits until the hub has n mirrors of namespace ns whose status satisfies ok.
func mirrored(ns string, n int, ok func(*magosv1.Workspace) bool) error {
	return localcluster.Poll(5*time.Minute, func() error {
		list := &magosv1.WorkspaceList{}
		if err := env.Hub.Client.List(context.Background(), list, client.InNamespace(mirror.Namespace("eu-west-1")),
			client.MatchingLabels{keys.OriginNamespace: ns}); err != nil {
			return err
		}
		got := 0
		for i := range list.Items {
			if ok(&list.Items[i]) {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d of %d mirrors in sync", got, n)
		}
		return nil
	})
}

// BenchmarkMirrorSync measures the agent's mirror throughput to the hub, in Workspaces per second
// (each Workspace: a mirror create, a spec/label check and one status write):
//   - initial: an agent starts on a spoke holding 100 unmirrored Workspaces (start-up included);
//   - status: a running agent carries a status change of 100 Workspaces up (the spoke writes
//     included).
func BenchmarkMirrorSync(b *testing.B) {
	const perIteration = 100
	ctx := context.Background()
	spoke := env.Spokes["eu-west-1"].Client

	b.Run("initial", func(b *testing.B) {
		var elapsed time.Duration
		i := 0
		for b.Loop() {
			b.StopTimer()
			ns := fmt.Sprintf("bench-initial-%d", i)
			i++
			ensureNamespace(b, spoke, ns)
			if err := parallel(perIteration, func(j int) error {
				return spoke.Create(ctx, newWorkspace(ns, fmt.Sprintf("ws-%03d", j)))
			}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			stop := startAgent(b, "eu-west-1", agentOptions{})
			if err := mirrored(ns, perIteration, func(m *magosv1.Workspace) bool { return m.Status.Origin != nil }); err != nil {
				b.Fatal(err)
			}
			elapsed += time.Since(start)
			b.StopTimer()
			stop()
			b.StartTimer()
		}
		b.ReportMetric(float64(perIteration*i)/elapsed.Seconds(), "workspaces/s")
	})

	b.Run("status", func(b *testing.B) {
		ns := "bench-status"
		ensureNamespace(b, spoke, ns)
		if err := parallel(perIteration, func(j int) error {
			return client.IgnoreAlreadyExists(spoke.Create(ctx, newWorkspace(ns, fmt.Sprintf("ws-%03d", j))))
		}); err != nil {
			b.Fatal(err)
		}
		startAgent(b, "eu-west-1", agentOptions{})
		if err := mirrored(ns, perIteration, func(m *magosv1.Workspace) bool { return m.Status.Origin != nil }); err != nil {
			b.Fatal(err)
		}
		var elapsed time.Duration
		i := 0
		b.ResetTimer()
		for b.Loop() {
			i++
			runID := fmt.Sprintf("20260101T%06d-0000abcd", i)
			start := time.Now()
			if err := parallel(perIteration, func(j int) error {
				ws := &magosv1.Workspace{}
				if err := spoke.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("ws-%03d", j)}, ws); err != nil {
					return err
				}
				ws.Status.Phase, ws.Status.CurrentRunID = magosv1.PhasePending, runID
				return spoke.Status().Update(ctx, ws)
			}); err != nil {
				b.Fatal(err)
			}
			if err := mirrored(ns, perIteration, func(m *magosv1.Workspace) bool { return m.Status.CurrentRunID == runID }); err != nil {
				b.Fatal(err)
			}
			elapsed += time.Since(start)
		}
		b.ReportMetric(float64(perIteration*i)/elapsed.Seconds(), "workspaces/s")
	})
}
