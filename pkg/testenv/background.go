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
	halt := Go(ctx, start)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := halt(); err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Go runs start in the background on a child of ctx until the returned stop is called: stop
// cancels it, waits for it to return and returns its error (the same error on every call). It
// is Background for code without a test to report to: a TestMain (MainEnv.Background) or a
// tool.
func Go(ctx context.Context, start func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}
