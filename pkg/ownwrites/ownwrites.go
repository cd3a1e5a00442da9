// Package ownwrites remembers, for each object a controller writes, the versions a cache that
// does not show the controller's last write yet may still hold. A controller reads from a cache
// that follows the API server a moment behind; deciding or writing again on a read from before
// its own write would send that write a second time (or, on a version-locked write, have it
// refused) and, for the hub's fleet controllers, record the Events of a transition twice. Both
// the hub's fleet controllers (hub/decider) and the agent's mirror syncer (agent/hubsync) ask it.
package ownwrites

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultMaxAge is how long a write is remembered when Tracker.MaxAge is not set: a cache that
// has not shown a write after that long is not waited for any more.
const DefaultMaxAge = 30 * time.Second

// Tracker remembers each object's last write. The zero value is ready to use; it is safe for
// concurrent use.
type Tracker struct {
	// MaxAge bounds how long a write is remembered (DefaultMaxAge when 0), so that a write the
	// cache never shows (an object deleted and made again meanwhile) holds nothing up for long.
	MaxAge time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu      sync.Mutex
	written map[types.NamespacedName]entry
}

type entry struct {
	before []string
	at     time.Time
}

// Wrote records that the object key was written: before are the resourceVersions it had when
// read and between the writes, after the version the last write left. A version equal to after
// is not recorded (a write that changed nothing leaves no event to wait for), so a write that
// changed nothing records nothing.
func (t *Tracker) Wrote(key types.NamespacedName, after string, before ...string) {
	before = slices.DeleteFunc(slices.Clone(before), func(v string) bool { return v == "" || v == after })
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(before) == 0 {
		delete(t.written, key)
		return
	}
	if t.written == nil {
		t.written = map[types.NamespacedName]entry{}
	}
	t.written[key] = entry{before: before, at: t.now()}
}

// Behind reports whether a read of the object key at resourceVersion version comes from before
// its last recorded write, within MaxAge of it.
func (t *Tracker) Behind(key types.NamespacedName, version string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.written[key]
	if !ok {
		return false
	}
	maxAge := t.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	if t.now().Sub(e.at) > maxAge {
		delete(t.written, key)
		return false
	}
	return slices.Contains(e.before, version)
}

// Forget drops what is remembered of the object key (it is gone).
func (t *Tracker) Forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.written, key)
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}
