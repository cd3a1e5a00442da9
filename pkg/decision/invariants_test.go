package decision

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// rejectRand draws the random fleets' rejections apart from their other draws.
var rejectRand = rand.New(rand.NewSource(11))

var (
	randomPhases = []magosv1.Phase{
		"", magosv1.PhasePending, magosv1.PhasePending, magosv1.PhasePending, magosv1.PhasePlanning,
		magosv1.PhasePlanned, magosv1.PhaseApplying, magosv1.PhaseVerifying, magosv1.PhaseApplied, magosv1.PhaseApplied,
		magosv1.PhaseApplied, magosv1.PhaseFailed, magosv1.PhaseValidationFailed, magosv1.PhaseDeleting,
	}
	randomSelectors = []magosv1.LabelSelector{
		magosv1.MatchLabels(map[string]string{"env": "dev"}),
		magosv1.MatchLabels(map[string]string{"env": "staging"}),
		magosv1.MatchLabels(map[string]string{"env": "prod"}),
		magosv1.MatchLabels(map[string]string{"env": "prod", "region": "us"}),
		magosv1.MatchLabels(map[string]string{"region": "eu"}),
		magosv1.MatchLabels(map[string]string{"env": "prdo"}), // a typo: matches nothing
		{}, // everything
		{MatchExpressions: []magosv1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "staging"}}}},
		{MatchExpressions: []magosv1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}}}},
	}
	// randomWindows are change windows; at the random fleets' Now (01:00 UTC) only the first is
	// open (the checker's own knowledge, not the package's).
	randomWindows = []magosv1.ChangeWindow{
		{Schedule: "0 1 * * *", Duration: metav1.Duration{Duration: 30 * time.Minute}},
		{Schedule: "30 1 * * *", Duration: metav1.Duration{Duration: 10 * time.Minute}},
		{Schedule: "0 0 * * *", Duration: metav1.Duration{Duration: time.Hour}},
	}
	invalidSelector = magosv1.LabelSelector{MatchExpressions: []magosv1.LabelSelectorRequirement{{Key: "env", Operator: "Near", Values: []string{"x"}}}}
	randomSources   = []Source{testSource, {RepoURL: testSource.RepoURL, Ref: "release"}}
	randomEpoch     = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clusterSels     = []magosv1.LabelSelector{
		magosv1.MatchLabels(map[string]string{"tier": "canary"}),
		magosv1.MatchLabels(map[string]string{"tier": "fleet"}),
	}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.Intn(len(xs))] }

