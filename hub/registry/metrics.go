package registry

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// clusterAvailable is 1 while a registered cluster is Available.
	clusterAvailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_hub_cluster_available",
		Help: "1 while the registered cluster is available (its agent heartbeats, or its API server answers), else 0.",
	}, []string{"cluster"})

	// configReloads counts reloads of the hub's config file by result: applied (a new
	// configuration took effect), unchanged, or failed (it did not load or validate).
	configReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magos_hub_config_reloads_total",
		Help: "Reloads of the hub's config file, by result (applied, unchanged, failed).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(clusterAvailable, configReloads)
}
