package fleet

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// engagedClusters is the number of clusters the fleet has engaged.
var engagedClusters = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "magos_hub_engaged_clusters",
	Help: "Number of registered clusters the hub has engaged (its controllers watch them).",
})

func init() {
	metrics.Registry.MustRegister(engagedClusters)
}
