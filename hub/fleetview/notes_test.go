package fleetview_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/pkg/decision"
)

// TestGrantNotes: the Granted Events of a write pass name every grant once, in notes the API
// server accepts (at most 1 kB), one Event for a pass of a few grants.
func TestGrantNotes(t *testing.T) {
	grants := func(n int) []decision.Change {
		var cs []decision.Change
		for i := range n {
			cs = append(cs, decision.Change{Key: decision.Key{Cluster: fmt.Sprintf("cluster-%04d", i), Namespace: "payments", Name: "web"},
				Run: fmt.Sprintf("20261207T030000-%08x", i)})
		}
		return cs
	}
	for _, tc := range []struct {
		grants int
		want   []string // the notes, or only how many when nil
		notes  int
	}{
		{grants: 0, notes: 0},
		{grants: 1, want: []string{"Granted run 20261207T030000-00000000 to cluster-0000/payments/web"}},
		{grants: 2, want: []string{"Granted 2 runs: run 20261207T030000-00000000 to cluster-0000/payments/web, run 20261207T030000-00000001 to cluster-0001/payments/web"}},
		{grants: 15, notes: 1},
		{grants: 500, notes: 32},
	} {
		t.Run(fmt.Sprint(tc.grants), func(t *testing.T) {
			cs := grants(tc.grants)
			notes := fleetview.GrantNotes(cs)
			if tc.want != nil && strings.Join(notes, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("notes %q, want %q", notes, tc.want)
			}
			if tc.want == nil && len(notes) != tc.notes {
				t.Fatalf("%d notes for %d grants, want %d", len(notes), tc.grants, tc.notes)
			}
			all := strings.Join(notes, "\n")
			for _, n := range notes {
				if len(n) > 1000 {
					t.Fatalf("a note of %d bytes: %q", len(n), n)
				}
			}
			for _, c := range cs {
				if k := strings.Count(all, "run "+c.Run+" to "+c.Key.String()); k != 1 {
					t.Fatalf("grant %v named %d times in %q", c, k, notes)
				}
			}
		})
	}
	if got := fleetview.RevokeNotes(grants(2)); len(got) != 1 || got[0] != "Revoked 2 grants: cluster-0000/payments/web, cluster-0001/payments/web" {
		t.Fatalf("revocation notes %q", got)
	}
}
