package decision

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

const (
	testNamespace = "payments"
	testProject   = "payments-platform"
)

// testSource is the repository and ref the test Workspaces track.
var testSource = Source{RepoURL: "https://git.example/infra.git", Ref: "main"}

// wsOpt adjusts a test Workspace.
type wsOpt func(*Workspace)

// newWS returns a member Workspace of the test Project, Pending with a run, generation 1.
// labels are key=value pairs.
func newWS(cluster, name string, kv ...string) Workspace {
	w := Workspace{
		Key:        Key{Cluster: cluster, Namespace: testNamespace, Name: name},
		Labels:     map[string]string{},
		ProjectRef: testProject,
		Phase:      magosv1.PhasePending,
		Reason:     magosv1.ReasonAwaitingRollout,
		Generation: 1,
		RunID:      "run-1-" + cluster + "-" + name,
		Source:     testSource,
	}
	for i := 0; i+1 < len(kv); i += 2 {
		w.Labels[kv[i]] = kv[i+1]
	}
	return w
}

func (w Workspace) with(opts ...wsOpt) Workspace {
	for _, o := range opts {
		o(&w)
	}
	return w
}

// appliedOK makes the Workspace Applied for its current generation.
func appliedOK(w *Workspace) {
	w.Phase, w.Reason = magosv1.PhaseApplied, magosv1.ReasonApplySucceeded
	w.ObservedGeneration = w.Generation
	w.ObservedRevision = "rev-1"
}

func inPhase(p magosv1.Phase, reason string) wsOpt {
	return func(w *Workspace) { w.Phase, w.Reason = p, reason }
}

func grantedRun(run string) wsOpt {
	return func(w *Workspace) { w.Grant = Grant{Allowed: true, Run: run, By: keys.GrantedByRollout} }
}

// grantedNow grants the Workspace's current run, naming no commit.
func grantedNow(w *Workspace) { *w = w.with(grantedRun(w.RunID)) }

// grantedAt grants the Workspace's current run at a commit.
func grantedAt(commit string) wsOpt {
	return func(w *Workspace) {
		w.Grant = Grant{Allowed: true, Run: w.RunID, By: keys.GrantedByRollout, Revision: commit}
	}
}

func inProject(project, namespace string) wsOpt {
	return func(w *Workspace) { w.ProjectRef, w.Key.Namespace = project, namespace }
}

func clusters(names ...string) map[string]Cluster {
	out := make(map[string]Cluster, len(names))
	for _, n := range names {
		out[n] = Cluster{Name: n, Available: true, Synced: true, Labels: map[string]string{"name": n}}
	}
	return out
}

// stepSpec builds a step whose selector matches the given key=value pairs.
func stepSpec(name string, kv ...string) magosv1.RolloutStep {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return magosv1.RolloutStep{Name: name, Selector: magosv1.MatchLabels(m)}
}

func rolloutOf(steps ...magosv1.RolloutStep) *magosv1.Rollout {
	ro := &magosv1.Rollout{}
	ro.Name, ro.Namespace = testProject, testNamespace
	ro.Spec.ProjectRef = testProject
	ro.Spec.Strategy.Steps = steps
	return ro
}

func envSteps() *magosv1.Rollout {
	return rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("staging", "env", "staging"), stepSpec("prod", "env", "prod"))
}

// applyWrites returns the Workspaces with the decision's grants and revocations written, as
// the hub's merge patches would.
func applyWrites(ws []Workspace, d Decision, by string) []Workspace {
	out := slices.Clone(ws)
	idx := make(map[Key]int, len(out))
	for i := range out {
		idx[out[i].Key] = i
	}
	for _, g := range d.Grants {
		out[idx[g.Key]].Grant = g.Grant(by)
	}
	for _, r := range d.Revokes {
		out[idx[r.Key]].Grant = Grant{}
	}
	return out
}

func keysOf(cs []Change) []Key {
	out := make([]Key, len(cs))
	for i, c := range cs {
		out[i] = c.Key
	}
	return out
}

func k(cluster, name string) Key { return Key{Cluster: cluster, Namespace: testNamespace, Name: name} }

