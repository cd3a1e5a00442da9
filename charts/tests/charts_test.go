package tests

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/magosfleet/magos/pkg/localcluster"
)

const namespace = "magos-system"

// render renders a chart with the given values, as `helm template` would, and returns its
// objects by "Kind/name".
func render(t *testing.T, chartName string, values map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := tryRender(chartName, values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func tryRender(chartName string, values map[string]any) (map[string]*unstructured.Unstructured, error) {
	ch, files, err := renderFiles(chartName, values)
	if err != nil {
		return nil, err
	}
	return decode(ch, files)
}

// renderFiles renders a chart as `helm install` would (values checked against its schema), and
// returns the rendered files by template path.
func renderFiles(chartName string, values map[string]any) (*chart.Chart, map[string]string, error) {
	ch, err := loader.Load(filepath.Join("..", chartName))
	if err != nil {
		return nil, nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: chartName, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities.Copy())
	if err != nil {
		return nil, nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, nil, err
	}
	return ch, files, nil
}

// renderNotes returns a chart's rendered NOTES.txt.
func renderNotes(t *testing.T, chartName string, values map[string]any) string {
	t.Helper()
	_, files, err := renderFiles(chartName, values)
	if err != nil {
		t.Fatal(err)
	}
	notes, ok := files[chartName+"/templates/NOTES.txt"]
	if !ok {
		t.Fatalf("%s has no NOTES.txt", chartName)
	}
	return notes
}

func decode(ch *chart.Chart, files map[string]string) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(files[name]), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if err == io.EOF {
					break
				}
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			key := u.GetKind() + "/" + u.GetName()
			if u.GetNamespace() != "" && u.GetNamespace() != namespace {
				key = u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
			}
			if _, dup := out[key]; dup {
				return nil, fmt.Errorf("%s: %s rendered twice", ch.Name(), key)
			}
			out[key] = u
		}
	}
	return out, nil
}