// randomInput builds a random fleet: several clusters (some unregistered or silent),
// Workspaces of this and other Projects in every state, stale and current grants, and a
// random Rollout (or none).
func randomInput(rng *rand.Rand) Input {
	in := Input{Namespace: testNamespace, Project: testProject, Clusters: map[string]Cluster{}}
	for i := 0; i < 4; i++ {
		if rng.Intn(100) < 85 {
			name := fmt.Sprintf("c%d", i)
			in.Clusters[name] = Cluster{
				Name:      name,
				Labels:    map[string]string{"tier": pick(rng, []string{"canary", "fleet"})},
				Available: rng.Intn(100) < 80,
				Synced:    rng.Intn(100) < 90,
				SyncedAt:  randomEpoch.Add(time.Duration(rng.Intn(20)) * time.Minute),
				Reason:    pick(rng, []string{"", "AgentSilent"}),
				// The agent's clock, up to ten minutes ahead or behind, as the hub measured it.
				ClockOffset: time.Duration(rng.Intn(21)-10) * time.Minute,
			}
		}
	}
	n := rng.Intn(30)
	// A settled fleet: every run finished well, so rollouts complete and rewind on the odd change.
	settled := rng.Intn(4) == 0
	// A gated fleet: settled, but with plans that wait for approval here and there.
	gated := rng.Intn(3) == 0
	settled = settled || gated
	for i := 0; i < n; i++ {
		w := Workspace{
			Key:        Key{Cluster: fmt.Sprintf("c%d", rng.Intn(5)), Namespace: testNamespace, Name: fmt.Sprintf("w%d", i)},
			Labels:     map[string]string{},
			ProjectRef: testProject,
			Phase:      pick(rng, randomPhases),
			Generation: int64(1 + rng.Intn(3)),
			RunID:      fmt.Sprintf("run-%d", rng.Intn(3)),
		}
		if rng.Intn(10) == 0 {
			w.Key.Namespace = "elsewhere"
		}
		if rng.Intn(8) == 0 {
			w.ProjectRef = "other"
		}
		if rng.Intn(10) > 0 {
			w.Labels["env"] = pick(rng, []string{"dev", "staging", "prod", "prod", "qa"})
		}
		w.Labels["region"] = pick(rng, []string{"us", "eu"})
		if rng.Intn(10) == 0 {
			w.RunID = ""
		}
		if w.Phase == magosv1.PhaseDeleting {
			w.Reason = pick(rng, []string{magosv1.ReasonDeleting, magosv1.ReasonDestroying, magosv1.ReasonDestroyPending, magosv1.ReasonDestroyFailed})
		}
		w.ObservedGeneration = w.Generation - int64(rng.Intn(2))
		w.Source = pick(rng, randomSources)
		w.ObservedRevision = pick(rng, []string{"", "rev-1", "rev-2"})
		w.CurrentRevision = pick(rng, []string{"", "rev-1", "rev-2", "rev-3"})
		w.DetectedRevision = pick(rng, []string{"", "", "", "rev-1", "rev-2", "rev-3"})
		if w.DetectedRevision != "" && rng.Intn(3) > 0 {
			w.DetectedAt = randomEpoch.Add(time.Duration(rng.Intn(100)) * time.Second)
		}
		w.ReconcileRequested = rng.Intn(10) == 0
		switch rng.Intn(6) {
		case 1:
			w.Grant = Grant{Allowed: true, Run: w.RunID, By: keys.GrantedByRollout}
		case 2:
			w.Grant = Grant{Allowed: true, Run: "run-old", By: keys.GrantedByProject}
		case 3:
			w.Grant = Grant{Allowed: true}
		case 4:
			w.Grant = Grant{Run: w.RunID}
		}
		if rng.Intn(3) > 0 {
			w.Grant.Revision = pick(rng, []string{"rev-1", "rev-2"})
		}
		if w.Phase == magosv1.PhasePlanned && rng.Intn(4) > 0 {
			w.PlanDigest = pick(rng, []string{"d1", "d2"})
			w.PlanOnly = rng.Intn(2) == 0
		}
		if w.Grant.Allowed && rng.Intn(3) == 0 {
			w.Grant.PlanOnly = true
		} else if w.Grant.Allowed && rng.Intn(4) == 0 {
			w.Grant.Plan = pick(rng, []string{"d1", "d2"})
		}
		if settled && rng.Intn(20) > 0 {
			w.Phase, w.ObservedGeneration, w.DetectedRevision, w.ReconcileRequested = magosv1.PhaseApplied, w.Generation, "", false
			w.Source, w.ObservedRevision = randomSources[0], "rev-1"
			if rng.Intn(8) == 0 { // a failure a step's maxFailures may tolerate
				w.Phase = magosv1.PhaseFailed
			}
			if gated && rng.Intn(3) > 0 { // a plan (mostly of the commit rolled out) waiting for approval
				w.Phase, w.CurrentRevision, w.PlanDigest = magosv1.PhasePlanned, pick(rng, []string{"rev-1", "rev-1", "rev-1", "rev-2"}), pick(rng, []string{"d1", "d2"})
				if w.RunID == "" {
					w.RunID = "run-9"
				}
				w.PlanOnly = true
				w.Grant = Grant{Allowed: true, Run: w.RunID, By: keys.GrantedByRollout, Revision: w.CurrentRevision, PlanOnly: rng.Intn(5) > 0}
				switch rng.Intn(4) {
				case 0:
					w.Grant.Plan = "d3" // the plan changed since it was approved
				case 1:
					w.Grant.Run = "run-old" // a stale grant replayed over it
				}
			}
		}
		if rng.Intn(6) == 0 { // its last drift check found drift at the commit it applied
			w.Drifted, w.DriftDigest = true, pick(rng, []string{"dd1", "dd2"})
			w.DriftChanges = magosv1.ResourceChanges{Change: int32(1 + rng.Intn(3))}
		}
		in.Workspaces = append(in.Workspaces, w)
	}
	if rng.Intn(5) == 0 {
		return in
	}
	in.Rollout = rolloutOf()
	in.Rollout.Spec.Paused = rng.Intn(10) == 0
	in.Rollout.CreationTimestamp = metav1.NewTime(randomEpoch.Add(time.Duration(rng.Intn(4)) * time.Minute))
	in.Now = randomEpoch.Add(time.Hour)
	for _, src := range randomSources {
		if rng.Intn(3) == 0 {
			continue
		}
		rev := magosv1.RolloutRevision{RepoURL: src.RepoURL, TargetRevision: src.Ref, Commit: pick(rng, []string{"rev-1", "rev-2"}),
			Since: metav1.NewTime(randomEpoch)}
		if rng.Intn(2) == 0 {
			rev.DetectedAt = &metav1.Time{Time: randomEpoch.Add(time.Duration(rng.Intn(100)) * time.Second)}
		}
		in.Rollout.Status.Revisions = append(in.Rollout.Status.Revisions, rev)
	}
	// Some grants for the current run name the commit recorded for their source: held as the
	// decision would write them (a grant kept while nothing new is granted).
	for i := range in.Workspaces {
		w := &in.Workspaces[i]
		if j := slices.IndexFunc(in.Rollout.Status.Revisions, func(r magosv1.RolloutRevision) bool {
			return r.RepoURL == w.Source.RepoURL && r.TargetRevision == w.Source.Ref
		}); j >= 0 && w.Grant.Allowed && w.Grant.Run == w.RunID && rng.Intn(3) == 0 {
			w.Grant.Revision = in.Rollout.Status.Revisions[j].Commit
		}
	}
	if rng.Intn(3) == 0 {
		in.Rollout.Spec.ProgressDeadline = &metav1.Duration{Duration: time.Duration(1+rng.Intn(30)) * time.Minute}
		at := metav1.NewTime(randomEpoch.Add(time.Duration(rng.Intn(70)) * time.Minute))
		in.Rollout.Status.LastProgressTime = &at
		in.Rollout.Status.CurrentStep = rng.Intn(3)
	}
	if rng.Intn(4) == 0 { // Now is 01:00 UTC: the first window is open then, the others are not
		for _, i := range rng.Perm(len(randomWindows))[:1+rng.Intn(2)] {
			in.Rollout.Spec.ChangeWindows = append(in.Rollout.Spec.ChangeWindows, randomWindows[i])
		}
	}
	steps := 1 + rng.Intn(4)
	if rng.Intn(20) == 0 {
		steps = 0
	}
	frozen := rng.Intn(3) == 0
	if frozen {
		in.Rollout.Spec.Targets = magosv1.TargetsFrozen
	}
	in.Rollout.Spec.PlanFirst = rng.Intn(4) == 0 || gated && rng.Intn(2) == 0
	// Drift acceptances: of some drifted Workspaces, with their drift's digest or an older one.
	for _, w := range in.Workspaces {
		if w.Drifted && rng.Intn(3) == 0 {
			in.Rollout.Spec.DriftAcceptances = append(in.Rollout.Spec.DriftAcceptances, magosv1.DriftAcceptance{
				Workspace: w.Key.String(), Digest: pick(rng, []string{w.DriftDigest, w.DriftDigest, "dd-old"}), AcceptedBy: "alice"})
		}
	}
	for i := 0; i < steps; i++ {
		s := magosv1.RolloutStep{Name: fmt.Sprintf("s%d", i), Selector: pick(rng, randomSelectors),
			Drift: pick(rng, []string{"", magosv1.DriftBlock, magosv1.DriftWarn, magosv1.DriftIgnore})}
		if rng.Intn(50) == 0 {
			s.Selector = invalidSelector
		}
		if rng.Intn(5) == 0 {
			cs := pick(rng, clusterSels)
			if rng.Intn(30) == 0 {
				cs = invalidSelector
			}
			s.ClusterSelector = &cs
		}
		if rng.Intn(3) == 0 {
			s.Verification = pick(rng, []*magosv1.StepVerification{
				{Expression: "outputs.ready"}, {Job: &magosv1.VerificationJob{Image: "check:1"}},
				{Expression: "size(outputs) > 0", Job: &magosv1.VerificationJob{Image: "check:2"}}})
			if rng.Intn(40) == 0 {
				s.Verification = &magosv1.StepVerification{Expression: "outputs.ready &&"} // does not compile
			}
		}
		if rng.Intn(3) == 0 {
			s.MaxConcurrency = intOrPercent(pick(rng, []string{"1", "2", "3", "30%", "50%", "0%", "x"}))
		}
		if rng.Intn(2) == 0 {
			s.MaxFailures = intOrPercent(pick(rng, []string{"0", "1", "2", "3", "20%", "50%", "100%", "100%"}))
		}
		if rng.Intn(3) == 0 {
			s.MinSuccessTime = &metav1.Duration{Duration: time.Duration(1+rng.Intn(60)) * time.Minute}
		}
		if rng.Intn(3) == 0 || gated && rng.Intn(2) == 0 {
			s.RequireApproval = true
			// An approval that names some of the plans, with their digests and commits or others.
			if rng.Intn(3) > 0 {
				a := magosv1.StepApproval{Step: s.Name, ApprovedBy: "alice", ApprovedAt: metav1.NewTime(randomEpoch)}
				for _, w := range in.Workspaces {
					destroy := w.Phase == magosv1.PhaseDeleting && w.Reason == magosv1.ReasonDestroyPending
					if (w.PlanDigest != "" || destroy) && rng.Intn(10) > 0 {
						p := magosv1.ApprovedPlan{Workspace: w.Key.String(), Revision: w.CurrentRevision, Digest: w.PlanDigest}
						if destroy {
							p.Digest = "destroy"
						}
						if rng.Intn(15) == 0 {
							p.Digest = "d3"
						}
						if rng.Intn(20) == 0 {
							p.Revision = "rev-9"
						}
						a.Plans = append(a.Plans, p)
					}
				}
				in.Rollout.Spec.Approvals = append(in.Rollout.Spec.Approvals, a)
				// Sometimes a rejection beside it, of the same plans or of some of them.
				// (Drawn from rejectRand, so that the other draws stay as they were.)
				if rejectRand.Intn(2) == 0 && len(a.Plans) > 0 {
					at := randomEpoch.Add(time.Duration(rejectRand.Intn(3)-1) * time.Hour) // before, with or after the approval
					x := magosv1.StepRejection{Step: s.Name, RejectedBy: "bob", Reason: "no", RejectedAt: metav1.NewTime(at),
						Plans: slices.Clone(a.Plans[:len(a.Plans)-rejectRand.Intn(2)])}
					if len(x.Plans) > 0 {
						in.Rollout.Spec.Rejections = append(in.Rollout.Spec.Rejections, x)
					}
				}
			}
		}
		in.Rollout.Spec.Strategy.Steps = append(in.Rollout.Spec.Strategy.Steps, s)
		// A success recorded earlier (the soak runs from it), before or after the commits started;
		// targets recorded earlier, before or after the commits started, naming some Workspaces.
		var st magosv1.StepStatus
		if rng.Intn(2) == 0 {
			at := metav1.NewTime(randomEpoch.Add(time.Duration(rng.Intn(90)) * time.Minute))
			st.SucceededAt = &at
		}
		if frozen && rng.Intn(4) > 0 {
			at := metav1.NewTime(randomEpoch.Add(time.Duration(rng.Intn(90)) * time.Minute))
			st.TargetsRecordedAt = &at
			for _, w := range in.Workspaces {
				if rng.Intn(3) > 0 {
					st.Targets = append(st.Targets, w.Key.String())
				}
			}
		}
		if st.SucceededAt != nil || st.TargetsRecordedAt != nil {
			st.Name = s.Name
			in.Rollout.Status.Steps = append(in.Rollout.Status.Steps, st)
		}
	}
	return in
}

