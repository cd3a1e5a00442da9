package tests

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestServiceMonitor: metrics.serviceMonitor.enabled renders a ServiceMonitor that selects the
// chart's metrics Service (and no other object's labels decide it) on its named port; it is off
// by default, and bad settings fail the install.
func TestServiceMonitor(t *testing.T) {
	for _, chart := range []string{"magos-hub", "magos-agent"} {
		t.Run(chart, func(t *testing.T) {
			base := map[string]any{}
			if chart == "magos-agent" {
				base = map[string]any{"clusterName": "eu-west-1",
					"hub": map[string]any{"kubeconfigSecret": map[string]any{"name": "hub-kubeconfig", "key": "kubeconfig"}}}
			}
			with := func(metrics map[string]any) map[string]any {
				v := maps.Clone(base)
				v["metrics"] = metrics
				return v
			}
			if objs := render(t, chart, base); objs["ServiceMonitor/"+chart] != nil {
				t.Fatal("a ServiceMonitor by default: installs would fail without the Prometheus Operator")
			}
			objs := render(t, chart, with(map[string]any{"serviceMonitor": map[string]any{
				"enabled": true, "interval": "30s", "labels": map[string]any{"release": "prometheus"}}}))
			sm := objs["ServiceMonitor/"+chart]
			svc := objs["Service/"+chart+"-metrics"]
			if sm == nil || svc == nil {
				t.Fatalf("ServiceMonitor %v, metrics Service %v", sm != nil, svc != nil)
			}
			if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetNamespace() != namespace || sm.GetLabels()["release"] != "prometheus" {
				t.Errorf("ServiceMonitor %s in %q, labels %v", sm.GetAPIVersion(), sm.GetNamespace(), sm.GetLabels())
			}
			match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			if len(match) == 0 {
				t.Fatal("the ServiceMonitor selects every Service")
			}
			for k, v := range match {
				if svc.GetLabels()[k] != v {
					t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service (labels %v) lacks", k, v, svc.GetLabels())
				}
			}
			names, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
			if len(names) != 1 || names[0] != namespace {
				t.Errorf("namespaceSelector %v, want the release namespace", names)
			}
			endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			if len(endpoints) != 1 || len(ports) != 1 {
				t.Fatalf("endpoints %v, Service ports %v", endpoints, ports)
			}
			ep, port := endpoints[0].(map[string]any), ports[0].(map[string]any)
			if ep["port"] != port["name"] || ep["interval"] != "30s" {
				t.Errorf("endpoint %v, want the Service's port %v every 30s", ep, port["name"])
			}
			for _, tc := range []struct {
				metrics map[string]any
				want    string
			}{
				{map[string]any{"service": map[string]any{"enabled": false}, "serviceMonitor": map[string]any{"enabled": true}}, "needs metrics.service.enabled"},
				{map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "soon"}}, "interval"},
				{map[string]any{"serviceMonitor": map[string]any{"enabled": true, "scrapeTimeout": "5s"}}, "scrapeTimeout"},
			} {
				if _, err := tryRender(chart, with(tc.metrics)); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("metrics %v: %v, want an error naming %q", tc.metrics, err, tc.want)
				}
			}
		})
	}
}
