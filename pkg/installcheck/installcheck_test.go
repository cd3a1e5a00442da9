package installcheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestHeld(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lease := func(holder string, renewed time.Time, secs int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "magos-system", Name: "leader"}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		if !renewed.IsZero() {
			l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
		}
		if secs != 0 {
			l.Spec.LeaseDurationSeconds = ptr.To(secs)
		}
		return l
	}
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		wantErr string
	}{
		{"held", lease("hub-0", now.Add(-5*time.Second), 15), ""},
		{"no holder", lease("", now, 15), "Lease magos-system/leader has no holder"},
		{"released", lease("hub-0", time.Time{}, 15), "was never renewed"},
		{"no duration", lease("hub-0", now, 0), "has no duration"},
		{"expired", lease("hub-0", now.Add(-15*time.Second), 15), "expired at 2026-01-02T03:04:05Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			holder, err := Held(tt.lease, now)
			if tt.wantErr == "" {
				if err != nil || holder != "hub-0" {
					t.Fatalf("Held = %q, %v; want hub-0", holder, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestUntil(t *testing.T) {
	calls := 0
	err := Until(context.Background(), time.Minute, func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, calls)
	}
	err = Until(context.Background(), 10*time.Millisecond, func(context.Context) error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "not ready after 10ms: never") {
		t.Fatalf("Until = %v, want the last error after the timeout", err)
	}
}