// fleet simulates the hub deciding and the spokes running what they are granted.
type fleet struct {
	t        *testing.T
	ws       []Workspace
	clusters map[string]Cluster
	rollout  *magosv1.Rollout
	runs     int
	// fail makes the named Workspaces fail their next run (removed once it failed).
	fail map[Key]magosv1.Phase
	// grants records every grant written, in order, with its run.
	grants []Change
	// head is the commit the tracked ref points at (default "rev-1"): what a run resolves when
	// its grant names no commit and nothing was detected.
	head string
	// applies records every apply, in order: which Workspace applied which commit.
	applies []applied
	// now is the decisions' clock (Input.Now).
	now time.Time
	// plans are the digests the named Workspaces' next plans get (default "plan-<name>@<commit>").
	plans map[Key]string
	// changes are what the named Workspaces' next plans add, change and destroy (default none).
	changes map[Key]magosv1.ResourceChanges
	// appliedOrder is what each Workspace's status.appliedRevisions holds, as the agent keeps it
	// (appendApplied); decide derives Workspace.Order from it, as FromWorkspace does.
	appliedOrder map[Key][]string
	// stale are the Workspaces whose mirror lags: the hub decides on the copy kept here, not on
	// what the spoke holds now (a grant it writes names the run it saw).
	stale map[Key]Workspace
}

// appendApplied records an apply of commit in the Workspace's applied order, as the agent
// does: a Workspace without a record starts from the commit it had applied before.
func (f *fleet) appendApplied(w *Workspace, before, commit string) {
	if f.appliedOrder == nil {
		f.appliedOrder = map[Key][]string{}
	}
	list, ok := f.appliedOrder[w.Key]
	if !ok && before != "" {
		list = []string{before}
	}
	list = append(slices.DeleteFunc(list, func(c string) bool { return c == commit }), commit)
	f.appliedOrder[w.Key] = list
}

// syncOrder derives every Workspace's Order from its applied order and its detection.
func (f *fleet) syncOrder() {
	for i := range f.ws {
		w := &f.ws[i]
		list, ok := f.appliedOrder[w.Key]
		if !ok && w.ObservedRevision != "" {
			list = []string{w.ObservedRevision}
		}
		w.Order = slices.Clone(list)
		if d := w.DetectedRevision; d != "" && d != w.ObservedRevision {
			w.Order = append(slices.DeleteFunc(w.Order, func(c string) bool { return c == d }), d)
		}
	}
}

// planOf is the digest of the next plan of w.
func (f *fleet) planOf(w *Workspace) string {
	if p, ok := f.plans[w.Key]; ok {
		return p
	}
	return "plan-" + w.Key.Name + "@" + w.CurrentRevision
}

// applied is one apply seen by the simulated spokes.
type applied struct {
	key    Key
	commit string
}

func (f *fleet) input() Input {
	ws := f.ws
	if len(f.stale) > 0 {
		ws = slices.Clone(f.ws)
		for i := range ws {
			if old, ok := f.stale[ws[i].Key]; ok {
				ws[i] = old
			}
		}
	}
	return Input{Namespace: testNamespace, Project: testProject, Rollout: f.rollout, Workspaces: ws, Clusters: f.clusters, Now: f.now}
}

// poll is the agent of the Workspace's cluster polling the ref and seeing it at commit at
// time at: it marks the Workspace, which resets for a new run when settled, as the spoke does.
func (f *fleet) poll(key Key, commit string, at time.Time) {
	w := f.get(key)
	if commit == w.ObservedRevision || commit == w.CurrentRevision || commit == w.DetectedRevision {
		return
	}
	w.DetectedRevision, w.DetectedAt = commit, at
	if w.Phase == magosv1.PhaseApplied || w.Failed() {
		f.reset(key, magosv1.ReasonNewRevisionDetected)
	}
}

func (f *fleet) get(key Key) *Workspace {
	for i := range f.ws {
		if f.ws[i].Key == key {
			return &f.ws[i]
		}
	}
	f.t.Fatalf("no Workspace %s", key)
	return nil
}

// decide decides and writes the decision, returning it.
func (f *fleet) decide() Decision {
	f.syncOrder()
	d := Decide(f.input())
	if f.rollout != nil {
		f.rollout.Status.Revisions = d.Revisions
		f.rollout.Status.Steps = d.Steps
		f.rollout.Status.CurrentStep, f.rollout.Status.CurrentStepName = d.CurrentStep, d.CurrentStepName
		f.rollout.Status.LastProgressTime = nil
		if !d.LastProgress.IsZero() {
			f.rollout.Status.LastProgressTime = &metav1.Time{Time: d.LastProgress}
		}
	}
	f.ws = applyWrites(f.ws, d, keys.GrantedByRollout)
	f.grants = append(f.grants, d.Grants...)
	return d
}

