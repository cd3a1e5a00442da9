package testenv

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// CountRequests returns a copy of cfg whose clients count, in the returned counter, the
// requests match accepts (every request when match is nil): an observer of what a component
// asks the API server, independent of the component's code. Counters chain: pass the result to
// CountRequests again to count two kinds of requests.
func CountRequests(cfg *rest.Config, match func(*http.Request) bool) (*rest.Config, *atomic.Int64) {
	out := rest.CopyConfig(cfg)
	n := &atomic.Int64{}
	out.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if match == nil || match(r) {
				n.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	return out, n
}

// RoundTripFunc is an http.RoundTripper made of a function: what a test (or a benchmark) wraps
// a client's transport with, in rest.Config.Wrap, to observe its requests and their answers.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
