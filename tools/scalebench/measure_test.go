package scalebench

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
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
