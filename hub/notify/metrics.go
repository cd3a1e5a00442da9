package notify

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metrics are the Notifier's, registered with controller-runtime's registry (the hub serves it).
var metrics = func() struct {
	sent     *prometheus.CounterVec
	failures *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	queued   *prometheus.GaugeVec
} {
	m := struct {
		sent     *prometheus.CounterVec
		failures *prometheus.CounterVec
		dropped  *prometheus.CounterVec
		queued   *prometheus.GaugeVec
	}{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "magos_notifications_sent_total",
			Help: "Notifications a webhook took (answered 2xx), by webhook and type.",
		}, []string{"webhook", "type"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "magos_notification_delivery_failures_total",
			Help: "Attempts to deliver a notification that failed (no answer, or not 2xx), by webhook.",
		}, []string{"webhook"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "magos_notifications_dropped_total",
			Help: "Notifications given up: not delivered within the webhook's retryFor, by webhook.",
		}, []string{"webhook"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "magos_notifications_queued",
			Help: "Notifications waiting for their webhook (the one being delivered included), by webhook.",
		}, []string{"webhook"}),
	}
	ctrlmetrics.Registry.MustRegister(m.sent, m.failures, m.dropped, m.queued)
	return m
}()
