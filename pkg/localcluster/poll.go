package localcluster

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Poll checks until check returns nil, and returns check's last error when timeout passes. It is
// apimachinery's wait.PollUntilContextTimeout (immediate first check, every PollInterval),
// keeping the check's own last error rather than a bare timeout (DefaultPollTimeout when
// timeout is not positive). The local fleet waits with it,
// and pkg/testenv's Eventually is it with a test.
func Poll(timeout time.Duration, check func() error) error {
	if timeout <= 0 {
		timeout = DefaultPollTimeout
	}
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), PollInterval, timeout, true,
		func(context.Context) (bool, error) {
			last = check()
			return last == nil, nil
		})
	if err != nil && last != nil {
		return last
	}
	return err
}

// PollInterval is how often Poll (and pkg/testenv's Eventually and Consistently) check.
const PollInterval = 100 * time.Millisecond

// DefaultPollTimeout is how long Poll waits when given no timeout. Generous: a fresh API server
// on a loaded 2-core machine answers slowly at first.
const DefaultPollTimeout = 60 * time.Second
