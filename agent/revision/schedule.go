// Package revision watches the git refs Workspaces track and marks a Workspace with
// magosproject.io/detected-revision when its ref moves to a commit it has not run, together
// with magosproject.io/detected-at: when the poll saw it (RFC 3339 with nanoseconds, UTC, the
// watcher's clock), in the same patch. The hub orders commits reported by different agents by
// it. Whoever removes detected-revision removes detected-at with it.
//
// It polls each distinct (repository, ref, credentials) once per interval, however many
// Workspaces track it: the interval is the shortest magosproject.io/git-poll-interval of those
// Workspaces (default 30s), with jitter. Refs that are already commit SHAs are not polled.
// Polling runs only in the leader.
package revision

import (
	"container/heap"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Target is one thing to poll: a ref of a repository, read with the credentials of one
// Secret (Namespace/Secret empty for anonymous access).
type Target struct {
	RepoURL   string
	Ref       string
	Namespace string
	Secret    string
}

// Poll results, as magos_refwatcher_polls_total reports them.
const (
	ResultError     = "error"
	ResultSeeded    = "seeded"
	ResultUnchanged = "unchanged"
	ResultChanged   = "changed"
)

// MaxRetryDelay caps the wait after a failed poll.
const MaxRetryDelay = 30 * time.Second

type member struct {
	target   Target
	interval time.Duration
}

type entry struct {
	target   Target
	members  map[types.NamespacedName]time.Duration
	interval time.Duration
	next     time.Time
	polling  bool
	lastSHA  string
	index    int
}

// Schedule is the poll schedule: which Workspaces track which Target, and when each Target
// is polled next. It does no I/O and is safe for one goroutine at a time (the Watcher locks).
// Every Target has exactly one schedule entry, however its members come and go.
type Schedule struct {
	members map[types.NamespacedName]member
	targets map[Target]*entry
	queue   entryHeap
	// Jitter returns a number in [0, 1); rand.Float64 by default.
	Jitter func() float64
}

// NewSchedule returns an empty Schedule.
func NewSchedule() *Schedule {
	return &Schedule{members: map[types.NamespacedName]member{}, targets: map[Target]*entry{}, Jitter: rand.Float64}
}

// Len is the number of Targets.
func (g *Schedule) Len() int { return len(g.targets) }

// Members is the number of Workspaces tracked.
func (g *Schedule) Members() int { return len(g.members) }

// Upsert records that the Workspace key tracks target at interval. A new Target is first polled
// after a random part of its interval (spreading the load); a Workspace that moved to another
// Target gets that Target polled at once. It reports whether the schedule changed.
func (g *Schedule) Upsert(key types.NamespacedName, target Target, interval time.Duration, now time.Time) bool {
	moved := false
	if m, ok := g.members[key]; ok {
		if m.target == target {
			if m.interval == interval {
				return false
			}
			e := g.targets[target]
			e.members[key] = interval
			g.members[key] = member{target: target, interval: interval}
			g.retime(e, now)
			return true
		}
		g.Remove(key)
		moved = true
	}
	e, ok := g.targets[target]
	if !ok {
		e = &entry{target: target, members: map[types.NamespacedName]time.Duration{}, interval: interval}
		e.next = now.Add(time.Duration(g.Jitter() * float64(interval)))
		g.targets[target] = e
		heap.Push(&g.queue, e)
	}
	e.members[key] = interval
	g.members[key] = member{target: target, interval: interval}
	g.retime(e, now)
	if moved && !e.polling && e.next.After(now) {
		e.next = now
		heap.Fix(&g.queue, e.index)
	}
	return true
}

// retime sets the entry's interval to the shortest of its members' and brings its next poll
// forward when the interval got shorter.
func (g *Schedule) retime(e *entry, now time.Time) {
	shortest := shortestInterval(e)
	e.interval = shortest
	if limit := now.Add(shortest); !e.polling && e.next.After(limit) {
		e.next = limit
		heap.Fix(&g.queue, e.index)
	}
}

// Remove forgets the Workspace key; a Target left without members is dropped.
func (g *Schedule) Remove(key types.NamespacedName) bool {
	m, ok := g.members[key]
	if !ok {
		return false
	}
	delete(g.members, key)
	e := g.targets[m.target]
	delete(e.members, key)
	if len(e.members) == 0 {
		delete(g.targets, m.target)
		if e.index >= 0 {
			heap.Remove(&g.queue, e.index)
		}
		return true
	}
	e.interval = shortestInterval(e) // a longer interval applies from the next poll on
	return true
}

func shortestInterval(e *entry) time.Duration {
	shortest := time.Duration(0)
	for _, iv := range e.members {
		if shortest == 0 || iv < shortest {
			shortest = iv
		}
	}
	return shortest
}

// Due returns the Targets whose poll time came, and marks them as being polled (a Target is
// never polled twice at once). Done must follow for each.
func (g *Schedule) Due(now time.Time) []Target {
	var out []Target
	for g.queue.Len() > 0 {
		e := g.queue[0]
		if e.next.After(now) {
			break
		}
		heap.Pop(&g.queue)
		e.polling = true
		out = append(out, e.target)
	}
	return out
}

// Done records the outcome of a poll and schedules the next: one interval (+-10% jitter)
// later, or sooner after an error. It returns the Workspaces tracking the Target and the poll
// result (ResultSeeded, ResultUnchanged, ResultChanged or ResultError).
func (g *Schedule) Done(target Target, sha string, failed bool, now time.Time) ([]types.NamespacedName, string) {
	e, ok := g.targets[target]
	if !ok {
		return nil, ResultUnchanged // every member left while it was polled
	}
	e.polling = false
	result := ResultError
	if failed {
		e.next = now.Add(min(e.interval, MaxRetryDelay))
	} else {
		switch {
		case e.lastSHA == "":
			result = ResultSeeded
		case e.lastSHA == sha:
			result = ResultUnchanged
		default:
			result = ResultChanged
		}
		e.lastSHA = sha
		spread := (g.Jitter()*0.2 - 0.1) * float64(e.interval)
		e.next = now.Add(e.interval + time.Duration(spread))
	}
	heap.Push(&g.queue, e)
	keys := make([]types.NamespacedName, 0, len(e.members))
	for k := range e.members {
		keys = append(keys, k)
	}
	return keys, result
}

// Retry brings the Target's next poll to at most MaxRetryDelay from now (a Workspace could
// not be marked).
func (g *Schedule) Retry(target Target, now time.Time) {
	e, ok := g.targets[target]
	if !ok || e.polling {
		return
	}
	if limit := now.Add(min(e.interval, MaxRetryDelay)); e.next.After(limit) {
		e.next = limit
		heap.Fix(&g.queue, e.index)
	}
}

// Next is when the next poll is due (false when nothing is scheduled).
func (g *Schedule) Next() (time.Time, bool) {
	if g.queue.Len() == 0 {
		return time.Time{}, false
	}
	return g.queue[0].next, true
}

// Scheduled is the number of schedule entries (for tests: always Len minus Targets being
// polled).
func (g *Schedule) Scheduled() int { return g.queue.Len() }

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
