package hubsync

import (
	"sync"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// progressHold holds a run's progress back from the hub for a while: want's phase runs
// (Planning, Applying, Verifying) for the run the mirror already shows, Pending (granted, as far
// as the hub knows) or running. Such a status waits until the spoke has shown that run in that
// phase for the hold, so a phase that passes sooner costs no write. The hub loses nothing it
// acts on: it grants a run it saw Pending, and the agent keeps a run that started whatever the
// hub writes after (a revocation of a run the hub still sees Pending is ignored once it runs,
// as it would be a moment later); what ends a run (Applied, Failed), what waits for the hub
// (Planned, a new run Pending) and what leaves (Deleting) is written at once.
type progressHold struct {
	// hold is Options.ProgressHold (0 or less: nothing is held); now the clock of the holds.
	hold time.Duration
	now  func() time.Time
	// held remembers, by mirror name, the progress held back (a heldProgress).
	held sync.Map
}

// heldProgress is a status held back: the run and phase, and since when the spoke shows them.
type heldProgress struct {
	mark  string
	since time.Time
}

// mark returns what a held status of want is remembered by, and whether want's status over
// the mirror m's is a run's progress, which may be held.
func (p *progressHold) mark(m, want *magosv1.Workspace) (string, bool) {
	run := want.Status.CurrentRunID
	have := magosv1.InfoOf(m.Status.Phase, m.Status.Reason)
	if p == nil || p.hold <= 0 || run == "" || m.Status.CurrentRunID != run || !want.Status.Phase.Running() ||
		!(have.Running || have.AwaitsGrant && m.Status.Phase == magosv1.PhasePending) {
		return "", false
	}
	return run + "/" + string(want.Status.Phase), true
}

// wait returns how much longer the desired status want waits before it is written over the
// mirror m's (0: write it now), and starts its hold at its first sight.
func (p *progressHold) wait(m, want *magosv1.Workspace) time.Duration {
	mark, ok := p.mark(m, want)
	if !ok {
		return 0
	}
	now := p.now()
	h := heldProgress{mark: mark, since: now}
	if v, ok := p.held.Load(m.Name); ok && v.(heldProgress).mark == mark {
		h = v.(heldProgress)
	} else {
		p.held.Store(m.Name, h)
	}
	return max(h.since.Add(p.hold).Sub(now), 0)
}

// holding reports whether want's status is held back from the mirror m now: the syncer saw it
// and its hold has not ended. Such a mirror is as in sync as the syncer means it to be.
func (p *progressHold) holding(m, want *magosv1.Workspace) bool {
	mark, ok := p.mark(m, want)
	if !ok {
		return false
	}
	v, ok := p.held.Load(m.Name)
	return ok && v.(heldProgress).mark == mark && p.now().Before(v.(heldProgress).since.Add(p.hold))
}

// forget drops what is held for the mirror name (written, in sync, or deleted).
func (p *progressHold) forget(name string) {
	if p != nil {
		p.held.Delete(name)
	}
}
