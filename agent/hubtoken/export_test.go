package hubtoken

import dto "github.com/prometheus/client_model/go"

// WithRequestFault makes the Renewer of opts ask fault before each TokenRequest; an error fails
// the request as the hub would (a test fault).
func WithRequestFault(opts *Options, fault func() error) {
	opts.requestFault = fault
}

// RenewalFailures is magos_agent_hub_token_renewals_total{result="failure"}.
func RenewalFailures() float64 {
	m := &dto.Metric{}
	_ = renewalsTotal.WithLabelValues("failure").Write(m)
	return m.GetCounter().GetValue()
}

// ExpiryTimestamp is magos_agent_hub_token_expiry_timestamp_seconds.
func ExpiryTimestamp() float64 {
	m := &dto.Metric{}
	_ = expiryTimestamp.Write(m)
	return m.GetGauge().GetValue()
}
