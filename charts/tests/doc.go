// Package tests renders, lints and installs the Helm charts magos-hub and magos-agent. It is a
// module of its own, outside go.work, so that Helm's dependencies never reach the binaries.
package tests
