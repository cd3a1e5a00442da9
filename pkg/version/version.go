// Package version owns the release version of Magos' binaries and the version skew policy
// between the hub and its agents.
//
// Every binary carries one version, stamped at build time by the Makefile:
//
//	go build -ldflags "-X github.com/magosfleet/magos/pkg/version.version=v0.2.0" ...
//
// A build that is not stamped (go test, go run, a plain go build) reports DevVersion.
package version

import (
	"fmt"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// DevVersion is the version of a build that was not stamped.
const DevVersion = "v0.0.0-dev"

// version is set with -ldflags "-X github.com/magosfleet/magos/pkg/version.version=vX.Y.Z".
var version string

// Get returns this binary's version: a semantic version with a leading v.
func Get() string {
	if version == "" {
		return DevVersion
	}
	return version
}

// MaxMinorSkew is how many minor versions an agent may be older or newer than its hub.
const MaxMinorSkew = 1

// Compatible checks the skew policy: an agent and its hub must share the major version, and the
// agent's minor version may be at most MaxMinorSkew older or newer than the hub's. Pre-release
// and build suffixes are ignored (v0.2.0-rc.1 is minor 2). The error says why, in words that
// can be shown on the Cluster and in the agent's log.
func Compatible(hub, agent string) error {
	h, err := utilversion.ParseSemantic(hub)
	if err != nil {
		return fmt.Errorf("the hub's version %q is not a semantic version", hub)
	}
	if agent == "" {
		return fmt.Errorf("the agent reports no version; hub %s supports agents %s", hub, Supported(h))
	}
	a, err := utilversion.ParseSemantic(agent)
	if err != nil {
		return fmt.Errorf("the agent's version %q is not a semantic version; hub %s supports agents %s", agent, hub, Supported(h))
	}
	skew := int(a.Minor()) - int(h.Minor())
	if a.Major() != h.Major() || skew > MaxMinorSkew || skew < -MaxMinorSkew {
		return fmt.Errorf("agent %s is outside the supported version skew: hub %s supports agents %s", agent, hub, Supported(h))
	}
	return nil
}

// Supported describes the agent versions a hub of version h supports, as "v0.1.x to v0.3.x".
func Supported(h *utilversion.Version) string {
	lo := int(h.Minor()) - MaxMinorSkew
	if lo < 0 {
		lo = 0
	}
	return fmt.Sprintf("v%d.%d.x to v%d.%d.x", h.Major(), lo, h.Major(), int(h.Minor())+MaxMinorSkew)
}

// SupportedBy describes the agent versions a hub of version hub supports ("unknown" when hub is
// not a semantic version).
func SupportedBy(hub string) string {
	h, err := utilversion.ParseSemantic(hub)
	if err != nil {
		return "unknown"
	}
	return Supported(h)
}
