// Package demoscenario is the one definition of the Magos Fleet demo's scenario: the
// OpenTofu module every region applies, the names of its objects, and the objects themselves (a
// VariableSet and a Workspace in every spoke, a Project and a region-by-region Rollout on the
// hub). Both demos use it: `make demo` on a local fleet (tools/demo) and `make demo-real` on
// real nodes (tools/realnode/cmd/magos-demo-real, a module of its own that reaches the tools
// module's packages only through apis and pkg).
package demoscenario

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// Names of the demo's objects.
const (
	// Project names the Project and the Rollout on the hub.
	Project = "cdn-platform"
	// Workspace names the Workspace in every spoke (namespace default).
	Workspace = "cdn-edge"
	// VariableSet names the Workspace's VariableSet in every spoke.
	VariableSet = "cdn-edge-inputs"
	// TofuVersion is the OpenTofu version the demo's Workspaces run: the one the repository
	// pins (TOFU_VERSION in tools/provision-assets.sh), which the dev fleet's agents run.
	TofuVersion = "1.10.6"
)

// Module is the root module every region applies: it needs no provider download (the runner
// Pods of the real-node demo reach no registry), records its inputs in the state, and refuses
// to deploy to a region marked unhealthy (a precondition, so the plan fails).
const Module = `variable "region" {
  type = string
}

variable "healthy" {
  type    = bool
  default = true
}

resource "terraform_data" "edge" {
  input = {
    region  = var.region
    release = "v1"
  }

  lifecycle {
    precondition {
      condition     = var.healthy
      error_message = "region ${var.region} is marked unhealthy: refusing to deploy"
    }
  }
}

output "endpoint" {
  value = "https://edge.${var.region}.example.com"
}

output "release" {
  value = terraform_data.edge.output.release
}
`

// ConfigMap names the ConfigMap (namespace default) that LocalModule manages in each region's
// own cluster.
const ConfigMap = "cdn-edge"

// ConfigMapResources are the resources that manage, through the kubectl provider (which the
// runner installs from its provider mirror, docs/providers.md), the ConfigMap of release in the
// region's own cluster: a real object that anyone can change behind tofu's back with kubectl.
// They go in a module that declares the variable region.
func ConfigMapResources(release string) string {
	return strings.NewReplacer("@RELEASE@", release, "@NAME@", ConfigMap).Replace(`
terraform {
  required_providers {
    kubectl = {
      source  = "gavinbunney/kubectl"
      version = "1.19.0"
    }
  }
}

provider "kubectl" {}

resource "kubectl_manifest" "edge_config" {
  yaml_body = yamlencode({
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata   = { name = "@NAME@", namespace = "default" }
    data       = { region = var.region, release = "@RELEASE@" }
  })
}
`)
}

// LocalModuleAt is the module of the local demo (make demo) at release: Module, with that
// release, plus the ConfigMap of ConfigMapResources. The real-node demo applies Module alone:
// its runner Jobs' ServiceAccount manages no ConfigMaps unless an operator grants it.
func LocalModuleAt(release string) string {
	return strings.Replace(Module, `release = "v1"`, `release = "`+release+`"`, 1) + ConfigMapResources(release)
}

// SpokeObjects are a spoke's VariableSet and Workspace (in namespace default) for the region,
// the Workspace tracking source; unhealthy marks the region so that its plan fails.
func SpokeObjects(region string, source magosv1.Source, unhealthy bool) (*magosv1.VariableSet, *magosv1.Workspace) {
	healthy := strconv.FormatBool(!unhealthy)
	vs := &magosv1.VariableSet{
		ObjectMeta: metav1.ObjectMeta{Name: VariableSet, Namespace: corev1.NamespaceDefault},
		Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{
			{Name: "region", Value: &region},
			{Name: "healthy", Value: &healthy, HCL: true},
		}},
	}
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Name: Workspace, Namespace: corev1.NamespaceDefault,
			Labels: map[string]string{"env": "prod", "region": region}},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef:      magosv1.ProjectReference{Name: Project},
			Source:          source,
			Terraform:       magosv1.TerraformSpec{Version: TofuVersion},
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: VariableSet}},
		},
	}
	return vs, ws
}

// HubObjects are the hub's Project and its Rollout (in namespace default), one step a region
// in the order given, each selecting the Workspace labelled with its region.
func HubObjects(regions []string) (*magosv1.Project, *magosv1.Rollout) {
	var steps []magosv1.RolloutStep
	for _, name := range regions {
		steps = append(steps, magosv1.RolloutStep{Name: name,
			Selector: magosv1.MatchLabels(map[string]string{"env": "prod", "region": name})})
	}
	p := &magosv1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: Project, Namespace: corev1.NamespaceDefault},
		Spec:       magosv1.ProjectSpec{Description: "CDN edge, promoted region by region"},
	}
	ro := &magosv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: Project, Namespace: corev1.NamespaceDefault},
		Spec:       magosv1.RolloutSpec{ProjectRef: Project, Strategy: magosv1.RolloutStrategy{Steps: steps}},
	}
	return p, ro
}

// Create creates objs with c, in order; where ("on the hub", "in us-east-1") completes the
// error of the first that fails.
func Create(ctx context.Context, c client.Client, where string, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetName(), where, err)
		}
	}
	return nil
}
