package testenv

import (
	"testing"
	"time"
)

// DefaultTimeout is how long Eventually waits when given no timeout. Generous: a fresh API
// server on a loaded 2-core machine answers slowly at first.
const DefaultTimeout = 60 * time.Second

// Eventually polls check every 100ms until it returns nil, and fails the test with the last
// error when timeout (DefaultTimeout if zero) passes first. It is the one way tests here wait
// for something: never a sleep.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	if err := Poll(timeout, check); err != nil {
		t.Fatalf("condition not met within %s: %v", orDefault(timeout), err)
	}
}

// Poll is Eventually without a test: it returns the last error when timeout passes.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(orDefault(timeout))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
}

// Consistently checks that check keeps returning nil for the whole duration, polling every
// 100ms, and fails the test the first time it does not.
func Consistently(t testing.TB, duration time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(duration)
	tick := time.NewTicker(100 * time.Millisecond)
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
