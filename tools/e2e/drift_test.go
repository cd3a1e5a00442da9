package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// driftModule is ledgerModule (the observer every apply of a new release appends to) plus the
// drift demo's ConfigMap in the region's own cluster, managed by the real kubectl provider.
func driftModule(ledger string) func(release string) string {
	return func(release string) string {
		return ledgerModule(release, ledger) + demoscenario.ConfigMapResources(release)
	}
}

// configMapRelease reads the release the region's ConfigMap says, as kubectl would.
func configMapRelease(ctx context.Context, f *devfleet.Fleet, cluster string) (string, error) {
	var cm corev1.ConfigMap
	if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demoscenario.ConfigMap}, &cm); err != nil {
		return "", err
	}
	return cm.Data["release"], nil
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
	var out bytes.Buffer
	s, err := demo.RunDrift(ctx, f, demo.DriftOptions{Options: demo.Options{Out: &out}, Module: driftModule(ledger),
		WhileHeld: func(ctx context.Context, drifted, sha string) error {
			if got := workspace(t, ctx, f, f.Order[0]).Status.ObservedRevision; got != sha {
				return fmt.Errorf("%s applied %s while the step of %s holds, want v2 %s", f.Order[0], shortRev(got), drifted, shortRev(sha))
			}
			// It keeps holding: nothing of v2 reaches the later regions while the drift stands,
			// and the hand edit stays.
			held := time.Now()
			for time.Since(held) < 15*time.Second {
				for _, cluster := range f.Order[1:] {
					if got := workspace(t, ctx, f, cluster).Status.CurrentRevision; got == sha {
						return fmt.Errorf("%s runs v2 (%s) while the drift of %s blocks its step", cluster, shortRev(sha), drifted)
					}
				}
				if got, err := configMapRelease(ctx, f, drifted); err != nil || got != "edited-by-hand" {
					return fmt.Errorf("%s's ConfigMap says %q (%v) while its step holds, want the hand edit", drifted, got, err)
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				time.Sleep(time.Second) // an observation interval, not a synchronisation
			}
			return nil
		}})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Held, s.Region) {
		t.Errorf("the Rollout held with %q, which does not name %s", s.Held, s.Region)
	}
	if !s.Final.Completed {
		t.Fatalf("v2 did not complete after the drift was accepted:\n%s", s.Final.Final)
	}
	if err := waitRelease(t, ctx, f, ledger, "v2", s.Commit); err != nil {
		t.Fatalf("v2 did not reach every region after the drift was accepted: %v", err)
	}
	checkLedgerFile(t, ledger, f.Order, []string{"v1", "v2"})
	for _, cluster := range f.Order {
		if got, err := configMapRelease(ctx, f, cluster); err != nil || got != "v2" {
			t.Errorf("%s: ConfigMap release %q (%v), want v2 applied by the kubectl provider", cluster, got, err)
		}
	}
}
