// Package rolloutgrid says where a Rollout stands across the fleet: for each of its steps, the
// Workspaces the step selects in every cluster, with their phase and commit. It is a pure
// function of the Rollout, the Cluster objects and the hub's mirrors, shared by
// `magosctl rollout status` (as a table) and the hub's dashboard (as JSON and as a grid of
// steps by clusters), so that both show the same thing.
package rolloutgrid

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/mirror"
)

// Grid is where one Rollout stands. Its JSON form is the dashboard's API.
type Grid struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Phase is the Rollout's phase ("Unknown" before the hub first decides it).
	Phase string `json:"phase"`
	// Tone is how the dashboard colours the phase (Tone).
	Tone    string `json:"tone"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Paused  bool   `json:"paused,omitempty"`
	// Stale is set while the status describes an older generation of the Rollout's spec.
	Stale bool `json:"stale,omitempty"`
	// Applied and Total count the distinct Workspaces applied and selected.
	Applied int32 `json:"applied"`
	Total   int32 `json:"total"`
	// CurrentStep is the name of the step being executed (empty once completed).
	CurrentStep string `json:"currentStep,omitempty"`
	// Revisions are the commits being rolled out.
	Revisions []magosv1.RolloutRevision `json:"revisions,omitempty"`
	// NextWindowAt is when the next change window opens, while the Rollout waits for one.
	NextWindowAt *time.Time `json:"nextWindowAt,omitempty"`
	// Halted says why the Rollout stopped progressing (its Progressing condition when False).
	Halted string `json:"halted,omitempty"`
	// Clusters are the grid's columns: every cluster where a step selects a Workspace, in the
	// order the steps first reach them (a region-by-region Rollout reads as a diagonal).
	Clusters []string `json:"clusters"`
	// Steps are the grid's rows, in the Rollout's order.
	Steps []Step `json:"steps"`
}

// Step is one step of the Rollout and the Workspaces it selects.
type Step struct {
	Name string `json:"name"`
	// Phase is the step's phase from the Rollout's status ("" before the hub decided it).
	Phase string `json:"phase,omitempty"`
	// State is Phase with what the step waits for, as `magosctl rollout status` prints it.
	State string `json:"state"`
	// InvalidSelector is set when the step's selector cannot be parsed: it selects nothing.
	InvalidSelector bool `json:"invalidSelector,omitempty"`
	// Status is the step's status, when the hub has decided it.
	Status *magosv1.StepStatus `json:"status,omitempty"`
	// Workspaces are the Workspaces the step selects, sorted by cluster/namespace/name.
	Workspaces []Workspace `json:"workspaces"`
	// Preview sums, with the Rollout's spec.planFirst, the step's preview in each cluster, in
	// cluster order.
	Preview []ClusterPreview `json:"preview,omitempty"`
}

// ClusterPreview sums the plans of one step's Workspaces in one cluster (spec.planFirst).
type ClusterPreview struct {
	Cluster string `json:"cluster"`
	// Workspaces is how many the step's preview lists in the cluster; Planned how many of them
	// have a plan of the change (Planned or Applied).
	Workspaces int32 `json:"workspaces"`
	Planned    int32 `json:"planned"`
	// Add, Change and Destroy sum the changes of those plans; DriftReverted how many of them
	// revert drift (the rest is the commit's own change).
	Add           int32 `json:"add"`
	Change        int32 `json:"change"`
	Destroy       int32 `json:"destroy"`
	DriftReverted int32 `json:"driftReverted,omitempty"`
	// PolicyViolations and Failed name the Workspaces whose plan breaks a policy, and whose run
	// failed (cluster/namespace/name).
	PolicyViolations []string `json:"policyViolations,omitempty"`
	Failed           []string `json:"failed,omitempty"`
	// Changed names the Workspaces whose plan differs from the one previewed (or that plan again).
	Changed []string `json:"changed,omitempty"`
}

// Previews sums a step's status.steps[].preview by cluster, in cluster order.
func Previews(st magosv1.StepStatus) []ClusterPreview {
	var out []ClusterPreview
	for _, p := range st.Preview {
		cluster, _, _ := strings.Cut(p.Workspace, "/")
		if len(out) == 0 || out[len(out)-1].Cluster != cluster {
			out = append(out, ClusterPreview{Cluster: cluster})
		}
		c := &out[len(out)-1]
		c.Workspaces++
		switch p.Result {
		case magosv1.PreviewPlanned, magosv1.PreviewApplied:
			c.Planned++
			c.Add, c.Change, c.Destroy = c.Add+p.Add, c.Change+p.Change, c.Destroy+p.Destroy
			c.DriftReverted += p.DriftReverted
		case magosv1.PreviewPolicyViolation:
			c.PolicyViolations = append(c.PolicyViolations, p.Workspace)
		case magosv1.PreviewFailed:
			c.Failed = append(c.Failed, p.Workspace)
		}
		if p.Previewed != nil {
			c.Changed = append(c.Changed, p.Workspace)
		}
	}
	return out
}

// Workspace is one Workspace of a step, as the hub's mirror of it shows.
type Workspace struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Phase is the Workspace's phase ("" before its agent reported one).
	Phase string `json:"phase,omitempty"`
	// Tone is how the dashboard colours the phase (Tone).
	Tone    string `json:"tone"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Revision is the commit the Workspace last ran.
	Revision string `json:"revision,omitempty"`
	// Late is set when the step froze its targets without this Workspace: it joins with the
	// next change.
	Late bool `json:"late,omitempty"`
	// RunID is the Workspace's current or last run.
	RunID string `json:"runID,omitempty"`
	// Drift is the result of the Workspace's last drift check of the commit it applied
	// (status.drift.result: NoDrift, Drifted or Failed; Checking while a check runs; "" before
	// any, and while the last check is of an older commit), and Drifted whether it drifted at the commit
	// it applied (pkg/decision's Workspace.Drifted: a check of an older commit is stale).
	Drift   string `json:"drift,omitempty"`
	Drifted bool   `json:"drifted,omitempty"`
	// Preview is the Workspace's entry in the step's preview (spec.planFirst).
	Preview *magosv1.PreviewPlan `json:"preview,omitempty"`
}