// budget resolves a step's maxFailures against n members, independently of Decide: a percentage
// rounds down.
func budget(s magosv1.RolloutStep, n int) int {
	if s.MaxFailures == nil {
		return 0
	}
	if s.MaxFailures.Type == intstr.Int {
		return s.MaxFailures.IntValue()
	}
	p, _ := strconv.Atoi(strings.TrimSuffix(s.MaxFailures.StrVal, "%"))
	return p * n / 100
}

// concurrency resolves a step's maxConcurrency against n members (0: no limit), independently of
// Decide: a percentage rounds down, to at least 1; a value the API refuses is 1.
func concurrency(s magosv1.RolloutStep, n int) int {
	if s.MaxConcurrency == nil {
		return 0
	}
	if s.MaxConcurrency.Type == intstr.Int {
		return max(1, s.MaxConcurrency.IntValue())
	}
	p, err := strconv.Atoi(strings.TrimSuffix(s.MaxConcurrency.StrVal, "%"))
	if err != nil || !strings.HasSuffix(s.MaxConcurrency.StrVal, "%") {
		return 1
	}
	return max(1, p*n/100)
}

// selects reports, independently of Decide, whether a step's selectors select a Workspace.
func selects(t *testing.T, in Input, s magosv1.RolloutStep, w Workspace) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s.Selector.AsMeta())
	if err != nil {
		t.Fatalf("a granting decision with an invalid selector in the current step: %v", err)
	}
	if !sel.Matches(labels.Set(w.Labels)) {
		return false
	}
	if s.ClusterSelector == nil {
		return true
	}
	cs, err := metav1.LabelSelectorAsSelector(s.ClusterSelector.AsMeta())
	if err != nil {
		t.Fatalf("a granting decision with an invalid clusterSelector in the current step: %v", err)
	}
	return cs.Matches(labels.Set(in.Clusters[w.Key.Cluster].Labels))
}

// TestDecideInvariants checks, on thousands of random fleets, what must hold for every
// decision: grants go only to grantable members of the current step, name their run and
// never happen while the rollout is halted or paused; revocations spare runs in flight; the
// outputs are sorted; and writing the decision then deciding again writes nothing.
func TestDecideInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(20240611))
	reasons := map[string]int{}
	for c := 0; c < 10000; c++ {
		in := randomInput(rng)
		d := Decide(in)
		reasons[d.Reason]++
		// Count the decisions that grant a destroy (in parallel mode, under a Rollout).
		for _, g := range d.Grants {
			if i := slices.IndexFunc(in.Workspaces, func(w Workspace) bool { return w.Key == g.Key }); in.Workspaces[i].Phase == magosv1.PhaseDeleting {
				reasons[destroyGranted(in.Rollout != nil)]++
				break
			}
		}
		t.Run(fmt.Sprintf("case-%d", c), func(t *testing.T) {
			for _, tag := range checkInvariants(t, in, d) {
				reasons[tag]++
			}
		})
		if t.Failed() {
			t.Fatalf("case %d failed: input %+v rollout %+v", c, in, in.Rollout)
		}
	}
	t.Logf("outcomes of the random cases: %v", reasons)
	// The generator must reach every outcome, or the invariants were checked on too little.
	for _, r := range []string{
		magosv1.ReasonDefaultParallel, magosv1.ReasonNoSteps, magosv1.ReasonInvalidSelector, magosv1.ReasonInvalidVerification, verifiedGrants,
		magosv1.ReasonNoWorkspacesFound, magosv1.ReasonPaused, magosv1.ReasonRolloutCompleted,
		magosv1.ReasonStepFailed, magosv1.ReasonLevelProgressing, magosv1.ReasonWaitingForClusters,
		magosv1.ReasonSoaking, magosv1.ReasonProgressDeadlineExceeded, magosv1.ReasonOutsideChangeWindow, destroyGranted(false), destroyGranted(true), toleratedPassed, concurrencyBound,
		magosv1.ReasonAwaitingApproval, approvedApplies, approvalVoided, planOnlyGrants, lateHeldBack,
		magosv1.ReasonPreviewing, magosv1.ReasonPreviewFailed, previewGrants, previewApplies,
		magosv1.ReasonDriftDetected, driftPlans, revokedLive, spentLeft,
	} {
		if reasons[r] < 20 {
			t.Errorf("only %d random cases ended %s: %v", reasons[r], r, reasons)
		}
	}
	// Rarer: a step held back by a rejection of its plans (TestDecideRejection walks it through).
	if reasons[magosv1.ReasonApprovalRejected] == 0 {
		t.Errorf("no random case ended ApprovalRejected: %v", reasons)
	}
	// Rarer (a deleted Workspace in the current step of a gated Rollout whose approval names
	// it): TestDecideDestroyWaitsForApproval walks it through.
	if reasons[approvedDestroys] == 0 {
		t.Errorf("no random case granted a destroy under an approval: %v", reasons)
	}
	// Rarer too (a member holding a grant for its run in a step blocked by drift; a full grant
	// kept: TestDecideDriftGate).
	if reasons[driftHeld] == 0 {
		t.Errorf("no random case kept a grant in a step blocked by drift: %v", reasons)
	}
}

// Tallies of TestDecideInvariants besides the reasons: decisions where a step before the current
// one passed with tolerated failures, and decisions whose grants stopped at maxConcurrency.
const (
	toleratedPassed  = "a step passed with tolerated failures"
	concurrencyBound = "grants held back by maxConcurrency"
	approvedApplies  = "applies granted under an approval"
	approvalVoided   = "an approval voided"
	planOnlyGrants   = "plan-only grants"
	verifiedGrants   = "grants carrying their step's verification"
	lateHeldBack     = "late Workspaces held back by frozen targets"
	previewGrants    = "plan-only grants to later steps for the preview"
	previewApplies   = "applies granted once the preview is complete"
	approvedDestroys = "destroys granted under an approval"
	driftPlans       = "plan-only grants in a step blocked by drift"
	driftHeld        = "grants held in a step blocked by drift"
	revokedLive      = "grants revoked that could still start a run"
	spentLeft        = "spent grants left in place"
)

// destroyGranted names, in the tally of TestDecideInvariants, the decisions that grant the
// destroy of a deleted Workspace.
func destroyGranted(rollout bool) string {
	if rollout {
		return "destroy granted under a Rollout"
	}
	return "destroy granted in parallel mode"
}

