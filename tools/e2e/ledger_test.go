package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// ledgerModule is a version of the demo's root module that records each of its applies in a
// ledger file, an observer independent of Magos: a terraform_data resource replaced whenever the
// release changes, whose local-exec provisioner (run by tofu on this machine, as the local runner
// runs tofu as a child process) appends the line "<region> <release> <unix-nanos>" to the file
// at the absolute path ledger. Nothing else writes or prunes the file, so it holds one line per
// apply of a new release, in the order they happened. The module declares the variables the
// demo's VariableSet sets (region, healthy).
func ledgerModule(release, ledger string) string {
	return strings.NewReplacer("@RELEASE@", release, "@LEDGER@", ledger).Replace(`variable "region" {
  type = string
}

variable "healthy" {
  type    = bool
  default = true
}

# The file every apply of a new release appends to: the test's observer.
variable "ledger" {
  type    = string
  default = "@LEDGER@"
}

locals {
  release = "@RELEASE@"
}

resource "terraform_data" "edge" {
  input = {
    region  = var.region
    release = local.release
  }
}

# Replaced, so its provisioner runs, exactly when the release changes.
resource "terraform_data" "ledger" {
  triggers_replace = [local.release]

  provisioner "local-exec" {
    command = "printf '%s %s %s\n' \"$REGION\" \"$RELEASE\" \"$(date +%s%N)\" >> \"$LEDGER\""
    environment = {
      REGION  = var.region
      RELEASE = local.release
      LEDGER  = var.ledger
    }
  }
}

output "endpoint" {
  value = "https://edge.${var.region}.example.com"
}
`)
}

// ledgerFleet starts a fleet, rolls the demo out with the ledger module at release (polls sets
// each spoke's git poll interval), and waits until every region applied it. It returns the
// ledger file and the release's commit.
func ledgerFleet(t *testing.T, release string, polls map[string]time.Duration) (*devfleet.Fleet, context.Context, string, string) {
	t.Helper()
	f, ctx := start(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	s, err := demo.Run(ctx, f, demo.Options{Module: ledgerModule(release, ledger), PollIntervals: polls})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Completed {
		t.Fatalf("rollout did not complete:\n%s", s.Final)
	}
	head := workspace(t, ctx, f, f.Order[0]).Status.ObservedRevision
	if err := waitRelease(t, ctx, f, ledger, release, head); err != nil {
		t.Fatalf("the first release: %v", err)
	}
	return f, ctx, ledger, head
}

// formatLedger renders ledger lines for a test's log, one apply a line.
func formatLedger(lines []ledgerLine) string {
	var text strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&text, "  %-10s %s %s\n", l.Region, l.Release, l.At.Format("15:04:05.000"))
	}
	return text.String()
}

// ledgerLine is one apply recorded in the ledger.
type ledgerLine struct {
	Region, Release string
	At              time.Time
}

// readLedger reads the ledger file (no file yet: no applies).
func readLedger(path string) ([]ledgerLine, error) {
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the ledger: %w", err)
	}
	return parseLedger(raw)
}

// parseLedger parses ledger lines "<region> <release> <unix-nanos>".
func parseLedger(raw []byte) ([]ledgerLine, error) {
	var out []ledgerLine
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			return nil, fmt.Errorf("ledger line %d %q: want <region> <release> <unix-nanos>", n, sc.Text())
		}
		nanos, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ledger line %d %q: %w", n, sc.Text(), err)
		}
		out = append(out, ledgerLine{Region: fields[0], Release: fields[1], At: time.Unix(0, nanos)})
	}
	return out, sc.Err()
}

// violation is a breach of the rollout guarantee found in a ledger.
type violation struct {
	Release, Region, Problem string
}

func (v violation) String() string { return v.Region + " " + v.Release + ": " + v.Problem }

// checkLedger checks a ledger (lines in the order they were written) against the guarantee that
// each release is applied region by region in step order, exactly once per region: for every
// release, a region's apply comes after the apply of that release by every earlier step (order
// lists the regions in step order), and each region applies each release exactly once. Lines of
// regions not in order or of releases not in releases are violations too.
func checkLedger(lines []ledgerLine, order, releases []string) []violation {
	steps := make([][]string, len(order))
	for i, region := range order {
		steps[i] = []string{region}
	}
	return checkStepLedger(lines, steps, releases)
}