// Build computes the Grid of r from the registered clusters and the hub's mirrors. Mirrors of
// clusters not bound to r's namespace, mirrors that fail mirror.Check and Workspaces of other
// Projects are left out, as the hub leaves them out of its decisions. It reads its arguments
// only.
func Build(r *magosv1.Rollout, clusters []magosv1.Cluster, mirrors []magosv1.Workspace, now time.Time) Grid {
	clusterLabels := map[string]labels.Set{}
	bound := map[string]bool{}
	for i := range clusters {
		cl := &clusters[i]
		clusterLabels[cl.Name] = cl.Labels
		bound[cl.Name] = cl.Binds(r.Namespace)
	}
	var members []decision.Workspace
	byKey := map[decision.Key]*magosv1.Workspace{}
	for i := range mirrors {
		m := &mirrors[i]
		cluster, ok := mirror.ClusterOf(m.Namespace)
		if !ok || !bound[cluster] || mirror.Check(cluster, m) != nil {
			continue
		}
		w := decision.FromWorkspace(cluster, m)
		if !w.MemberOf(r.Namespace, r.Spec.ProjectRef) {
			continue
		}
		members = append(members, w)
		byKey[w.Key] = m
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Key.String() < members[j].Key.String() })

	g := Grid{
		Namespace:   r.Namespace,
		Name:        r.Name,
		Phase:       string(r.Status.Phase),
		Tone:        Tone(r.Status.Phase, r.Status.Reason),
		Reason:      r.Status.Reason,
		Message:     r.Status.Message,
		Paused:      r.Spec.Paused,
		Applied:     r.Status.AppliedWorkspaces,
		Total:       r.Status.TotalWorkspaces,
		CurrentStep: r.Status.CurrentStepName,
		Revisions:   r.Status.Revisions,
		Halted:      halted(r),
		Stale:       stale(r),
		Clusters:    []string{},
		Steps:       []Step{},
	}
	if g.Phase == "" {
		g.Phase = "Unknown"
	}
	if r.Status.NextWindowAt != nil {
		t := r.Status.NextWindowAt.UTC()
		g.NextWindowAt = &t
	}
	statusOf := map[string]*magosv1.StepStatus{}
	for i := range r.Status.Steps {
		statusOf[r.Status.Steps[i].Name] = &r.Status.Steps[i]
	}
	columns := map[string]bool{}
	var clusterOrder []string
	for _, step := range r.Spec.Strategy.Steps {
		s := Step{Name: step.Name, State: "-", Workspaces: []Workspace{}}
		previewOf := map[string]*magosv1.PreviewPlan{}
		if st := statusOf[step.Name]; st != nil {
			s.Status, s.Phase, s.State = st, st.Phase, StepState(*st, now)
			s.Preview = Previews(*st)
			for i := range st.Preview {
				previewOf[st.Preview[i].Workspace] = &st.Preview[i]
			}
		}
		sel, err := step.Selector.AsSelector()
		var csel labels.Selector
		if err == nil && step.ClusterSelector != nil {
			csel, err = step.ClusterSelector.AsSelector()
		}
		if err != nil {
			s.InvalidSelector = true
			g.Steps = append(g.Steps, s)
			continue
		}
		for _, w := range members {
			if !sel.Matches(labels.Set(w.Labels)) || (csel != nil && !csel.Matches(clusterLabels[w.Key.Cluster])) {
				continue
			}
			ws := byKey[w.Key]
			cell := Workspace{
				Cluster: w.Key.Cluster, Namespace: w.Key.Namespace, Name: w.Key.Name,
				Phase: string(ws.Status.Phase), Tone: Tone(ws.Status.Phase, ws.Status.Reason),
				Reason: ws.Status.Reason, Message: ws.Status.Message,
				Revision: ws.Status.ObservedRevision, RunID: ws.Status.CurrentRunID, Preview: previewOf[w.Key.String()],
				Drifted: w.Drifted,
			}
			switch d := ws.Status.Drift; {
			case d == nil:
			case d.CheckingRunID != "":
				cell.Drift = magosv1.DriftResultChecking
			case d.Revision == ws.Status.ObservedRevision:
				// A check of an older commit says nothing of the one applied now.
				cell.Drift = d.Result
			}
			if s.Status != nil && s.Status.TargetsRecordedAt != nil && !slices.Contains(s.Status.Targets, w.Key.String()) {
				cell.Late = true
			}
			if !columns[w.Key.Cluster] {
				columns[w.Key.Cluster] = true
				clusterOrder = append(clusterOrder, w.Key.Cluster)
			}
			s.Workspaces = append(s.Workspaces, cell)
		}
		g.Steps = append(g.Steps, s)
	}
	g.Clusters = append(g.Clusters, clusterOrder...)
	return g
}