// checkInvariants checks one decision, and returns tags of what it exercised for the tally.
func checkInvariants(t *testing.T, in Input, d Decision) (tags []string) {
	// frozen returns, under spec.targets Frozen, the Workspaces recorded for a step while its
	// record holds: made no later than now, and no earlier than every commit the decision rolls
	// out was adopted (held is false otherwise).
	frozen := func(s magosv1.RolloutStep) (targets []string, held bool) {
		if in.Rollout == nil || in.Rollout.Spec.Targets != magosv1.TargetsFrozen {
			return nil, false
		}
		j := slices.IndexFunc(in.Rollout.Status.Steps, func(st magosv1.StepStatus) bool { return st.Name == s.Name })
		if j < 0 || in.Rollout.Status.Steps[j].TargetsRecordedAt == nil {
			return nil, false
		}
		old := in.Rollout.Status.Steps[j]
		if old.TargetsRecordedAt.Time.After(in.Now) {
			return nil, false
		}
		for _, r := range d.Revisions {
			if old.TargetsRecordedAt.Time.Before(r.Since.Time.Truncate(time.Second)) {
				return nil, false
			}
		}
		return old.Targets, true
	}
	// inStep reports whether a step holds a Workspace: it selects it and, while the step's
	// frozen record holds, the record names it.
	inStep := func(t *testing.T, in Input, s magosv1.RolloutStep, w Workspace) bool {
		if !selects(t, in, s, w) {
			return false
		}
		targets, held := frozen(s)
		return !held || slices.Contains(targets, w.Key.String())
	}
	// The checker's own notions, independent of the Workspace helpers under test: a deleted
	// Workspace whose destroy run waits for its grant stays a member and is grantable (its grant
	// names no commit); other deleted Workspaces leave, unless their destroy failed.
	destroyWaits := func(w Workspace) bool {
		return w.Phase == magosv1.PhaseDeleting && w.Reason == magosv1.ReasonDestroyPending && w.RunID != ""
	}
	// destroyGated (set below): a destroy of the current step, which requires approval, that its
	// step's approval does not cover yet.
	destroyGated := func(Workspace) bool { return false }
	grantable := func(w Workspace) bool {
		return w.Phase == magosv1.PhasePending && w.RunID != "" || destroyWaits(w) && !destroyGated(w)
	}
	grantRevision := func(w Workspace) string {
		if destroyWaits(w) {
			return ""
		}
		return revisionOf(d.Revisions, w.Source)
	}
	// parked: a plan that waits for an approval: its run was granted its plan only, and it holds
	// no grant its agent would apply it under.
	parked := func(w Workspace) bool {
		applies := w.Grant.Allowed && w.RunID != "" && w.Grant.Run == w.RunID && !w.Grant.PlanOnly && (w.Grant.Plan == "" || w.Grant.Plan == w.PlanDigest)
		return w.Phase == magosv1.PhasePlanned && w.RunID != "" && w.PlanDigest != "" && w.PlanOnly && !applies
	}
	// gated: the decision's current step requires approval; approvalHolds: its approval names,
	// with digest and commit, every plan of the step that waits for approval and is of the
	// commit rolled out.
	var cur *magosv1.RolloutStep
	if in.Rollout != nil && d.CurrentStep < len(in.Rollout.Spec.Strategy.Steps) && d.Reason != magosv1.ReasonInvalidSelector && d.Reason != magosv1.ReasonInvalidVerification {
		cur = &in.Rollout.Spec.Strategy.Steps[d.CurrentStep]
	}
	gated := cur != nil && cur.RequireApproval
	planFirst := in.Rollout != nil && in.Rollout.Spec.PlanFirst
	// The checker's notion of drift: a Workspace drifted at the commit it applied whose drift no
	// acceptance names with its digest.
	driftedW := func(w Workspace) bool {
		return w.Drifted && !slices.ContainsFunc(in.Rollout.Spec.DriftAcceptances, func(a magosv1.DriftAcceptance) bool {
			return a.Workspace == w.Key.String() && a.Digest == w.DriftDigest
		})
	}
	// The checker's notions of the fleet-wide preview: a member is done with the change, or has
	// a plan of it (Planned or Applying with a digest, of the commit rolled out), or has failed
	// on it, or is deleted with its destroy waiting.
	doneWith := func(w Workspace) bool {
		rev := revisionOf(d.Revisions, w.Source)
		return in.Clusters[w.Key.Cluster].Available && w.AppliedForCurrent() && (rev == "" || w.ObservedRevision == rev)
	}
	hasPlan := func(w Workspace) bool {
		rev := revisionOf(d.Revisions, w.Source)
		return w.PlanDigest != "" && (w.Phase == magosv1.PhasePlanned || w.Phase == magosv1.PhaseApplying || w.Phase == magosv1.PhaseVerifying) &&
			(rev == "" || w.CurrentRevision == rev)
	}
	// A failure counts only when it is of the commit rolled out: a member that failed on an
	// older commit has not previewed this one.
	failedWith := func(w Workspace) bool {
		rev := revisionOf(d.Revisions, w.Source)
		return failedRun(w) && (rev == "" || w.CurrentRevision == rev)
	}
	previewedW := func(w Workspace) bool { return doneWith(w) || failedWith(w) || destroyWaits(w) || hasPlan(w) }
	names := func(a magosv1.StepApproval, w Workspace) bool {
		digest := w.PlanDigest
		if destroyWaits(w) {
			digest = "destroy" // the checker's own spelling of a destroy in an approval
		}
		return slices.Contains(a.Plans, magosv1.ApprovedPlan{Workspace: w.Key.String(), Revision: w.CurrentRevision, Digest: digest})
	}
	// waitsForApproval: under a step that requires approval, a destroy waits for the approval
	// as a parked plan does (and keeps its grant only while the approval names it).
	// wantChange is the grant the decision would give w.
	wantChange := func(w Workspace) Change {
		c := Change{Key: w.Key, Run: w.RunID, Revision: grantRevision(w)}
		if in.Rollout == nil {
			c.Revision = ""
		}
		switch {
		case parked(w) && (gated || planFirst):
			c.Plan = w.PlanDigest
		case !parked(w) && (gated || planFirst):
			c.PlanOnly = !destroyWaits(w)
		}
		// The current step's verification rides on the grants of its own members' runs, but
		// for destroys; a later step's preview grant carries none.
		if cur != nil && cur.Verification != nil && inStep(t, in, *cur, w) && !destroyWaits(w) {
			raw, _ := json.Marshal(cur.Verification)
			c.Verification = string(raw)
		}
		return c
	}
	held := func(w Workspace) bool {
		c := wantChange(w)
		return w.Grant.Allowed && w.Grant.Run == w.RunID && w.RunID != "" && w.Grant.Revision == c.Revision &&
			w.Grant.PlanOnly == c.PlanOnly && w.Grant.Plan == c.Plan && w.Grant.Verification == c.Verification
	}
	waitsForApproval := func(w Workspace) bool { return parked(w) || gated && destroyWaits(w) }
	approvalHolds := false
	if gated {
		for _, a := range in.Rollout.Spec.Approvals {
			if a.Step != cur.Name {
				continue
			}
			approvalHolds = true
			for _, w := range in.Workspaces {
				rev := grantRevision(w)
				if waitsForApproval(w) && w.ProjectRef == in.Project && w.Key.Namespace == in.Namespace && inStep(t, in, *cur, w) &&
					(rev == "" || w.CurrentRevision == rev) && !names(a, w) {
					if _, ok := in.Clusters[w.Key.Cluster]; ok {
						approvalHolds = false
					}
				}
			}
		}
	}
	// A rejection of the current step as new as its approval, or newer, sets the approval aside.
	if gated && approvalHolds {
		for _, x := range in.Rollout.Spec.Rejections {
			if x.Step != cur.Name {
				continue
			}
			for _, a := range in.Rollout.Spec.Approvals {
				if a.Step == cur.Name && !a.ApprovedAt.After(x.RejectedAt.Time) {
					approvalHolds = false
				}
			}
		}
	}
	// approvable: a parked plan of the current step that may apply: the step requires no
	// approval, or its approval holds and names the plan.
	// With planFirst, a parked plan of the commit rolled out may apply only once the whole
	// preview is complete (previewComplete, set below), unless it holds its apply grant already.
	previewComplete := false
	destroyGated = func(w Workspace) bool {
		return gated && destroyWaits(w) && inStep(t, in, *cur, w) && !approvalHolds
	}
	approvable := func(w Workspace) bool {
		if !parked(w) {
			return false
		}
		rev := grantRevision(w)
		if planFirst {
			return (rev == "" || w.CurrentRevision == rev) && (!gated || approvalHolds) && (previewComplete || held(w))
		}
		if in.Rollout == nil || !gated {
			return true
		}
		return approvalHolds && (rev == "" || w.CurrentRevision == rev)
	}
	byKey := map[Key]Workspace{}
	var members []Key
	for _, w := range in.Workspaces {
		byKey[w.Key] = w
		leaving := w.Phase == magosv1.PhaseDeleting && w.Reason != magosv1.ReasonDestroyFailed && !destroyWaits(w)
		if _, ok := in.Clusters[w.Key.Cluster]; ok && w.ProjectRef == in.Project && w.Key.Namespace == in.Namespace && !leaving {
			members = append(members, w.Key)
		}
	}
	slices.SortFunc(members, compareKeys)
	assertKeys(t, "members", d.Members, members)
	if want := slices.ContainsFunc(members, func(k Key) bool { return byKey[k].ObservedRevision != "" }); d.AppliedBefore != want {
		t.Fatalf("applied before %v, want %v", d.AppliedBefore, want)
	}
	// relevant are the clusters a step may select Workspaces in.
	relevant := func(s magosv1.RolloutStep) []Cluster {
		var out []Cluster
		for _, c := range in.Clusters {
			if s.ClusterSelector != nil {
				cs, err := metav1.LabelSelectorAsSelector(s.ClusterSelector.AsMeta())
				if err != nil || !cs.Matches(labels.Set(c.Labels)) {
					continue
				}
			}
			out = append(out, c)
		}
		return out
	}
	// owner is, with planFirst, the step after the current one that grants a member's preview:
	// the first that holds it, unless a step up to the current one holds it (-1 then, or none).
	owner := func(w Workspace) int { return -1 }
	if planFirst && cur != nil {
		steps := in.Rollout.Spec.Strategy.Steps
		previewComplete = true
		for j := d.CurrentStep; j < len(steps); j++ {
			for _, key := range members {
				if w := byKey[key]; inStep(t, in, steps[j], w) && !previewedW(w) {
					previewComplete = false
				}
			}
			if slices.ContainsFunc(relevant(steps[j]), func(c Cluster) bool { return !c.Synced }) {
				previewComplete = false
			}
		}
		owner = func(w Workspace) int {
			for j := range steps {
				if inStep(t, in, steps[j], w) {
					if j <= d.CurrentStep {
						return -1
					}
					return j
				}
			}
			return -1
		}
	}
	isMember := func(k Key) bool { _, ok := slices.BinarySearchFunc(members, k, compareKeys); return ok }
	// blocked: the current step's drift is block and a member of it drifted, not accepted.
	blocked := cur != nil && cur.DriftPolicy() == magosv1.DriftBlock &&
		slices.ContainsFunc(members, func(key Key) bool { return inStep(t, in, *cur, byKey[key]) && driftedW(byKey[key]) })

	for _, cs := range [][]Change{d.Grants, d.Revokes} {
		for i := 1; i < len(cs); i++ {
			if compareKeys(cs[i-1].Key, cs[i].Key) >= 0 {
				t.Fatalf("changes not sorted or repeated: %v", cs)
			}
		}
	}
	granted := map[Key]bool{}
	for _, g := range d.Grants {
		w := byKey[g.Key]
		if want := wantChange(w); g != want {
			t.Fatalf("grant %+v to %s/%s (plan %q, grant %+v), want %+v", g, w.Phase, w.Reason, w.PlanDigest, w.Grant, want)
		}
		if g.Verification != "" {
			tags = append(tags, verifiedGrants)
		}
		switch {
		case g.PlanOnly:
			tags = append(tags, planOnlyGrants)
		case g.Plan != "":
			tags = append(tags, approvedApplies)
		case gated && destroyWaits(w) && inStep(t, in, *cur, w):
			tags = append(tags, approvedDestroys)
		}
		if in.Rollout == nil {
			granted[g.Key] = true
			continue
		}
		if want := grantRevision(w); g.Revision != want {
			t.Fatalf("grant %v to %s/%s names commit %q, want %q (the Rollout rolls out %q for %v)",
				g, w.Phase, w.Reason, g.Revision, want, revisionOf(d.Revisions, w.Source), w.Source)
		}
		switch {
		case !isMember(g.Key):
			t.Fatalf("grant to a non-member %s", g.Key)
		case !grantable(w) && !approvable(w) || g.Run != w.RunID:
			t.Fatalf("grant %v to a Workspace in %s with run %q (plan %q, grant %+v)", g, w.Phase, w.RunID, w.PlanDigest, w.Grant)
		case !in.Clusters[g.Key.Cluster].Available:
			t.Fatalf("grant %v in an unavailable cluster", g)
		case w.Holds(g):
			t.Fatalf("grant %v already held", g)
		}
		// The fleet-wide preview: no apply is granted before every member of the current and
		// later steps has planned the change, and each apply is bound to the plan previewed.
		if planFirst && !g.PlanOnly && !destroyWaits(w) && (!previewComplete || g.Plan != w.PlanDigest || g.Plan == "") {
			t.Fatalf("apply grant %v (plan %q) with the preview complete %v", g, w.PlanDigest, previewComplete)
		}
		if planFirst && !g.PlanOnly && !destroyWaits(w) {
			tags = append(tags, previewApplies)
		}
		// Drift: no apply is granted in a block step while an unaccepted drifted Workspace is in
		// it (its plans go, plan-only).
		if blocked && inStep(t, in, *cur, w) {
			if !g.PlanOnly {
				t.Fatalf("apply grant %v in step %s, whose drift is block, while Workspaces of it drifted", g, cur.Name)
			}
			tags = append(tags, driftPlans)
		}
		granted[g.Key] = true
	}
	if d.ApprovalVoided != "" {
		tags = append(tags, approvalVoided)
	}
	// Frozen targets: while the current step's record holds, only the Workspaces it names are
	// granted.
	if cur != nil {
		if targets, held := frozen(*cur); held {
			for _, g := range d.Grants {
				if w := byKey[g.Key]; !slices.Contains(targets, g.Key.String()) && !(g.PlanOnly && owner(w) >= 0) {
					t.Fatalf("grant %v in step %s, which recorded only %v", g, cur.Name, targets)
				}
			}
			if d.Steps[d.CurrentStep].Late > 0 {
				tags = append(tags, lateHeldBack)
			}
		}
	}
	if d.Reason == magosv1.ReasonAwaitingApproval && len(d.Grants) > 0 {
		t.Fatalf("grants %v while awaiting approval", d.Grants)
	}
	for _, r := range d.Revokes {
		w := byKey[r.Key]
		if !isMember(r.Key) || !w.HasGrant() || w.InFlight() || granted[r.Key] || r.Run != "" {
			t.Fatalf("revocation %v of %+v", r, w)
		}
		if w.GrantSpent() {
			t.Fatalf("revocation %v of %+v: its grant is spent (it starts nothing; the next grant replaces it)", r, w)
		}
	}
	if len(d.Revokes) > 0 {
		tags = append(tags, revokedLive)
	}
	if d.Applied > d.Total {
		t.Fatalf("applied %d > total %d", d.Applied, d.Total)
	}

	// shouldHold reports whether the decision wants the member to hold a grant for its run.
	var shouldHold func(w Workspace) bool
	switch {
	case in.Rollout == nil:
		if d.Reason != magosv1.ReasonDefaultParallel || len(d.Revokes) != 0 {
			t.Fatalf("parallel mode: %s, revokes %v", d.Reason, d.Revokes)
		}
		shouldHold = func(w Workspace) bool { return (grantable(w) || approvable(w)) && in.Clusters[w.Key.Cluster].Available }
	case len(in.Rollout.Spec.Strategy.Steps) == 0:
		if d.Reason != magosv1.ReasonNoSteps || d.HasWrites() {
			t.Fatalf("no steps: %s, writes %v %v", d.Reason, d.Grants, d.Revokes)
		}
	default:
		steps := in.Rollout.Spec.Strategy.Steps
		progressing := d.Reason == magosv1.ReasonLevelProgressing || d.Reason == magosv1.ReasonWaitingForClusters ||
			d.Reason == magosv1.ReasonAwaitingApproval || d.Reason == magosv1.ReasonPreviewing || d.Reason == magosv1.ReasonDriftDetected
		if len(d.Grants) > 0 && (!progressing || in.Rollout.Spec.Paused) {
			t.Fatalf("grants while %s (paused %v): %v", d.Reason, in.Rollout.Spec.Paused, d.Grants)
		}
		if len(d.Steps) != len(steps) {
			t.Fatalf("%d step statuses for %d steps", len(d.Steps), len(steps))
		}
		if progressing || d.Reason == magosv1.ReasonStepFailed || d.Reason == magosv1.ReasonRolloutCompleted || d.Reason == magosv1.ReasonPreviewFailed {
			for i := 0; i < d.CurrentStep; i++ {
				if d.Steps[i].Phase != magosv1.StepCompleted {
					t.Fatalf("step %d before the current step %d is %s", i, d.CurrentStep, d.Steps[i].Phase)
				}
			}
		}
		checkRevisions(t, in, d, destroyWaits)
		if d.Reason == magosv1.ReasonNoWorkspacesFound {
			for _, c := range relevant(steps[d.CurrentStep]) {
				if !c.Synced || !c.Available || c.SyncedAt.Add(-c.ClockOffset).Before(in.Rollout.CreationTimestamp.Time) {
					t.Fatalf("NoWorkspacesFound at step %d while cluster %s is synced=%v (at %v, Rollout created %v) available=%v",
						d.CurrentStep, c.Name, c.Synced, c.SyncedAt, in.Rollout.CreationTimestamp, c.Available)
				}
			}
		}
		if d.Reason == magosv1.ReasonLevelProgressing || d.Reason == magosv1.ReasonWaitingForClusters || d.Reason == magosv1.ReasonPreviewing ||
			d.Reason == magosv1.ReasonDriftDetected || d.Reason == magosv1.ReasonStepFailed || d.Reason == magosv1.ReasonRolloutCompleted || d.Reason == magosv1.ReasonPaused ||
			d.Reason == magosv1.ReasonPreviewFailed {
			// Every step before the current one is done on a complete, live, current view.
			for i := 0; i < d.CurrentStep; i++ {
				for _, c := range relevant(steps[i]) {
					if !c.Synced {
						t.Fatalf("step %d counted done while cluster %s is not synced", i, c.Name)
					}
				}
				n, failed := 0, 0
				for _, key := range members {
					w := byKey[key]
					if !inStep(t, in, steps[i], w) {
						continue
					}
					n++
					if failedRun(w) {
						failed++
						continue
					}
					rev := revisionOf(d.Revisions, w.Source)
					if !in.Clusters[key.Cluster].Available || !w.AppliedForCurrent() || (rev != "" && w.ObservedRevision != rev) {
						t.Fatalf("step %d counted done although %s is %s at %q (rolling out %q, cluster available %v)",
							i, key, w.Phase, w.ObservedRevision, rev, in.Clusters[key.Cluster].Available)
					}
				}
				if n == 0 {
					t.Fatalf("step %d counted done with no Workspace", i)
				}
				if in.Rollout.Spec.Targets == magosv1.TargetsFrozen && d.Steps[i].TargetsRecordedAt == nil {
					t.Fatalf("step %d passed with frozen targets never recorded: a Workspace appearing later would slip into it", i)
				}
				if failed > budget(steps[i], n) {
					t.Fatalf("step %d passed with %d of %d failed, maxFailures %v", i, failed, n, steps[i].MaxFailures)
				}
				if failed > 0 {
					tags = append(tags, toleratedPassed)
				}
				// A soaking step holds the steps after it until its soak has ended.
				if ms := steps[i].MinSuccessTime; ms != nil && d.Reason != magosv1.ReasonPaused {
					at := d.Steps[i].SucceededAt
					if at == nil || at.Time.After(in.Now) || at.Time.Add(ms.Duration).After(in.Now) {
						t.Fatalf("step %d passed at %v with minSuccessTime %v, now %v", i, at, ms.Duration, in.Now)
					}
				}
			}
		}
		if d.Reason == magosv1.ReasonRolloutCompleted {
			failed := int32(0)
			for _, key := range members {
				if w := byKey[key]; failedRun(w) && slices.ContainsFunc(steps, func(s magosv1.RolloutStep) bool { return inStep(t, in, s, w) }) {
					failed++
				}
			}
			if d.Applied+failed != d.Total || d.CurrentStep != len(steps) {
				t.Fatalf("completed with %d/%d applied and %d failed at step %d", d.Applied, d.Total, failed, d.CurrentStep)
			}
		}
		if progressing {
			cur := steps[d.CurrentStep]
			n, failed := 0, 0
			for _, key := range members {
				if w := byKey[key]; inStep(t, in, cur, w) {
					n++
					if failedRun(w) {
						failed++
					}
				}
			}
			if failed > budget(cur, n) {
				t.Fatalf("progressing although %d of %d failed in the current step, maxFailures %v", failed, n, cur.MaxFailures)
			}
			for _, g := range d.Grants {
				w := byKey[g.Key]
				if inStep(t, in, cur, w) {
					continue
				}
				// Only the plan of a later step's member, with planFirst, is granted outside the
				// current step.
				if !planFirst || !g.PlanOnly || owner(w) < 0 || !grantable(w) || destroyWaits(w) {
					t.Fatalf("grant %v outside the current step %s (planFirst %v)", g, cur.Name, planFirst)
				}
				tags = append(tags, previewGrants)
			}
			// With planFirst, a later step whose failures exceed its maxFailures stops the Rollout
			// (PreviewFailed) before it progresses.
			for j := d.CurrentStep + 1; planFirst && j < len(steps); j++ {
				n, failed := 0, 0
				for _, key := range members {
					if w := byKey[key]; inStep(t, in, steps[j], w) {
						n++
						if failedRun(w) {
							failed++
						}
					}
				}
				if failed > budget(steps[j], n) {
					t.Fatalf("progressing (%s) although the preview of step %d has %d of %d failed", d.Reason, j, failed, n)
				}
			}
			// A later step that matches no Workspace while every cluster it may select in is
			// synced and available, and some synced only before the Rollout was created, may
			// still turn out empty: nothing new is granted, grants held for the current runs stay.
			holdNew := false
			for j := d.CurrentStep + 1; j < len(steps) && !holdNew; j++ {
				if slices.ContainsFunc(members, func(key Key) bool { return inStep(t, in, steps[j], byKey[key]) }) {
					continue
				}
				rel := relevant(steps[j])
				holdNew = len(rel) > 0 &&
					!slices.ContainsFunc(rel, func(c Cluster) bool { return !c.Synced || !c.Available }) &&
					slices.ContainsFunc(rel, func(c Cluster) bool { return c.SyncedAt.Add(-c.ClockOffset).Before(in.Rollout.CreationTimestamp.Time) })
			}
			eligible := func(w Workspace) bool {
				hold := (grantable(w) || approvable(w)) && in.Clusters[w.Key.Cluster].Available && inStep(t, in, cur, w)
				if holdNew {
					hold = hold && held(w)
				}
				if blocked && !holdNew {
					// Drift holds every new grant but a plan's; a grant held is kept.
					hold = hold && (wantChange(w).PlanOnly || held(w))
				}
				return hold
			}
			// The Rollout says DriftDetected exactly when the step blocks on drift (unless it
			// waits for clusters first).
			if blocked && !holdNew && d.Reason != magosv1.ReasonWaitingForClusters &&
				(d.Reason != magosv1.ReasonDriftDetected || d.Steps[d.CurrentStep].Phase != magosv1.StepDriftBlocked) {
				t.Fatalf("step %s blocks on drift, but the Rollout is %s and the step %s", cur.Name, d.Reason, d.Steps[d.CurrentStep].Phase)
			}
			if d.Reason == magosv1.ReasonDriftDetected && !blocked {
				t.Fatalf("DriftDetected while step %s does not block on drift (drift %q)", cur.Name, cur.DriftPolicy())
			}
			if blocked && slices.ContainsFunc(members, func(key Key) bool { w := byKey[key]; return eligible(w) && held(w) }) {
				tags = append(tags, driftHeld)
			}
			shouldHold = eligible
			if limit := concurrency(cur, n); limit > 0 {
				// At most limit members of the step in flight or holding a grant for their run
				// after the writes, unless that many were there before (nothing new then); grants
				// already held are kept; and no place is left free while an eligible member waits.
				active, waiting := 0, 0
				for _, key := range members {
					w := byKey[key]
					if !inStep(t, in, cur, w) {
						continue
					}
					switch {
					case w.InFlight() && !parked(w):
						active++
					case eligible(w) && (held(w) || granted[key]):
						active++
					case eligible(w):
						waiting++
					}
				}
				newGrants := 0
				for _, g := range d.Grants {
					if w := byKey[g.Key]; inStep(t, in, cur, w) && !held(w) {
						newGrants++
					}
				}
				if newGrants > 0 && active > limit {
					t.Fatalf("%d of step %s in flight or granted after granting %d, maxConcurrency %v (%d)", active, cur.Name, newGrants, cur.MaxConcurrency, limit)
				}
				if waiting > 0 && active < limit {
					t.Fatalf("%d eligible members of step %s wait with %d of %d places taken", waiting, cur.Name, active, limit)
				}
				if waiting > 0 {
					tags = append(tags, concurrencyBound)
				}
				shouldHold = func(w Workspace) bool { return eligible(w) && (held(w) || granted[w.Key]) }
			}
			// With planFirst (and unless nothing new is granted), the members of later steps that
			// wait to plan are granted their plan only by the first later step that holds them,
			// within its maxConcurrency, as above.
			previewable := func(w Workspace) bool {
				return planFirst && !holdNew && grantable(w) && !destroyWaits(w) && in.Clusters[w.Key.Cluster].Available && owner(w) >= 0
			}
			limited := map[int]bool{}
			for j := d.CurrentStep + 1; planFirst && j < len(steps); j++ {
				n := 0
				for _, key := range members {
					if inStep(t, in, steps[j], byKey[key]) {
						n++
					}
				}
				limit := concurrency(steps[j], n)
				if limit == 0 {
					continue
				}
				limited[j] = true
				active, waiting, newGrants := 0, 0, 0
				for _, key := range members {
					w := byKey[key]
					if !inStep(t, in, steps[j], w) {
						continue
					}
					mine := owner(w) == j && previewable(w)
					switch {
					case w.InFlight() && !parked(w):
						active++
					case mine && (held(w) || granted[key]):
						active++
						if !held(w) {
							newGrants++
						}
					case mine:
						waiting++
					}
				}
				if newGrants > 0 && active > limit {
					t.Fatalf("%d of step %s in flight or granted after granting %d previews, maxConcurrency %d", active, steps[j].Name, newGrants, limit)
				}
				if waiting > 0 && active < limit {
					t.Fatalf("%d members of step %s wait to preview with %d of %d places taken", waiting, steps[j].Name, active, limit)
				}
			}
			current := shouldHold
			shouldHold = func(w Workspace) bool {
				if current(w) {
					return true
				}
				return previewable(w) && (!limited[owner(w)] || held(w) || granted[w.Key])
			}
		} else {
			shouldHold = func(Workspace) bool { return false }
		}
		// Every grant the decision does not want is revoked, unless its run is in flight or it is
		// spent: it names a run that is not the Workspace's current one, or one that ended (run IDs
		// are never reused, so such a grant starts nothing, and the next grant replaces it).
		revoked := map[Key]bool{}
		for _, r := range d.Revokes {
			revoked[r.Key] = true
		}
		spent := func(w Workspace) bool {
			ended := w.Phase == magosv1.PhaseApplied || w.Phase == magosv1.PhaseFailed || w.Phase == magosv1.PhaseValidationFailed
			return w.Grant.Run != "" && (w.Grant.Run != w.RunID || ended)
		}
		for _, key := range members {
			w := byKey[key]
			want := w.HasGrant() && !w.InFlight() && !spent(w) && !shouldHold(w)
			if w.HasGrant() && !w.InFlight() && spent(w) && !shouldHold(w) && !slices.Contains(tags, spentLeft) {
				tags = append(tags, spentLeft)
			}
			if revoked[key] != want {
				t.Fatalf("%s (%s, grant %+v): revoked %v, want %v", key, w.Phase, w.Grant, revoked[key], want)
			}
		}
	}
	if shouldHold != nil {
		for _, key := range members {
			w := byKey[key]
			if want := shouldHold(w) && !held(w); granted[key] != want {
				t.Fatalf("%s (%s, run %q, grant %+v): granted %v, want %v", key, w.Phase, w.RunID, w.Grant, granted[key], want)
			}
		}
	}

	// No grant outside the change windows.
	if in.Rollout != nil && len(in.Rollout.Spec.ChangeWindows) > 0 {
		open := slices.ContainsFunc(in.Rollout.Spec.ChangeWindows, func(w magosv1.ChangeWindow) bool { return w.Schedule == randomWindows[0].Schedule })
		if !open && len(d.Grants) > 0 {
			t.Fatalf("grants %v outside the change windows", d.Grants)
		}
		if d.Reason == magosv1.ReasonOutsideChangeWindow && (open || !d.NextWindowAt.After(in.Now)) {
			t.Fatalf("OutsideChangeWindow with a window open (%v), next at %v", open, d.NextWindowAt)
		}
	}

	// A progress deadline is exceeded only for a Rollout that has one, whose current step
	// progresses or waits, and has not progressed for that long.
	if d.DeadlineExceeded {
		if in.Rollout == nil || in.Rollout.Spec.ProgressDeadline == nil ||
			(d.Reason != magosv1.ReasonLevelProgressing && d.Reason != magosv1.ReasonWaitingForClusters) ||
			d.LastProgress.Add(in.Rollout.Spec.ProgressDeadline.Duration).After(in.Now) {
			t.Fatalf("deadline exceeded with %s, last progress %v, now %v", d.Reason, d.LastProgress, in.Now)
		}
		tags = append(tags, magosv1.ReasonProgressDeadlineExceeded)
	}
	if d.LastProgress.After(in.Now) {
		t.Fatalf("last progress %v after now %v", d.LastProgress, in.Now)
	}

	// With planFirst, each step's preview lists the members it holds, in key order, each with
	// where it stands with the change.
	if planFirst && d.Reason != magosv1.ReasonInvalidSelector && d.Reason != magosv1.ReasonInvalidVerification && len(in.Rollout.Spec.Strategy.Steps) > 0 {
		for j, st := range in.Rollout.Spec.Strategy.Steps {
			var want []string
			for _, key := range members {
				if inStep(t, in, st, byKey[key]) {
					want = append(want, key.String())
				}
			}
			got := d.Steps[j].Preview
			if len(got) != len(want) {
				t.Fatalf("step %s previews %d Workspaces, holds %v", st.Name, len(got), want)
			}
			for i, p := range got {
				w := byKey[members[slices.IndexFunc(members, func(k Key) bool { return k.String() == p.Workspace })]]
				result := magosv1.PreviewPending
				switch {
				case doneWith(w):
					result = magosv1.PreviewApplied
				case w.Phase == magosv1.PhaseValidationFailed:
					result = magosv1.PreviewPolicyViolation
				case failedRun(w):
					result = magosv1.PreviewFailed
				case hasPlan(w):
					result = magosv1.PreviewPlanned
				}
				if p.Workspace != want[i] || p.Result != result {
					t.Fatalf("step %s preview %d: %+v, want %s %s (%s)", st.Name, i, p, want[i], result, w.Phase)
				}
			}
		}
	}

	// Every step whose drift is not ignore lists its drifted members (unaccepted), in key order,
	// at most 100; and, with planFirst, each preview entry shows its Workspace's drift.
	if in.Rollout != nil && len(d.Steps) > 0 && d.Reason != magosv1.ReasonInvalidSelector && d.Reason != magosv1.ReasonInvalidVerification {
		for j, st := range in.Rollout.Spec.Strategy.Steps {
			var want []string
			for _, key := range members {
				if w := byKey[key]; st.DriftPolicy() != magosv1.DriftIgnore && inStep(t, in, st, w) && driftedW(w) {
					want = append(want, key.String())
				}
			}
			if got := d.Steps[j].Drifted; !slices.Equal(got, want[:min(len(want), 100)]) {
				t.Fatalf("step %s (drift %q) lists drifted %v, want %v", st.Name, st.DriftPolicy(), got, want)
			}
			for _, p := range d.Steps[j].Preview {
				w := byKey[members[slices.IndexFunc(members, func(k Key) bool { return k.String() == p.Workspace })]]
				show := w.Drifted && st.DriftPolicy() != magosv1.DriftIgnore
				if (p.Drift != nil) != show || show && (p.Drift.Digest != w.DriftDigest || p.Drift.Change != w.DriftChanges.Change) {
					t.Fatalf("step %s (drift %q) previews %s with drift %+v; drifted %v (%s)", st.Name, st.DriftPolicy(), p.Workspace, p.Drift, w.Drifted, w.DriftDigest)
				}
			}
		}
	}

	// The clusters waited for are listed exactly when the Rollout waits for clusters, each once,
	// sorted, and each named in the message.
	if (d.Reason == magosv1.ReasonWaitingForClusters) != (len(d.WaitingFor) > 0) || !slices.IsSorted(d.WaitingFor) ||
		len(slices.Compact(slices.Clone(d.WaitingFor))) != len(d.WaitingFor) {
		t.Fatalf("reason %s waiting for %v", d.Reason, d.WaitingFor)
	}
	for _, c := range d.WaitingFor {
		if !strings.Contains(d.Message, "cluster "+c+": ") {
			t.Fatalf("waiting for %s, which the message %q does not name", c, d.Message)
		}
	}

	// Fixed point: once the decision is written, deciding again writes nothing and says the same.
	again := in
	again.Workspaces = applyWrites(in.Workspaces, d, keys.GrantedByRollout)
	d2 := Decide(again)
	if d2.HasWrites() {
		t.Fatalf("not a fixed point: second decision writes grants %v revokes %v", d2.Grants, d2.Revokes)
	}
	d.Grants, d.Revokes = nil, nil
	if !reflect.DeepEqual(d, d2) {
		t.Fatalf("second decision differs:\n%+v\n%+v", d, d2)
	}
	return tags
}