// start moves every Workspace granted for its run into Planning, as a spoke would.
func (f *fleet) start() []Key {
	var started []Key
	for i := range f.ws {
		w := &f.ws[i]
		if w.Grantable() && w.grantedCurrentRun() && f.clusters[w.Key.Cluster].Available {
			w.Phase, w.Reason = magosv1.PhasePlanning, magosv1.ReasonPlanning
			w.ObservedGeneration = w.Generation
			w.PlanOnly = w.Grant.PlanOnly // as the agent records it
			// The run plans the granted commit; else the detected one; else the ref's tip. A grant
			// naming another commit than the detected one consumes the detection.
			switch {
			case w.Grant.Revision != "":
				w.CurrentRevision = w.Grant.Revision
				if w.DetectedRevision != w.Grant.Revision {
					w.DetectedRevision, w.DetectedAt = "", time.Time{}
				}
			case w.DetectedRevision != "":
				w.CurrentRevision = w.DetectedRevision
			case f.head != "":
				w.CurrentRevision = f.head
			default:
				w.CurrentRevision = "rev-1"
			}
			started = append(started, w.Key)
		}
	}
	slices.SortFunc(started, compareKeys)
	return started
}

// finish ends every run in flight: Applied, or the phase f.fail names. It returns how many
// runs it ended.
func (f *fleet) finish() int {
	n := 0
	for i := range f.ws {
		w := &f.ws[i]
		if !w.InFlight() || w.AwaitingApproval() {
			continue
		}
		n++
		if w.Phase == magosv1.PhasePlanning {
			w.Changes = f.changes[w.Key]
		}
		if p, ok := f.fail[w.Key]; ok && w.Phase == magosv1.PhasePlanning && w.PlanOnly {
			// The plan of a plan-only grant fails.
			w.Phase, w.Reason = p, "PlanFailed"
			delete(f.fail, w.Key)
			continue
		}
		if w.Phase == magosv1.PhasePlanning && w.PlanOnly {
			// The plan of a plan-only grant waits for its approval.
			w.Phase, w.Reason, w.PlanDigest = magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded, f.planOf(w)
			continue
		}
		if w.Phase == magosv1.PhasePlanned && w.Grant.Plan != "" && w.Grant.Plan != w.PlanDigest {
			f.t.Fatalf("%s applies plan %s under a grant for plan %s", w.Key, w.PlanDigest, w.Grant.Plan)
		}
		if p, ok := f.fail[w.Key]; ok {
			w.Phase, w.Reason = p, "PlanFailed"
			delete(f.fail, w.Key)
			continue
		}
		w.Phase, w.Reason = magosv1.PhaseApplied, magosv1.ReasonApplySucceeded
		f.appendApplied(w, w.ObservedRevision, w.CurrentRevision)
		if w.CurrentRevision != w.ObservedRevision {
			// Its last drift check was of the commit it applied before: a stale view now.
			w.Drifted, w.DriftDigest, w.DriftChanges = false, "", magosv1.ResourceChanges{}
		}
		w.ObservedRevision = w.CurrentRevision
		f.applies = append(f.applies, applied{w.Key, w.CurrentRevision})
		w.ReconcileRequested = false
		switch w.DetectedRevision {
		case "":
		case w.ObservedRevision:
			w.DetectedRevision, w.DetectedAt = "", time.Time{}
		default: // detected during the run: the next run is due at once
			f.reset(w.Key, magosv1.ReasonNewRevisionDetected)
		}
	}
	return n
}

// reset gives a Workspace a new run, as the spoke does when a run becomes due.
func (f *fleet) reset(key Key, reason string) {
	f.runs++
	w := f.get(key)
	w.Phase, w.Reason, w.PlanDigest, w.PlanOnly = magosv1.PhasePending, reason, "", false
	w.RunID = fmt.Sprintf("run-%d-%s", f.runs+1, key.Name)
}

// walk decides, starts and finishes runs until nothing moves, returning the batches of grants
// in order and the last decision.
func (f *fleet) walk() ([][]Key, Decision) {
	var batches [][]Key
	for round := 0; round < 100; round++ {
		d := f.decide()
		if len(d.Grants) > 0 {
			batches = append(batches, keysOf(d.Grants))
		}
		started := f.start()
		finished := f.finish()
		if !d.HasWrites() && len(started) == 0 && finished == 0 {
			return batches, d
		}
	}
	f.t.Fatalf("rollout did not settle in 100 rounds")
	return nil, Decision{}
}

// assertStatus checks a decision's phase, reason and current step.
func assertStatus(t *testing.T, d Decision, phase magosv1.Phase, reason string, step int) {
	t.Helper()
	if d.Phase != phase || d.Reason != reason || d.CurrentStep != step {
		t.Fatalf("status = %s/%s step %d (%q), want %s/%s step %d", d.Phase, d.Reason, d.CurrentStep, d.Message, phase, reason, step)
	}
}

func assertKeys(t *testing.T, what string, got, want []Key) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}
