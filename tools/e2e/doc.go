// Package e2e holds the end-to-end tests of Magos Fleet: a hub and three regional spokes on
// real API servers, the real magos-hub and magos-agent binaries, real OpenTofu runs, and the
// faults a fleet meets (a failing region, a hub crash, a silent agent).
package e2e
