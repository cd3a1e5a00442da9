package hubsync

import (
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/magosfleet/magos/pkg/version"
)

// skewRecheck is how soon a decision withheld under a hub outside the skew policy is looked at
// again.
const skewRecheck = 10 * time.Second

// skewCheck is the version skew policy (pkg/version) as the agent applies it from its side,
// against the hub's version the hub writes on the agent's Lease (keys.HubVersion): the heartbeat
// updates it at each renewal, the syncer reads it before it carries a decision down. A hub that
// writes no version (none has yet judged the Lease) is not refused: the hub refuses skewed
// agents itself.
type skewCheck struct {
	// own is the agent's version.
	own string

	mu  sync.Mutex
	hub string
	err error
}

// observe records the hub's version read from the Lease, and logs when the verdict changes.
func (s *skewCheck) observe(log logr.Logger, hub string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hub == s.hub {
		return
	}
	var err error
	if hub != "" {
		err = version.Compatible(hub, s.own)
	}
	switch {
	case err != nil:
		log.Error(err, "the hub's version is outside the version skew policy: no grant is carried down until the hub or this agent is upgraded (docs/operations.md, version skew)", "hubVersion", hub, "agentVersion", s.own)
	case s.err != nil:
		log.Info("the hub's version is within the version skew policy again", "hubVersion", hub, "agentVersion", s.own)
	}
	s.hub, s.err = hub, err
}

// refused returns why the agent refuses the hub's decisions, or nil.
func (s *skewCheck) refused() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
