package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/version"
)

// TestVersion: magosctl version prints its own version, the hub's as the leader names it on its
// Lease, and each cluster's agent with the skew policy's verdict: the hub's refusal when it
// refused the agent, "-" for a direct cluster.
func TestVersion(t *testing.T) {
	f := setup(t)
	if out := mustRun(t, f.hub.Kubeconfig, "version", "--client"); out != "Client: "+version.Get()+"\n" {
		t.Errorf("version --client: %q", out)
	}
	// Without a leader Lease the hub's version is unknown, and says why.
	if out := mustRun(t, f.hub.Kubeconfig, "version"); !strings.Contains(out, "Hub:    unknown: no leader Lease magos-hub.magosproject.io names a hub version") {
		t.Errorf("version without a hub:\n%s", out)
	}

	f.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "magos-system"}})
	f.create(t, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "magos-system", Name: keys.HubLeaderLease, Labels: map[string]string{keys.HubVersion: "v0.2.1"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("magos-hub-7d9c")},
	})
	status := func(name, agent string, cond metav1.Condition) {
		cl := &magosv1.Cluster{}
		if err := f.hub.Client.Get(f.ctx, client.ObjectKey{Name: name}, cl); err != nil {
			t.Fatal(err)
		}
		cl.Status.AgentVersion = agent
		cond.Type = magosv1.ConditionAvailable
		meta.SetStatusCondition(&cl.Status.Conditions, cond)
		if err := f.hub.Client.Status().Update(f.ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	status("us-east-1", "v0.1.4", metav1.Condition{Status: metav1.ConditionTrue, Reason: magosv1.ReasonAgentHeartbeating})
	status("eu-west-1", "v0.4.0", metav1.Condition{Status: metav1.ConditionFalse, Reason: magosv1.ReasonAgentVersionSkew,
		Message: "agent v0.4.0 is outside the supported version skew: hub v0.2.1 supports agents v0.1.x to v0.3.x"})
	f.create(t, &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "lab"}, Spec: magosv1.ClusterSpec{Transport: magosv1.TransportDirect,
		Kubeconfig: &magosv1.KubeconfigSource{Path: "/etc/magos/lab.kubeconfig"}}})
	f.create(t, &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: magosv1.ClusterSpec{Transport: magosv1.TransportAgent}})

	want := "Client: " + version.Get() + "\n" +
		"Hub:    v0.2.1 (leader magos-hub-7d9c, Lease magos-system/magos-hub.magosproject.io)\n\n" +
		"CLUSTER    TRANSPORT  AGENT VERSION  SKEW\n" +
		"eu-west-1  agent      v0.4.0         refused: agent v0.4.0 is outside the supported version skew: hub v0.2.1 supports agents v0.1.x to v0.3.x\n" +
		"lab        direct     -              -\n" +
		"new        agent      -              unknown: no heartbeat yet\n" +
		"us-east-1  agent      v0.1.4         ok\n"
	if out := mustRun(t, f.hub.Kubeconfig, "version"); out != want {
		t.Errorf("version:\n%s\nwant:\n%s", out, want)
	}
	var v struct {
		Client, Hub string
		Agents      []struct{ Cluster, Version, Skew string }
	}
	if err := json.Unmarshal([]byte(mustRun(t, f.hub.Kubeconfig, "version", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Client != version.Get() || v.Hub != "v0.2.1" || len(v.Agents) != 4 || v.Agents[3].Skew != "ok" || !strings.HasPrefix(v.Agents[0].Skew, "refused: ") {
		t.Errorf("version -o json: %+v", v)
	}
}
