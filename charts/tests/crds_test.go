package tests

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var magosCRDs = []string{"clusters", "projects", "rollouts", "variablesets", "workspaces"}

// TestCRDs checks that both charts render the generated CRDs unchanged but for Helm's keep
// policy (so `helm uninstall` never deletes them, and the Workspaces with them), that they are
// templates (upgraded by `helm upgrade`), and that crds.install=false leaves them out.
func TestCRDs(t *testing.T) {
	for _, chartName := range []string{"magos-hub", "magos-agent"} {
		t.Run(chartName, func(t *testing.T) {
			values := map[string]any{}
			if chartName == "magos-agent" {
				values["clusterName"] = "local"
			}
			objs := render(t, chartName, values)
			for _, name := range magosCRDs {
				key := "CustomResourceDefinition/" + name + ".magosproject.io"
				u := objs[key]
				if u == nil {
					t.Errorf("%s not rendered", key)
					continue
				}
				if got := u.GetAnnotations()["helm.sh/resource-policy"]; got != "keep" {
					t.Errorf("%s: helm.sh/resource-policy = %q, want keep (uninstall would delete every %s)", key, got, name)
				}
				generated := decodeFile(t, filepath.Join("..", chartName, "files", "crds", "magosproject.io_"+name+".yaml"))
				rendered := as[apiextensionsv1.CustomResourceDefinition](t, u)
				if !reflect.DeepEqual(rendered.Spec, generated.Spec) {
					t.Errorf("%s: the rendered spec differs from the generated file", key)
				}
				delete(rendered.Annotations, "helm.sh/resource-policy")
				if !reflect.DeepEqual(rendered.ObjectMeta, generated.ObjectMeta) {
					t.Errorf("%s: metadata %+v, generated %+v (plus the keep policy)", key, rendered.ObjectMeta, generated.ObjectMeta)
				}
			}
			values["crds"] = map[string]any{"install": false}
			for key := range render(t, chartName, values) {
				if strings.HasPrefix(key, "CustomResourceDefinition/") && strings.HasSuffix(key, ".magosproject.io") {
					t.Errorf("%s rendered with crds.install=false", key)
				}
			}
		})
	}
	kyverno := render(t, "magos-agent", map[string]any{"clusterName": "local"})["CustomResourceDefinition/validatingpolicies.policies.kyverno.io"]
	if kyverno == nil || kyverno.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the ValidatingPolicy CRD is not kept on uninstall: %v", kyverno)
	}
	// Helm installs crds/ once and never upgrades it: the CRDs must stay templates.
	for _, chartName := range []string{"magos-hub", "magos-agent"} {
		if _, err := os.Stat(filepath.Join("..", chartName, "crds")); !os.IsNotExist(err) {
			t.Errorf("%s has a crds/ folder: helm upgrade would not update it", chartName)
		}
	}
}

func decodeFile(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
	for len(u.Object) == 0 {
		if err := dec.Decode(&u.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return as[apiextensionsv1.CustomResourceDefinition](t, u)
}
