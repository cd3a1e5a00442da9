package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// driftConfigMap is the ConfigMap driftModule manages in each region's cluster, through the
// real kubectl provider from the runner's provider mirror.
const driftConfigMap = "cdn-edge"

// driftModule is ledgerModule (the observer every apply of a new release appends to) plus a
// ConfigMap in the region's own cluster, managed by the kubectl provider: an object anyone can
// change behind tofu's back with kubectl.
func driftModule(release, ledger string) string {
	return ledgerModule(release, ledger) + strings.NewReplacer("@RELEASE@", release, "@NAME@", driftConfigMap).Replace(`
terraform {
  required_providers {
    kubectl = {
      source  = "gavinbunney/kubectl"
      version = "1.19.0"
    }
  }
}

provider "kubectl" {}

resource "kubectl_manifest" "edge" {
  yaml_body = yamlencode({
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata   = { name = "@NAME@", namespace = "default" }
    data       = { region = var.region, release = "@RELEASE@" }
  })
}
`)
}

// configMapRelease reads the release the region's ConfigMap says, as kubectl would.
func configMapRelease(ctx context.Context, f *devfleet.Fleet, cluster string) (string, error) {
	var cm corev1.ConfigMap
	if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: driftConfigMap}, &cm); err != nil {
		return "", err
	}
	return cm.Data["release"], nil
}

// waitDrift waits until the Workspace of cluster reports drift result want at the commit it
// applied, on the spoke and on its hub mirror.
func waitDrift(ctx context.Context, f *devfleet.Fleet, cluster, want string) error {
	return localcluster.Poll(3*time.Minute, func() error {
		var ws magosv1.Workspace
		if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &ws); err != nil {
			return err
		}
		d := ws.Status.Drift
		if d == nil || d.Result != want || d.Revision != ws.Status.ObservedRevision || d.CheckingRunID != "" {
			return fmt.Errorf("%s: drift %+v at applied %s, want %s", cluster, d, shortRev(ws.Status.ObservedRevision), want)
		}
		var m magosv1.Workspace
		if err := f.Client("hub").Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name(corev1.NamespaceDefault, demo.Workspace)}, &m); err != nil {
			return err
		}
		if md := m.Status.Drift; md == nil || md.Result != want || md.RunID != d.RunID {
			return fmt.Errorf("%s: the hub's mirror shows drift %+v, want %s of check %s", cluster, md, want, d.RunID)
		}
		return nil
	})
}

// TestDriftBlocksAStep: three regions apply a module that manages a ConfigMap in each region's
// cluster through the real kubectl provider, every Workspace checks for drift, and every step's
// drift is block. Someone edits eu-west-1's ConfigMap by hand: its check reports Drifted, on the
// spoke and on the hub. A new release then applies in us-east-1 and stops before eu-west-1,
// whose step waits with reason DriftDetected naming it, while its ConfigMap keeps the hand edit.
// Once the drift is accepted (magosctl rollout accept-drift), the release goes on in step order,
// once per region (the ledger), and every ConfigMap says the new release.
func TestDriftBlocksAStep(t *testing.T) {
	f, ctx := start(t)
	ledger := t.TempDir() + "/ledger"
	s, err := demo.Run(ctx, f, demo.Options{Module: driftModule("v1", ledger), DriftInterval: time.Hour, StepDrift: magosv1.DriftBlock})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Completed {
		t.Fatalf("the first release did not complete:\n%s", s.Final)
	}
	for _, cluster := range f.Order {
		if got, err := configMapRelease(ctx, f, cluster); err != nil || got != "v1" {
			t.Fatalf("%s: ConfigMap release %q (%v), want v1 applied by the kubectl provider", cluster, got, err)
		}
		if err := waitDrift(ctx, f, cluster, magosv1.DriftResultNone); err != nil {
			t.Fatal(err)
		}
	}

	// Someone edits eu-west-1's ConfigMap by hand, and asks for a check.
	drifted := f.Order[1]
	var cm corev1.ConfigMap
	if err := f.Client(drifted).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: driftConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["release"] = "edited-by-hand"
	if err := f.Client(drifted).Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	ws := workspace(t, ctx, f, drifted)
	patch := client.MergeFrom(ws.DeepCopy())
	if ws.Annotations == nil {
		ws.Annotations = map[string]string{}
	}
	ws.Annotations[keys.CheckDrift] = "now"
	if err := f.Client(drifted).Patch(ctx, ws, patch); err != nil {
		t.Fatal(err)
	}
	if err := waitDrift(ctx, f, drifted, magosv1.DriftResultDrifted); err != nil {
		t.Fatal(err)
	}

	// A new release: us-east-1 applies it, eu-west-1's step holds.
	sha, err := demo.Commit(f, "edge module v2", driftModule("v2", ledger))
	if err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(3*time.Minute, func() error {
		r := rolloutOf(t, ctx, f)
		if r.Status.Reason != magosv1.ReasonDriftDetected || !strings.Contains(r.Status.Message, drifted) {
			return fmt.Errorf("rollout %s/%s: %s, want %s naming %s", r.Status.Phase, r.Status.Reason, r.Status.Message, magosv1.ReasonDriftDetected, drifted)
		}
		if got := workspace(t, ctx, f, f.Order[0]).Status.ObservedRevision; got != sha {
			return fmt.Errorf("%s applied %s, want %s", f.Order[0], shortRev(got), shortRev(sha))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the drifted step did not hold: %v", err)
	}
	// It keeps holding: nothing of v2 reaches eu-west-1 or ap-south-1 while the drift stands.
	held := time.Now()
	for time.Since(held) < 15*time.Second {
		for _, cluster := range f.Order[1:] {
			if got := workspace(t, ctx, f, cluster).Status.CurrentRevision; got == sha {
				t.Fatalf("%s runs v2 (%s) while %s's drift blocks its step", cluster, shortRev(sha), drifted)
			}
		}
		if got, err := configMapRelease(ctx, f, drifted); err != nil || got != "edited-by-hand" {
			t.Fatalf("%s's ConfigMap says %q (%v) while its step is blocked, want the hand edit", drifted, got, err)
		}
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // an observation interval, not a synchronisation
	}

	acceptDrift(t, ctx, f, drifted)
	if err := waitRelease(t, ctx, f, ledger, "v2", sha); err != nil {
		t.Fatalf("v2 did not reach every region after the drift was accepted: %v", err)
	}
	checkLedgerFile(t, ledger, f.Order, []string{"v1", "v2"})
	for _, cluster := range f.Order {
		if got, err := configMapRelease(ctx, f, cluster); err != nil || got != "v2" {
			t.Errorf("%s: ConfigMap release %q (%v), want v2", cluster, got, err)
		}
	}
}

// acceptDrift accepts the drift of the cluster's demo Workspace as a person would, with
// magosctl rollout accept-drift on the hub.
func acceptDrift(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string) {
	t.Helper()
	magosctl(t, ctx, f, "hub", "rollout", "accept-drift", demo.Project, "--workspace", cluster+"/"+corev1.NamespaceDefault+"/"+demo.Workspace)
}
