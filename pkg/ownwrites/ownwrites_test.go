package ownwrites

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestTracker is the table of what a read at a version says after writes: behind while it is
// a version the object had before the last write, never for the version the write left, and
// never once the write is older than MaxAge, forgotten, or changed nothing.
func TestTracker(t *testing.T) {
	key := types.NamespacedName{Namespace: "magos-cluster-eu", Name: "default.web"}
	other := types.NamespacedName{Namespace: "magos-cluster-eu", Name: "default.api"}
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		write   func(*Tracker)
		key     types.NamespacedName
		version string
		later   time.Duration
		behind  bool
	}{
		{"nothing written", func(*Tracker) {}, key, "10", 0, false},
		{"the version read before the write", func(t *Tracker) { t.Wrote(key, "11", "10") }, key, "10", 0, true},
		{"the version the write left", func(t *Tracker) { t.Wrote(key, "11", "10") }, key, "11", 0, false},
		{"a newer version", func(t *Tracker) { t.Wrote(key, "11", "10") }, key, "12", 0, false},
		{"another object", func(t *Tracker) { t.Wrote(key, "11", "10") }, other, "10", 0, false},
		{"between two writes of one pass", func(t *Tracker) { t.Wrote(key, "12", "10", "11") }, key, "11", 0, true},
		{"a write that changed nothing", func(t *Tracker) { t.Wrote(key, "10", "10") }, key, "10", 0, false},
		{"a later write that changed nothing", func(t *Tracker) { t.Wrote(key, "11", "10"); t.Wrote(key, "11", "11") }, key, "10", 0, false},
		{"older than MaxAge", func(t *Tracker) { t.Wrote(key, "11", "10") }, key, "10", DefaultMaxAge + time.Second, false},
		{"just within MaxAge", func(t *Tracker) { t.Wrote(key, "11", "10") }, key, "10", DefaultMaxAge, true},
		{"forgotten", func(t *Tracker) { t.Wrote(key, "11", "10"); t.Forget(key) }, key, "10", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := now
			tr := &Tracker{Now: func() time.Time { return at }}
			tc.write(tr)
			at = at.Add(tc.later)
			if got := tr.Behind(tc.key, tc.version); got != tc.behind {
				t.Errorf("Behind(%s, %s) = %v, want %v", tc.key, tc.version, got, tc.behind)
			}
		})
	}
}