func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	if u == nil {
		t.Fatal("object not rendered")
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLint(t *testing.T) {
	cases := map[string]map[string]any{
		"magos-hub":   nil,
		"magos-agent": {"clusterName": "us-east-1"},
	}
	for name, values := range cases {
		t.Run(name, func(t *testing.T) {
			linter := lint.All(filepath.Join("..", name), values, namespace, false)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

func TestHubDefaults(t *testing.T) {
	objs := render(t, "magos-hub", nil)
	d := as[appsv1.Deployment](t, objs["Deployment/magos-hub"])
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2 (leader election)", *d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"controller", "--config=/etc/magos/config.yaml", "--leader-elect=true", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("hub args %v lack %s", c.Args, arg)
		}
	}
	assertHardened(t, d)
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("hub has no probes")
	}
	if objs["Service/magos-hub-metrics"] == nil {
		t.Error("no metrics Service")
	}
	for _, name := range []string{"ValidatingAdmissionPolicy/magos-rollout-approvals", "ValidatingAdmissionPolicyBinding/magos-rollout-approvals", "ClusterRole/magos-hub-rollout-approver",
		"ValidatingAdmissionPolicy/magos-workspace-requests", "ValidatingAdmissionPolicyBinding/magos-workspace-requests", "ClusterRole/magos-hub-workspace-operator"} {
		if objs[name] == nil {
			t.Errorf("no %s: approvals and requests would need no verb of their own", name)
		}
	}
	// The leader fence reads the leader Lease of this release's replicas.
	if objs["ValidatingAdmissionPolicy/magos-hub-leader"] == nil || objs["ValidatingAdmissionPolicyBinding/magos-hub-leader"] == nil {
		t.Error("no magos-hub-leader policy and binding: a deposed hub replica's decisions would land")
	} else if b := as[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs["ValidatingAdmissionPolicyBinding/magos-hub-leader"]); b.Spec.ParamRef == nil ||
		b.Spec.ParamRef.Name != "magos-hub.magosproject.io" || b.Spec.ParamRef.Namespace != namespace {
		t.Errorf("magos-hub-leader binds %+v, want the Lease magos-hub.magosproject.io in %s", b.Spec.ParamRef, namespace)
	} else if want := localcluster.LeaderPolicyBinding(namespace).Spec; !equality.Semantic.DeepEqual(b.Spec, want) {
		// The test hubs (pkg/localcluster) bind the policy as the chart does.
		t.Errorf("the chart binds magos-hub-leader as %+v, the test hubs as %+v", b.Spec, want)
	}
	if !slices.ContainsFunc(as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-hub"]).Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "workspaces") && slices.Contains(r.Verbs, "grant")
	}) {
		t.Error("the hub's ClusterRole lacks the verb grant on workspaces: the request policy would refuse its grants")
	}
	cm := as[corev1.ConfigMap](t, objs["ConfigMap/magos-hub-config"])
	if !strings.Contains(cm.Data["config.yaml"], "clusters: []") {
		t.Errorf("config = %q", cm.Data["config.yaml"])
	}
	// The agents' heartbeats have a priority level of their own (TestAgentHeartbeatsHaveTheirOwnPriority
	// in hub/registry shows the API server using it), unless turned off.
	if fs := objs["FlowSchema/magos-agent-heartbeats"]; fs == nil {
		t.Error("no FlowSchema magos-agent-heartbeats: the agents' heartbeats would queue behind their mirror writes")
	} else if level, _, _ := unstructured.NestedString(fs.Object, "spec", "priorityLevelConfiguration", "name"); level != "node-high" {
		t.Errorf("FlowSchema magos-agent-heartbeats sends to priority level %q, want node-high", level)
	}
	if objs := render(t, "magos-hub", map[string]any{"agentHeartbeatPriority": map[string]any{"enabled": false}}); objs["FlowSchema/magos-agent-heartbeats"] != nil {
		t.Error("agentHeartbeatPriority.enabled=false still renders the FlowSchema magos-agent-heartbeats")
	}
}

func TestHubClustersFromValues(t *testing.T) {
	objs := render(t, "magos-hub", map[string]any{
		"config": map[string]any{"clusters": []any{
			map[string]any{"name": "us-east-1", "labels": map[string]any{"region": "us-east-1"}, "agent": map[string]any{}},
			map[string]any{"name": "lab", "kubeconfig": map[string]any{"secretRef": map[string]any{"namespace": namespace, "name": "lab", "key": "kubeconfig"}}},
		}},
		"leaderElection": map[string]any{"enabled": false},
		"replicaCount":   1,
		"metrics":        map[string]any{"port": 9090, "service": map[string]any{"enabled": false, "type": "ClusterIP", "port": 9090}},
		"log":            map[string]any{"level": "debug", "format": "console"},
	})
	cm := as[corev1.ConfigMap](t, objs["ConfigMap/magos-hub-config"])
	for _, want := range []string{"name: us-east-1", "region: us-east-1", "agent: {}", "name: lab", "secretRef:"} {
		if !strings.Contains(cm.Data["config.yaml"], want) {
			t.Errorf("config lacks %q:\n%s", want, cm.Data["config.yaml"])
		}
	}
	d := as[appsv1.Deployment](t, objs["Deployment/magos-hub"])
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, arg := range []string{"--leader-elect=false", "--metrics-bind-address=:9090", "--log-level=debug", "--log-development=true"} {
		if !slices.Contains(args, arg) {
			t.Errorf("args %v lack %s", args, arg)
		}
	}
	if objs["Service/magos-hub-metrics"] != nil {
		t.Error("metrics Service rendered although disabled")
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("no config checksum: pods would not roll on config change")
	}
}

func TestAgentDefaults(t *testing.T) {
	objs := render(t, "magos-agent", map[string]any{"clusterName": "eu-west-1",
		"hub": map[string]any{"kubeconfigSecret": map[string]any{"name": "hub-kubeconfig", "key": "kubeconfig"}}})
	d := as[appsv1.Deployment](t, objs["Deployment/magos-agent"])
	c := d.Spec.Template.Spec.Containers[0]
	// The runner image's tag defaults to the chart's appVersion, the release's image tag.
	ch, err := loader.Load(filepath.Join("..", "magos-agent"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"controller", "--cluster-name=eu-west-1", "--hub-kubeconfig=/etc/magos/hub/kubeconfig", "--runner-mode=job", "--runner-image=ghcr.io/magosfleet/magos-runner:" + ch.Metadata.AppVersion, "--leader-elect=true"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("agent args %v lack %s", c.Args, arg)
		}
	}
	if slices.Contains(c.Args, "--hub-grants") {
		t.Errorf("agent args %v: --hub-grants by default", c.Args)
	}
	assertHardened(t, d)
	if len(d.Spec.Template.Spec.Volumes) != 1 || d.Spec.Template.Spec.Volumes[0].Secret.SecretName != "hub-kubeconfig" {
		t.Errorf("hub kubeconfig not mounted from its Secret: %+v", d.Spec.Template.Spec.Volumes)
	}
	for _, key := range []string{
		"ValidatingAdmissionPolicy/magos-workspace-annotations",
		"ValidatingAdmissionPolicyBinding/magos-workspace-annotations",
		"ValidatingAdmissionPolicy/magos-workspace-grants",
		"ValidatingAdmissionPolicyBinding/magos-workspace-grants",
		"CustomResourceDefinition/validatingpolicies.policies.kyverno.io",
		"CustomResourceDefinition/workspaces.magosproject.io",
		"ServiceAccount/default/magos-job",
		"RoleBinding/default/magos-job",
		"ClusterRole/magos-agent-job",
	} {
		if objs[key] == nil {
			t.Errorf("%s not rendered", key)
		}
	}
	// Least privilege: no wildcards, and no Secrets cluster-wide (TestAgentSecretAccess).
	role := as[rbacv1.ClusterRole](t, objs["ClusterRole/magos-agent"])
	for _, r := range role.Rules {
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") {
			t.Errorf("wildcard rule %+v", r)
		}
		if slices.Contains(r.Resources, "secrets") {
			t.Errorf("the agent's ClusterRole grants Secrets in every namespace: %+v", r)
		}
	}
}

