// Package testenv is the test side of pkg/localcluster: Start gives a test a fleet of real API
// servers that stops when the test ends, Main gives a package's tests one shared fleet (its
// TestMain), Background runs a manager for a test, and Eventually and Consistently are the one
// way tests here wait for something (never a sleep).
package testenv

import (
	"testing"
	"time"

	"github.com/magosfleet/magos/pkg/localcluster"
)

// DefaultTimeout is how long Eventually waits when given no timeout.
const DefaultTimeout = localcluster.DefaultPollTimeout

// Eventually polls check every 100ms until it returns nil, and fails the test with the last
// error when timeout (DefaultTimeout if zero) passes first. It is the one way tests here wait
// for something: never a sleep.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	if err := localcluster.Poll(orDefault(timeout), check); err != nil {
		t.Fatalf("condition not met within %s: %v", orDefault(timeout), err)
	}
}

// Consistently checks that check keeps returning nil for the whole duration, polling every
// 100ms, and fails the test the first time it does not.
func Consistently(t testing.TB, duration time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(duration)
	tick := time.NewTicker(localcluster.PollInterval)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("condition broken: %v", err)
		}
		<-tick.C
	}
}

func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTimeout
	}
	return d
}

// FreeAddress is localcluster.FreeAddress for a test: it fails the test when no port is free.
func FreeAddress(t testing.TB) string {
	t.Helper()
	addr, err := localcluster.FreeAddress()
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	return addr
}

// Start starts a fleet of local API servers for a test and stops it when the test ends. It
// fails the test when the API servers cannot be started.
func Start(t testing.TB, opts localcluster.Options) *localcluster.Fleet {
	t.Helper()
	f, err := localcluster.New(opts)
	if err != nil {
		t.Fatalf("starting test clusters: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping test clusters: %v", err)
		}
	})
	return f
}
