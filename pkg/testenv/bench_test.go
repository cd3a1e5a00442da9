package testenv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/testenv"
)

// BenchmarkStartFleet measures how long a hub plus N-1 spokes take to start (CRDs and admission
// policies installed, clients ready) and the memory their etcd and kube-apiserver processes use.
func BenchmarkStartFleet(b *testing.B) {
	for _, servers := range []int{1, 4} {
		b.Run(fmt.Sprintf("servers=%d", servers), func(b *testing.B) {
			var spokes []string
			for i := 1; i < servers; i++ {
				spokes = append(spokes, fmt.Sprintf("spoke-%d", i))
			}
			var total time.Duration
			var rss int64
			for b.Loop() {
				start := time.Now()
				f, err := testenv.New(testenv.Options{Spokes: spokes})
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				for _, c := range append([]*testenv.Cluster{f.Hub}, spokesOf(f)...) {
					rss += testenv.RSSBytes(c.PIDs()...)
				}
				if err := f.Stop(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/start")
			b.ReportMetric(float64(rss)/float64(b.N)/(1<<20), "MiB-rss")
		})
	}
}

func spokesOf(f *testenv.Fleet) []*testenv.Cluster {
	var out []*testenv.Cluster
	for _, c := range f.Spokes {
		out = append(out, c)
	}
	return out
}
