package localcluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/localcluster"
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
				f, err := localcluster.New(localcluster.Options{Spokes: spokes})
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				for _, c := range append([]*localcluster.Cluster{f.Hub}, spokesOf(f)...) {
					rss += localcluster.RSSBytes(c.PIDs()...)
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

func spokesOf(f *localcluster.Fleet) []*localcluster.Cluster {
	var out []*localcluster.Cluster
	for _, c := range f.Spokes {
		out = append(out, c)
	}
	return out
}
