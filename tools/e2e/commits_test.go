package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// pollIntervals makes the later regions poll the repository more often than the earlier ones
// (the agent raises anything under 5s to 5s), so that a later region usually sees a new commit
// first: the condition under which a Workspace whose agent has not polled yet must not count as
// done for the new commit.
var pollIntervals = map[string]time.Duration{
	"us-east-1":  20 * time.Second,
	"eu-west-1":  10 * time.Second,
	"ap-south-1": 5 * time.Second,
}

// TestNewCommitsRollOutInStepOrder: after the Rollout completed, three new commits to the
// repository the Workspaces track, one at a time, each roll out region by region in step order,
// exactly once per region, although each agent detects a commit on its own poll and the later
// regions poll more often. The observer is the module itself: every apply of a new release
// appends a line to a ledger file, which checkLedger checks.
func TestNewCommitsRollOutInStepOrder(t *testing.T) {
	releases := []string{"v1", "v2", "v3", "v4"}
	f, ctx, ledger, _ := ledgerFleet(t, releases[0], pollIntervals)

	type timing struct {
		release    string
		first      string
		toFirst    time.Duration
		toLast     time.Duration
		applyOrder []string
	}
	var timings []timing
	for _, release := range releases[1:] {
		sha, err := demo.Commit(f, "edge module "+release, ledgerModule(release, ledger))
		if err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		t.Logf("committed %s as %s", release, sha)
		if err := waitRelease(t, ctx, f, ledger, release, sha); err != nil {
			t.Errorf("%s was not applied everywhere in time: %v", release, err)
			break
		}
		lines, err := readLedger(ledger)
		if err != nil {
			t.Fatal(err)
		}
		tm := timing{release: release}
		for _, l := range lines {
			if l.Release != release {
				continue
			}
			if tm.first == "" {
				tm.first, tm.toFirst = l.Region, l.At.Sub(committed)
			}
			tm.toLast = max(tm.toLast, l.At.Sub(committed))
			tm.applyOrder = append(tm.applyOrder, l.Region)
		}
		timings = append(timings, tm)
	}

	lines, err := readLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ledger (poll intervals us-east-1 %s, eu-west-1 %s, ap-south-1 %s):\n%s",
		pollIntervals["us-east-1"], pollIntervals["eu-west-1"], pollIntervals["ap-south-1"], formatLedger(lines))
	for _, tm := range timings {
		t.Logf("%s: applied in order %s; first apply (%s) %s after the commit, last %s after",
			tm.release, strings.Join(tm.applyOrder, " -> "), tm.first,
			tm.toFirst.Round(time.Millisecond), tm.toLast.Round(time.Millisecond))
	}
	for _, v := range checkLedger(lines, f.Order, releases[:1+len(timings)]) {
		t.Errorf("violation: %s", v)
	}
}

// waitRelease waits until every region's ledger line for release is written and every
// Workspace reports Applied at sha (so the next commit finds the fleet at rest).
func waitRelease(t *testing.T, ctx context.Context, f *devfleet.Fleet, ledger, release, sha string) error {
	t.Helper()
	return localcluster.Poll(2*time.Minute, func() error {
		lines, err := readLedger(ledger)
		if err != nil {
			return err
		}
		var missing []string
		for _, cluster := range f.Order {
			if !slices.ContainsFunc(lines, func(l ledgerLine) bool { return l.Region == cluster && l.Release == release }) {
				missing = append(missing, cluster)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no ledger line for %s from %s", release, strings.Join(missing, ", "))
		}
		for _, cluster := range f.Order {
			ws := workspace(t, ctx, f, cluster)
			if ws.Status.Phase != magosv1.PhaseApplied || ws.Status.ObservedRevision != sha {
				return fmt.Errorf("%s is %s at %s, want Applied at %s", cluster, ws.Status.Phase, ws.Status.ObservedRevision, sha)
			}
		}
		return nil
	})
}
