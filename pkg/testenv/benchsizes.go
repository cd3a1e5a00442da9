package testenv

import (
	"cmp"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchClusters returns the fleet sizes a scale benchmark runs at: the comma-separated numbers
// of $MAGOS_BENCH_CLUSTERS, or def when it is unset. A value that is not a positive number
// fails the benchmark.
func BenchClusters(b testing.TB, def string) []int {
	b.Helper()
	spec := cmp.Or(os.Getenv("MAGOS_BENCH_CLUSTERS"), def)
	var sizes []int
	for f := range strings.SplitSeq(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("MAGOS_BENCH_CLUSTERS=%q: %q is not a positive number", spec, f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}
