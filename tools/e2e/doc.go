// Package e2e holds the end-to-end tests of Magos Fleet: a hub and three regional spokes on
// real API servers, the real magos-hub and magos-agent binaries, real OpenTofu runs, and the
// faults a fleet meets (a failing region, a hub crash, a silent agent) as well as its everyday
// changes (new commits to the repository the Workspaces track, checked by a ledger the module
// itself writes; the deletion of Workspaces a Rollout manages, whose destroys the module
// records too). TestChaos rolls commits out under a seeded random schedule of faults (see
// docs/chaos.md and make chaos).
package e2e
