package e2e_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
	"github.com/magosfleet/magos/tools/demo"
)

// releaseModule is ledgerModule with the release as an output, which a verification can read.
func releaseModule(ledger string) func(release string) string {
	return func(release string) string {
		return ledgerModule(release, ledger) + "\noutput \"release\" {\n  value = local.release\n}\n"
	}
}

// ledgerRegions is the ledger as "<release> <region>" lines, in the order of the applies.
func ledgerRegions(t *testing.T, ledger string) []string {
	t.Helper()
	lines, err := readLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Release + " " + l.Region
	}
	return out
}

// applies is "<release> <region>" for each region, in order.
func applies(release string, regions []string) []string {
	out := make([]string, len(regions))
	for i, r := range regions {
		out[i] = release + " " + r
	}
	return out
}

// TestRollbackInReverseOrder: releases v1 and v2 roll out region by region over a hub and three
// spokes; then magosctl rollout rollback rolls v1 back out, last region first. The module's
// ledger, written by the applies themselves, shows v1 and v2 in step order, then v1 once per
// region in reverse step order, and nothing else; every Workspace is back at v1's commit.
func TestRollbackInReverseOrder(t *testing.T) {
	f, ctx := start(t)
	ledger := t.TempDir() + "/ledger"
	var out bytes.Buffer
	s, err := demo.RunRollback(ctx, f, demo.RollbackOptions{Options: demo.Options{Out: &out}, Module: releaseModule(ledger)})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(applies("v1", f.Order), applies("v2", f.Order), applies("v1", reversedRegions(f.Order)))
	if got := ledgerRegions(t, ledger); !slices.Equal(got, want) {
		t.Fatalf("the ledger's applies are\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, cluster := range f.Order {
		if ws := workspace(t, ctx, f, cluster); ws.Status.ObservedRevision != s.To || ws.Status.ObservedRevision == s.From {
			t.Errorf("%s is at %s, want v1 (%s)", cluster, shortRev(ws.Status.ObservedRevision), shortRev(s.To))
		}
	}
}

// TestOnFailureRollsBack: release v2 fails the demo's smoke test (demo.SmokeCheck, the check Job
// make demo DEMO_FLAGS=--rollback runs) in the second region, and the
// Rollout's onFailure is Rollback: the hub writes spec.rollback itself, and v1 goes back out to
// the regions that applied v2, last first. The ledger shows v1 in step order, v2 in the first
// two regions, then v1 in the second and the first: the third region never ran v2 (the failed
// check halted the Rollout at the second); the failed check's log and exit code are in the run
// history, and the rollback's runs passed the same checks.
func TestOnFailureRollsBack(t *testing.T) {
	f, ctx := start(t)
	ledger := t.TempDir() + "/ledger"
	bad := f.Order[1]
	var out bytes.Buffer
	s, err := demo.RunRollback(ctx, f, demo.RollbackOptions{
		Options: demo.Options{Out: &out, Verification: demo.SmokeCheck(bad)},
		Module:  releaseModule(ledger), OnFailure: true})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Failed, bad) {
		t.Errorf("the rollback's reason %q does not name %s, whose check failed", s.Failed, bad)
	}
	want := slices.Concat(applies("v1", f.Order), applies("v2", f.Order[:2]), applies("v1", reversedRegions(f.Order[:2])))
	if got := ledgerRegions(t, ledger); !slices.Equal(got, want) {
		t.Fatalf("the ledger's applies are\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, cluster := range f.Order {
		if ws := workspace(t, ctx, f, cluster); ws.Status.ObservedRevision != s.To {
			t.Errorf("%s is at %s, want v1 (%s)", cluster, shortRev(ws.Status.ObservedRevision), shortRev(s.To))
		}
	}
	// The failed check's log is in the run history of the run that applied v2 in the bad region.
	ws := workspace(t, ctx, f, bad)
	var v2Run string
	for _, rec := range ws.Status.Runs {
		if rec.Revision == s.From && rec.Reason == magosv1.ReasonVerificationFailed {
			v2Run = rec.RunID
		}
	}
	if v2Run == "" {
		t.Fatalf("%s records no run of v2 that failed its verification: %+v", bad, ws.Status.Runs)
	}
	log, err := runoutput.ReadOperation(ctx, f.Client(bad), ws, v2Run, runner.OperationVerify)
	if err != nil || !strings.Contains(log.Log, "smoke test of https://edge."+bad+".example.com, release v2") || !strings.Contains(log.Log, "unhealthy") {
		t.Errorf("%s: the failed check's log in the run history: %q, %v; want the smoke test's own lines", bad, log.Log, err)
	}
	if i := slices.IndexFunc(ws.Status.Runs, func(r magosv1.RunRecord) bool { return r.RunID == v2Run }); !strings.Contains(ws.Status.Runs[i].Message, "the check exited with code 1") {
		t.Errorf("%s: the failed run's record says %q, want the check's exit code", bad, ws.Status.Runs[i].Message)
	}
	// The rollback went through the same checks: every region's last run passed them.
	for _, cluster := range f.Order {
		if v := workspace(t, ctx, f, cluster).Status.Verification; v == nil || v.Result != magosv1.VerificationPassed {
			t.Errorf("%s: verification %+v, want the last run's checks Passed", cluster, v)
		}
	}
}

func reversedRegions(xs []string) []string {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}
