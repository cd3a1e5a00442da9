package runner_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/runner"
)

// TestNewRunID: a run ID is upstream's YYYYMMDDTHHMMSS-<8 lowercase hex>, of the UTC time it was
// minted at, and two runs minted at the same instant get different IDs.
func TestNewRunID(t *testing.T) {
	format := regexp.MustCompile(`^\d{8}T\d{6}-[0-9a-f]{8}$`)
	now := time.Date(2026, 3, 1, 1, 2, 3, 456, time.FixedZone("CET", 3600))
	seen := map[string]bool{}
	for range 100 {
		id := runner.NewRunID(now)
		if !format.MatchString(id) {
			t.Fatalf("run ID %q is not YYYYMMDDTHHMMSS-<8 hex>", id)
		}
		if got := id[:15]; got != "20260301T000203" {
			t.Fatalf("run ID %q is not of %s in UTC", id, now)
		}
		if seen[id] {
			t.Fatalf("run ID %q minted twice", id)
		}
		seen[id] = true
	}
}
