package scalebench

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRequestCounter checks that the counter the emulated agents' hub configs are wrapped with
// counts every request by method, and the writes (not get, list or watch) by resource.
func TestRequestCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	c := newRequestCounter()
	hc := &http.Client{Transport: c.wrap(http.DefaultTransport)}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/apis/magosproject.io/v1alpha1/namespaces/magos-c/workspaces?watch=true"},
		{http.MethodPatch, "/apis/magosproject.io/v1alpha1/namespaces/magos-c/workspaces/ws-0/status"},
		{http.MethodPatch, "/apis/magosproject.io/v1alpha1/namespaces/magos-c/workspaces/ws-1/status"},
		{http.MethodPatch, "/apis/magosproject.io/v1alpha1/namespaces/magos-c/workspaces/ws-0"},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/magos-c/leases/magos-agent"},
		{http.MethodPost, "/api/v1/namespaces/magos-c/secrets"},
		{http.MethodDelete, "/api/v1/namespaces/magos-c/secrets/s"},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	byMethod, byResource := c.snapshot()
	wantMethod := map[string]float64{"GET": 1, "PATCH": 3, "PUT": 1, "POST": 1, "DELETE": 1}
	wantResource := map[string]float64{"workspaces/status": 2, "workspaces": 1, "leases": 1, "secrets": 2}
	if !maps.Equal(byMethod, wantMethod) || !maps.Equal(byResource, wantResource) {
		t.Errorf("counted %v by method and %v by resource, want %v and %v", byMethod, byResource, wantMethod, wantResource)
	}
	r := Result{AgentRequestsByMethod: byMethod, AgentWritesByResource: byResource, Grants: 2}
	if r.AgentWrites() != 6 || r.AgentWritesPerRun() != 2.5 || r.AgentHeartbeatsPerRun() != 0.5 {
		t.Errorf("%v writes, %v per run and %v heartbeats per run; want 6, 2.5 and 0.5", r.AgentWrites(), r.AgentWritesPerRun(), r.AgentHeartbeatsPerRun())
	}
}

// TestRenewalGaps checks the benchmark's own measure of silence: each cluster's longest time
// without a renewal answered, within the timed window only, counting from the window's start and
// to its end.
func TestRenewalGaps(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 22, 0, 0, 0, time.UTC)
	at := func(secs ...int) []time.Time {
		var ts []time.Time
		for _, s := range secs {
			ts = append(ts, t0.Add(time.Duration(s)*time.Second))
		}
		return ts
	}
	c := newRequestCounter()
	c.renewed = map[string][]time.Time{
		"steady":    at(-5, 5, 15, 25, 35, 45, 55, 65, 75, 85, 95),
		"one-gap":   at(-5, 5, 50, 60, 70, 80, 90, 100),
		"before":    at(-60, -5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100),
		"stops":     at(-5, 5, 15, 25),
		"after-end": at(-5, 5, 15, 25, 35, 45, 55, 65, 75, 85, 95, 200),
	}
	got := c.renewalGaps(t0, t0.Add(100*time.Second))
	want := map[string]time.Duration{
		"steady":    10 * time.Second, // and 5 s from the last to the end
		"one-gap":   45 * time.Second,
		"before":    10 * time.Second, // the 55 s before the window does not count
		"stops":     75 * time.Second, // to the end of the window
		"after-end": 10 * time.Second,
	}
	if !maps.Equal(got, want) {
		t.Errorf("renewalGaps = %v, want %v", got, want)
	}
	if n := (Result{RenewalGaps: got}).LateClusters(); n != 2 {
		t.Errorf("LateClusters = %d, want 2 (one-gap, stops)", n)
	}
	for path, want := range map[string]string{
		"/apis/coordination.k8s.io/v1/namespaces/magos-cluster-a/leases/magos-agent": "magos-cluster-a",
		"/api/v1/namespaces/ns":        "ns",
		"/api/v1/nodes/n":              "",
		"/apis/coordination.k8s.io/v1": "",
	} {
		if got := namespaceOf(path); got != want {
			t.Errorf("namespaceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
