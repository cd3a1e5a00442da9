package hubsync

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the hub sync, on controller-runtime's registry (served at /metrics): how far behind
// the mirrors were at the heartbeat's last audit, as the Lease reports it to the hub, and the
// heartbeats' renewals of the Lease: how long they took, and those that failed.
var (
	mirrorsBehind = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_agent_mirrors_behind",
		Help: "Mirrors on the hub out of sync with their spoke Workspace at the heartbeat's last audit.",
	})
	mirrorLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magos_agent_mirror_lag_seconds",
		Help: "How long the mirror furthest behind had been out of sync at the heartbeat's last audit (0: none behind).",
	})
	heartbeatFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magos_agent_heartbeat_failures_total",
		Help: "Heartbeats whose Lease renewal on the hub failed (an error, or no answer within the lease duration less one heartbeat interval); the hub counts the cluster silent when none succeeds for a lease duration.",
	})
	heartbeatDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "magos_agent_heartbeat_duration_seconds",
		Help:    "How long each Lease renewal on the hub took, failed ones included: renewals that come near the lease duration (40 s by default) show a hub API server that is about to turn this cluster silent.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 40},
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() { metrics.Registry.MustRegister(mirrorsBehind, mirrorLag, heartbeatFailures, heartbeatDuration) })
}
