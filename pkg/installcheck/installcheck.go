// Package installcheck holds what `helm test` checks of an installed hub or agent (the
// `magos-hub check` and `magos-agent check` commands): that a Lease is held and renewed, polled
// until a deadline.
package installcheck

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PollInterval is how often Until checks again.
const PollInterval = time.Second

// Held returns the holder of a Lease that is held and whose last renewal has not expired at now
// (renewed less than leaseDurationSeconds ago), or why it is not.
func Held(l *coordinationv1.Lease, now time.Time) (string, error) {
	name := l.Namespace + "/" + l.Name
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("Lease %s has no holder", name)
	}
	renewed := l.Spec.RenewTime
	if renewed == nil {
		renewed = l.Spec.AcquireTime
	}
	if renewed == nil {
		return "", fmt.Errorf("Lease %s held by %s was never renewed", name, *l.Spec.HolderIdentity)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return "", fmt.Errorf("Lease %s held by %s has no duration", name, *l.Spec.HolderIdentity)
	}
	expires := renewed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	if !now.Before(expires) {
		return "", fmt.Errorf("Lease %s held by %s expired at %s (last renewed %s)", name, *l.Spec.HolderIdentity,
			expires.UTC().Format(time.RFC3339), renewed.UTC().Format(time.RFC3339))
	}
	return *l.Spec.HolderIdentity, nil
}

// HeldLease reads the Lease namespace/name and returns its holder when it is held (Held).
func HeldLease(ctx context.Context, r client.Reader, namespace, name string) (string, error) {
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("no Lease %s/%s yet", namespace, name)
		}
		return "", fmt.Errorf("reading Lease %s/%s: %w", namespace, name, err)
	}
	return Held(l, time.Now())
}

// AttemptTimeout bounds one call of a check by Until.
const AttemptTimeout = 10 * time.Second

// Until calls check every PollInterval until it returns nil, and returns nil; when timeout
// passes first, it returns check's last error (when ctx ends, ctx's error). Each call gets at
// most AttemptTimeout.
func Until(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err := check(attempt)
		cancel()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