// checkStepLedger is checkLedger for steps of several Workspaces each: steps lists, in step
// order, the ledger labels of each step's Workspaces. For every release, each Workspace applies
// it exactly once, and every Workspace of a step applies it before the first apply of any
// Workspace of a later step (the first apply of step k+1 comes after the last of step k).
func checkStepLedger(lines []ledgerLine, steps [][]string, releases []string) []violation {
	stepOf := map[string]int{}
	var labels []string
	for i, step := range steps {
		for _, label := range step {
			stepOf[label] = i
			labels = append(labels, label)
		}
	}
	var out []violation
	for _, release := range releases {
		applied := map[string]int{}
		for _, l := range lines {
			if l.Release != release {
				continue
			}
			step, ok := stepOf[l.Region]
			if !ok {
				out = append(out, violation{release, l.Region, "applied by a region that is no step of the rollout"})
				continue
			}
			for _, earlier := range steps[:step] {
				for _, label := range earlier {
					if applied[label] == 0 {
						out = append(out, violation{release, l.Region, "applied before " + label + " (an earlier step) had applied it"})
					}
				}
			}
			if applied[l.Region]++; applied[l.Region] == 2 {
				out = append(out, violation{release, l.Region, "applied more than once"})
			}
		}
		for _, label := range labels {
			if applied[label] == 0 {
				out = append(out, violation{release, label, "never applied"})
			}
		}
	}
	for _, l := range lines {
		if !slices.Contains(releases, l.Release) {
			out = append(out, violation{l.Release, l.Region, "applied a release that was never committed"})
		}
	}
	return out
}

// TestCheckLedger: the checker passes an in-order ledger and catches an out-of-order apply, a
// duplicate apply, a missing apply and a stray line.
func TestCheckLedger(t *testing.T) {
	order := []string{"us-east-1", "eu-west-1", "ap-south-1"}
	releases := []string{"v1", "v2"}
	inOrder := `us-east-1 v1 1
eu-west-1 v1 2
ap-south-1 v1 3
us-east-1 v2 4
eu-west-1 v2 5
ap-south-1 v2 6
`
	for _, tc := range []struct {
		name   string
		ledger string
		want   []violation
	}{
		{"in step order", inOrder, nil},
		{"releases interleaved but each in step order", `us-east-1 v1 1
eu-west-1 v1 2
us-east-1 v2 3
ap-south-1 v1 4
eu-west-1 v2 5
ap-south-1 v2 6
`, nil},
		{"a later region applies first", `us-east-1 v1 1
eu-west-1 v1 2
ap-south-1 v1 3
ap-south-1 v2 4
us-east-1 v2 5
eu-west-1 v2 6
`, []violation{
			{"v2", "ap-south-1", "applied before us-east-1 (an earlier step) had applied it"},
			{"v2", "ap-south-1", "applied before eu-west-1 (an earlier step) had applied it"},
		}},
		{"the middle region skips ahead", `us-east-1 v1 1
eu-west-1 v1 2
ap-south-1 v1 3
eu-west-1 v2 4
us-east-1 v2 5
ap-south-1 v2 6
`, []violation{{"v2", "eu-west-1", "applied before us-east-1 (an earlier step) had applied it"}}},
		{"a region applies twice", inOrder + "eu-west-1 v2 7\n",
			[]violation{{"v2", "eu-west-1", "applied more than once"}}},
		{"a region never applies", `us-east-1 v1 1
eu-west-1 v1 2
ap-south-1 v1 3
us-east-1 v2 4
ap-south-1 v2 6
`, []violation{
			{"v2", "ap-south-1", "applied before eu-west-1 (an earlier step) had applied it"},
			{"v2", "eu-west-1", "never applied"},
		}},
		{"stray lines", inOrder + "sa-east-1 v2 7\nus-east-1 v3 8\n", []violation{
			{"v2", "sa-east-1", "applied by a region that is no step of the rollout"},
			{"v3", "us-east-1", "applied a release that was never committed"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := parseLedger([]byte(tc.ledger))
			if err != nil {
				t.Fatal(err)
			}
			if got := checkLedger(lines, order, releases); !slices.Equal(got, tc.want) {
				t.Errorf("checkLedger:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
	if _, err := parseLedger([]byte("us-east-1 v1\n")); err == nil {
		t.Error("parseLedger accepted a line without a timestamp")
	}
}
