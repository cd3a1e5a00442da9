package registry

import (
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
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

	// mirrorsBehind and mirrorLag are how far behind each agent cluster's mirror sync is, as its
	// agent last reported on its heartbeat Lease (mirror.Watermark Behind and Lag).
	mirrorsBehind = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_hub_cluster_mirrors_behind",
		Help: "Mirrors out of sync with their spoke Workspace at the agent's last audit, as its heartbeat Lease reports.",
	}, []string{"cluster"})
	mirrorLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "magos_hub_cluster_mirror_lag_seconds",
		Help: "How long the mirror furthest behind had been out of sync at the agent's last audit, as its heartbeat Lease reports.",
	}, []string{"cluster"})
)

func init() {
	metrics.Registry.MustRegister(clusterAvailable, configReloads, mirrorsBehind, mirrorLag)
}

// observeLag sets the lag gauges of the agent cluster whose heartbeat Lease l is.
func observeLag(l *coordinationv1.Lease) {
	name, ok := mirror.ClusterOf(l.Namespace)
	if !ok || l.Name != keys.AgentLease {
		return
	}
	w := mirror.WatermarkOf(l.Annotations)
	mirrorsBehind.WithLabelValues(name).Set(float64(w.Behind))
	mirrorLag.WithLabelValues(name).Set(w.Lag.Seconds())
}

// forgetLag removes the lag gauges of the agent cluster whose Lease was in namespace ns.
func forgetLag(ns string) {
	if name, ok := mirror.ClusterOf(ns); ok {
		mirrorsBehind.DeleteLabelValues(name)
		mirrorLag.DeleteLabelValues(name)
	}
}
