// Package hubsync holds the tests of the agent's half of the hub protocol (package
// agent/hubsync) against a real hub: mirrors up, decisions down, the heartbeat and the agent's
// hub token. They live in the tools module, beside the other tests that run a hub and agents
// together, so that the agent's module does not depend on the hub's.
package hubsync
