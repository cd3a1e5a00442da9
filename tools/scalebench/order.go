package scalebench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckStepOrder checks, from the Ledger alone, that a commit rolled out as its Rollout's steps
// promise: every Workspace of steps (cluster/name keys, one slice per step, in order) ran the
// commit exactly once, no other Workspace ran it, and no run of a step was granted before every
// run of the earlier steps had been applied.
func CheckStepOrder(commit string, runs []Record, steps [][]string) error {
	stepOf := map[string]int{}
	for i, keys := range steps {
		for _, k := range keys {
			stepOf[k] = i
		}
	}
	var problems []string
	count := map[string]int{}
	lastApplied := make([]Record, len(steps)) // the latest apply of each step
	firstGranted := make([]Record, len(steps))
	for _, r := range runs {
		k := r.Cluster + "/" + r.Workspace
		i, ok := stepOf[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s ran %s but is in no step", k, short(commit)))
			continue
		}
		count[k]++
		if lastApplied[i].Applied.IsZero() || r.Applied.After(lastApplied[i].Applied) {
			lastApplied[i] = r
		}
		if firstGranted[i].Granted.IsZero() || r.Granted.Before(firstGranted[i].Granted) {
			firstGranted[i] = r
		}
	}
	for i, keys := range steps {
		for _, k := range keys {
			if count[k] != 1 {
				problems = append(problems, fmt.Sprintf("%s (step %d) ran %s %d times, want once", k, i+1, short(commit), count[k]))
			}
		}
	}
	for i := 1; i < len(steps); i++ {
		for j := range i {
			g, a := firstGranted[i], lastApplied[j]
			if !g.Granted.IsZero() && !a.Applied.IsZero() && g.Granted.Before(a.Applied) {
				problems = append(problems, fmt.Sprintf("%s/%s (step %d) was granted %s at %s, before %s/%s (step %d) applied it at %s",
					g.Cluster, g.Workspace, i+1, short(commit), g.Granted.Format("15:04:05.000"),
					a.Cluster, a.Workspace, j+1, a.Applied.Format("15:04:05.000")))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
	}
	return fmt.Errorf("commit %s broke the step order: %s", short(commit), strings.Join(problems, "; "))
}

func short(commit string) string { return commit[:min(len(commit), 8)] }

// StepTimes splits a commit's rollout by its steps, from the Ledger: spans are, per step, from
// its first grant to its last apply; handoffs are, between consecutive steps, from the last
// apply of one to the first grant of the next (the hub's reaction: mirrors reaching the hub,
// the decision, the grants reaching the spokes).
func StepTimes(runs []Record, steps [][]string) (spans, handoffs []time.Duration) {
	stepOf := map[string]int{}
	for i, keys := range steps {
		for _, k := range keys {
			stepOf[k] = i
		}
	}
	first := make([]time.Time, len(steps))
	last := make([]time.Time, len(steps))
	for _, r := range runs {
		i, ok := stepOf[r.Cluster+"/"+r.Workspace]
		if !ok {
			continue
		}
		if first[i].IsZero() || r.Granted.Before(first[i]) {
			first[i] = r.Granted
		}
		if r.Applied.After(last[i]) {
			last[i] = r.Applied
		}
	}
	for i := range steps {
		if first[i].IsZero() {
			continue
		}
		spans = append(spans, last[i].Sub(first[i]))
		if i > 0 && !last[i-1].IsZero() {
			handoffs = append(handoffs, first[i].Sub(last[i-1]))
		}
	}
	return spans, handoffs
}
