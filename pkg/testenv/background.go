package testenv

import (
	"context"
	"sync"
	"testing"
)

// Background runs start (a manager's or cluster's Start) in the background on a child of ctx,
// until the returned stop is called or the test ends, whichever comes first. stop cancels it,
// waits for it to return, and reports a returned error as a test error naming what; it may be
// called more than once.
func Background(t testing.TB, ctx context.Context, what string, start func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