func TestAgentValues(t *testing.T) {
	objs := render(t, "magos-agent", map[string]any{
		"clusterName":         "ap-south-1",
		"policy":              map[string]any{"installKyvernoCRD": false},
		"admissionPolicy":     map[string]any{"enabled": false},
		"jobServiceAccount":   map[string]any{"create": true, "name": "runner"},
		"workspaceNamespaces": []any{"payments", "cdn"},
		"runner":              map[string]any{"mode": "local", "image": map[string]any{"repository": "registry.local/runner", "tag": "dev"}},
		"hub":                 map[string]any{"grantsDirectly": true},
	})
	for _, key := range []string{"ValidatingAdmissionPolicy/magos-workspace-annotations", "ValidatingAdmissionPolicy/magos-workspace-grants", "CustomResourceDefinition/validatingpolicies.policies.kyverno.io", "ServiceAccount/default/magos-job"} {
		if objs[key] != nil {
			t.Errorf("%s rendered although disabled", key)
		}
	}
	for _, key := range []string{"ServiceAccount/payments/runner", "RoleBinding/cdn/runner"} {
		if objs[key] == nil {
			t.Errorf("%s not rendered", key)
		}
	}
	d := as[appsv1.Deployment](t, objs["Deployment/magos-agent"])
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, arg := range []string{"--runner-mode=local", "--runner-image=registry.local/runner:dev", "--hub-grants"} {
		if !slices.Contains(args, arg) {
			t.Errorf("args %v lack %s", args, arg)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--hub-kubeconfig") }) {
		t.Error("a hub kubeconfig flag without a hub Secret")
	}
}

func TestAgentRequiresClusterName(t *testing.T) {
	_, err := tryRender("magos-agent", nil)
	if err == nil || !strings.Contains(err.Error(), "missing property 'clusterName'") {
		t.Fatalf("error = %v, want clusterName missing", err)
	}
}

func assertHardened(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	assertPodHardened(t, d.Name, &d.Spec.Template.Spec)
}
