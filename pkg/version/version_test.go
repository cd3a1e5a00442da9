package version

import (
	"strings"
	"testing"
)

func TestCompatible(t *testing.T) {
	for _, tc := range []struct {
		hub, agent string
		refused    string // a part of the error; "" when compatible
	}{
		{hub: "v0.2.0", agent: "v0.2.0"},
		{hub: "v0.2.0", agent: "v0.1.0"},
		{hub: "v0.2.0", agent: "v0.3.5"},
		{hub: "v0.2.0", agent: "v0.2.1-rc.1"},
		{hub: "v0.2.0-dev", agent: "v0.1.0"},
		{hub: "v0.1.0", agent: "v0.0.0-dev"},
		{hub: "v1.4.2", agent: "v1.3.0+build.7"},
		{hub: "v0.2.0", agent: "v0.4.0", refused: "agent v0.4.0 is outside the supported version skew: hub v0.2.0 supports agents v0.1.x to v0.3.x"},
		{hub: "v0.3.0", agent: "v0.1.9", refused: "hub v0.3.0 supports agents v0.2.x to v0.4.x"},
		{hub: "v1.0.0", agent: "v0.9.0", refused: "outside the supported version skew"},
		{hub: "v0.0.0-dev", agent: "v0.2.0", refused: "hub v0.0.0-dev supports agents v0.0.x to v0.1.x"},
		{hub: "v0.2.0", agent: "", refused: "the agent reports no version"},
		{hub: "v0.2.0", agent: "scalebench", refused: `the agent's version "scalebench" is not a semantic version`},
		{hub: "main", agent: "v0.2.0", refused: `the hub's version "main" is not a semantic version`},
	} {
		err := Compatible(tc.hub, tc.agent)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("hub %s, agent %s: refused: %v", tc.hub, tc.agent, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("hub %s, agent %s: got %v, want an error with %q", tc.hub, tc.agent, err, tc.refused)
		}
	}
}

func TestGet(t *testing.T) {
	if got := Get(); got != DevVersion {
		t.Fatalf("an unstamped build reports %q, want %q", got, DevVersion)
	}
	version = "v0.3.1"
	defer func() { version = "" }()
	if got := Get(); got != "v0.3.1" {
		t.Fatalf("a stamped build reports %q", got)
	}
}
