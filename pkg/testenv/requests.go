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
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if match == nil || match(r) {
				n.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	return out, n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
