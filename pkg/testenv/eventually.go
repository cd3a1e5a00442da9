package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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

// Poll is Eventually without a test: it returns the last error when timeout passes. It is
// apimachinery's wait.PollUntilContextTimeout (immediate first check, every 100ms), keeping the
// check's own last error rather than a bare timeout.
func Poll(timeout time.Duration, check func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, orDefault(timeout), true,
		func(context.Context) (bool, error) {
			last = check()
			return last == nil, nil
		})
	if err != nil && last != nil {
		return last
	}
	return err
}

// pollInterval is how often Poll, Eventually and Consistently check.
const pollInterval = 100 * time.Millisecond

// Consistently checks that check keeps returning nil for the whole duration, polling every
// 100ms, and fails the test the first time it does not.
func Consistently(t testing.TB, duration time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(duration)
	tick := time.NewTicker(pollInterval)
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
