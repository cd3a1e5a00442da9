package e2e_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// TestVerificationHaltsTheRollout: every step verifies its region after the apply, with an
// expression over the module's outputs and a check Job that reads them from its environment
// (run by the dev fleet's agents as a local process: the LocalLauncher's stand-in for the Job,
// which real kubelets run in make test-real). The check fails in the second region only: the
// first region is Applied with its verification Passed; the second applied (the ledger) and is
// Failed with reason VerificationFailed, the check's log in its run history; the Rollout halts
// at that step; and the third region never ran (the ledger, and no grant).
func TestVerificationHaltsTheRollout(t *testing.T) {
	f, ctx := start(t)
	ledger := t.TempDir() + "/ledger"
	bad := f.Order[1]
	check := &magosv1.StepVerification{
		Expression: `outputs.endpoint.startsWith("https://edge.")`,
		Job: &magosv1.VerificationJob{Image: "example.com/edge-check:1", Command: []string{"sh", "-c",
			`echo "checking $OUTPUT_ENDPOINT for $MAGOS_WORKSPACE"; case "$OUTPUT_ENDPOINT" in *` + bad + `*) echo "edge unhealthy"; exit 4;; esac`}},
	}
	var out bytes.Buffer
	s, err := demo.Run(ctx, f, demo.Options{Out: &out, Module: ledgerModule("v1", ledger), Verification: check})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if s.Completed || s.HaltedAt == "" {
		t.Fatalf("the Rollout completed (halted at %q) although %s's check fails:\n%s", s.HaltedAt, bad, s.Final)
	}
	if !slices.Contains(s.NeverGranted, f.Order[2]) {
		t.Errorf("never granted %v, want %s (after the halted step)", s.NeverGranted, f.Order[2])
	}

	first := workspace(t, ctx, f, f.Order[0])
	if first.Status.Phase != magosv1.PhaseApplied || first.Status.Verification == nil || first.Status.Verification.Result != magosv1.VerificationPassed {
		t.Errorf("%s: %s/%s, verification %+v; want Applied with its verification Passed", f.Order[0], first.Status.Phase, first.Status.Reason, first.Status.Verification)
	}
	failed := workspace(t, ctx, f, bad)
	if failed.Status.Phase != magosv1.PhaseFailed || failed.Status.Reason != magosv1.ReasonVerificationFailed ||
		!strings.Contains(failed.Status.Message, "code 4") || failed.Status.ObservedRevision != failed.Status.CurrentRevision {
		t.Fatalf("%s: %s/%s %q (observed %s, current %s); want Failed/VerificationFailed naming exit code 4, its commit applied",
			bad, failed.Status.Phase, failed.Status.Reason, failed.Status.Message, failed.Status.ObservedRevision, failed.Status.CurrentRevision)
	}
	if log := checkLog(t, ctx, f, bad, failed); !strings.Contains(log, "checking https://edge."+bad+".example.com for "+demoscenario.Workspace) || !strings.Contains(log, "edge unhealthy") {
		t.Errorf("%s: the check's log in the run history is %q, want the check's own lines", bad, log)
	}
	lines, err := readLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	var regions []string
	for _, l := range lines {
		regions = append(regions, l.Region)
	}
	if want := f.Order[:2]; !slices.Equal(regions, want) {
		t.Fatalf("the ledger's applies are %v, want %v: the first two regions once each, in order, and none after the failed check\n%s",
			regions, want, formatLedger(lines))
	}
}

// checkLog is the log of the verify operation of the Workspace's current run, from its run
// record's output Secret in the spoke.
func checkLog(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string, ws *magosv1.Workspace) string {
	t.Helper()
	out, err := runoutput.ReadOperation(ctx, f.Client(cluster), ws, ws.Status.CurrentRunID, runner.OperationVerify)
	if err != nil {
		t.Fatalf("%s: %v", cluster, err)
	}
	return out.Log
}
