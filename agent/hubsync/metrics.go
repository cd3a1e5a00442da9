package hubsync

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the hub sync, on controller-runtime's registry (served at /metrics): how far behind
// the mirrors were at the heartbeat's last audit, as the Lease reports it to the hub, and the
// heartbeats that could not renew the Lease.
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
		Help: "Heartbeats whose Lease renewal on the hub failed (an error or no answer within the heartbeat interval); the hub counts the cluster silent when none succeeds for a lease duration.",
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() { metrics.Registry.MustRegister(mirrorsBehind, mirrorLag, heartbeatFailures) })
}
