package registry_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// flowSchemaHeader is the response header in which the API server names (by UID) the FlowSchema
// that classified a request (API priority and fairness).
const flowSchemaHeader = "X-Kubernetes-Pf-Flowschema-Uid"

// TestAgentHeartbeatsHaveTheirOwnPriority: on a hub API server with the hub chart's FlowSchema
// magos-agent-heartbeats (applied from charts/magos-hub/files, as the chart applies it), an
// agent's Lease requests are classified by that FlowSchema, in the node-high priority
// level, and its other requests (a mirror read) are not. The API server's own answer (the
// header naming the FlowSchema that classified each request) is the observer.
func TestAgentHeartbeatsHaveTheirOwnPriority(t *testing.T) {
	ctx := context.Background()
	ns := mirror.Namespace("pf")
	agentCfg := startHubForAgent(t, "pf")
	var (
		mu   sync.Mutex
		last string // the FlowSchema UID of the last answer
	)
	agentCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				mu.Lock()
				last = resp.Header.Get(flowSchemaHeader)
				mu.Unlock()
			}
			return resp, err
		})
	})
	agent, err := client.New(agentCfg, client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	classifiedBy := func(do func() error) (string, error) {
		mu.Lock()
		last = ""
		mu.Unlock()
		if err := do(); err != nil {
			return "", err
		}
		mu.Lock()
		defer mu.Unlock()
		return last, nil
	}

	var fs flowcontrolv1.FlowSchema
	if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: "magos-agent-heartbeats"}, &fs); err != nil {
		t.Fatalf("the hub API server has no FlowSchema magos-agent-heartbeats: %v", err)
	}
	if fs.Spec.PriorityLevelConfiguration.Name != "node-high" {
		t.Errorf("magos-agent-heartbeats sends to priority level %q, want node-high", fs.Spec.PriorityLevelConfiguration.Name)
	}
	// The API server loads a new FlowSchema within moments: until then the Lease goes to the
	// ServiceAccounts' FlowSchema.
	testenv.Eventually(t, 30*time.Second, func() error {
		uid, err := classifiedBy(func() error {
			return renewLease(ctx, agent, ns, "pf/test", 40, nil)
		})
		if err != nil {
			return err
		}
		if uid != string(fs.UID) {
			return fmt.Errorf("the agent's Lease renewal was classified by FlowSchema %q, want magos-agent-heartbeats (%s)", uid, fs.UID)
		}
		return nil
	})
	uid, err := classifiedBy(func() error {
		return agent.List(ctx, &magosv1.WorkspaceList{}, client.InNamespace(ns))
	})
	if err != nil {
		t.Fatal(err)
	}
	if uid == "" || uid == string(fs.UID) {
		t.Errorf("the agent's read of its mirrors was classified by FlowSchema %q, want another than magos-agent-heartbeats (%s)", uid, fs.UID)
	}
}