// failedRun is the checker's own notion of a failed member: its run failed, or its destroy did.
func failedRun(w Workspace) bool {
	return w.Phase == magosv1.PhaseFailed || w.Phase == magosv1.PhaseValidationFailed ||
		w.Phase == magosv1.PhaseDeleting && w.Reason == magosv1.ReasonDestroyFailed
}

// checkRevisions checks the commits a decision rolls out: one per source its members report,
// and a recorded commit replaced only by one an agent saw at the ref later, never by the report
// of a Workspace whose destroy waits (it rolls out nothing).
func checkRevisions(t *testing.T, in Input, d Decision, destroyWaits func(Workspace) bool) {
	t.Helper()
	prev := map[Source]magosv1.RolloutRevision{}
	for _, r := range in.Rollout.Status.Revisions {
		prev[Source{r.RepoURL, r.TargetRevision}] = r
	}
	for i, r := range d.Revisions {
		if i > 0 && (d.Revisions[i-1].RepoURL > r.RepoURL || d.Revisions[i-1].RepoURL == r.RepoURL && d.Revisions[i-1].TargetRevision >= r.TargetRevision) {
			t.Fatalf("revisions not sorted: %v", d.Revisions)
		}
		src := Source{r.RepoURL, r.TargetRevision}
		old, known := prev[src]
		if !known || old.Commit == r.Commit {
			continue
		}
		if r.DetectedAt == nil || old.DetectedAt != nil && !r.DetectedAt.After(old.DetectedAt.Time) {
			t.Fatalf("commit %s replaced %s for %v without a later detection (%v after %v)", r.Commit, old.Commit, src, r.DetectedAt, old.DetectedAt)
		}
		reported := false
		for _, w := range in.Workspaces {
			// The detection time the Rollout records is on the hub's clock.
			if w.Source == src && w.DetectedRevision == r.Commit && w.DetectedAt.Add(-in.Clusters[w.Key.Cluster].ClockOffset).Equal(r.DetectedAt.Time) && !destroyWaits(w) {
				reported = true
			}
		}
		if !reported {
			t.Fatalf("commit %s seen at %v for %v: no Workspace reported it", r.Commit, r.DetectedAt, src)
		}
		if !r.Since.Time.Equal(in.Now) {
			t.Fatalf("new commit %s since %v, want now %v", r.Commit, r.Since, in.Now)
		}
	}
}