// halted is the message of the Rollout's Progressing condition when it is False.
func halted(r *magosv1.Rollout) string {
	if c := meta.FindStatusCondition(r.Status.Conditions, magosv1.ConditionProgressing); c != nil && c.Status == metav1.ConditionFalse {
		return c.Reason + ": " + c.Message
	}
	return ""
}

// stale reports whether the Rollout's Ready condition describes an older generation.
func stale(r *magosv1.Rollout) bool {
	c := meta.FindStatusCondition(r.Status.Conditions, magosv1.ConditionReady)
	return c != nil && c.ObservedGeneration != r.Generation
}

// StepState is a step's phase with what it waits for (a soak's time left, plans awaiting
// approval, drifted Workspaces) and the failures it tolerates.
func StepState(s magosv1.StepStatus, now time.Time) string {
	var b strings.Builder
	b.WriteString(s.Phase)
	if s.Phase == magosv1.StepSoaking && s.SoakEndsAt != nil {
		fmt.Fprintf(&b, " (%s left)", max(0, s.SoakEndsAt.Sub(now)).Round(time.Second))
	}
	if s.Phase == magosv1.StepAwaitingApproval {
		fmt.Fprintf(&b, " (%d plan(s))", len(s.Plans))
	}
	if s.Rejection != nil {
		b.WriteString(", rejected by " + s.Rejection.RejectedBy)
	}
	if s.Approval != nil {
		b.WriteString(", approved by " + s.Approval.ApprovedBy)
	}
	if s.Late > 0 {
		fmt.Fprintf(&b, ", %d late", s.Late)
	}
	if n := len(s.Drifted); n > 0 && s.Phase != magosv1.StepDriftBlocked {
		fmt.Fprintf(&b, ", %d drifted", n)
	}
	if s.Phase == magosv1.StepDriftBlocked {
		fmt.Fprintf(&b, " (%d drifted)", len(s.Drifted))
	}
	if s.Failed > 0 && s.Phase != magosv1.StepFailed {
		fmt.Fprintf(&b, ", %d/%d failures tolerated", s.Failed, s.MaxFailures)
	}
	if s.MaxConcurrency > 0 && (s.Phase == magosv1.StepProgressing || s.Phase == magosv1.StepWaiting) {
		fmt.Fprintf(&b, ", %d running (max %d)", s.Running, s.MaxConcurrency)
	}
	return b.String()
}
