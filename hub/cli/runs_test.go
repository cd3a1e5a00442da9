package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/mirror"
)

// outputSecret creates an output Secret as the agent writes one.
func (f fixture) outputSecret(t *testing.T, namespace, name string, data map[string]string, annotations map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Type: "magosproject.io/run-output", Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = hubtest.Gzip(t, v)
	}
	f.create(t, s)
}

var (
	runOld = "20261205T010000-aaaaaaaa"
	runNew = "20261205T020000-bbbbbbbb"
)

func records(now time.Time) []magosv1.RunRecord {
	at := func(m int) *metav1.Time {
		return &metav1.Time{Time: now.Add(time.Duration(m) * time.Minute).Truncate(time.Second)}
	}
	return []magosv1.RunRecord{
		{RunID: runNew, Trigger: magosv1.TriggerRevision, Revision: strings.Repeat("b", 40), Generation: 2, StartedAt: at(-10), FinishedAt: at(-7),
			Phase: magosv1.PhaseApplied, Reason: magosv1.ReasonApplySucceeded, ResourceChanges: &magosv1.ResourceChanges{Add: 2, Change: 1},
			Policy: magosv1.PolicyResultPassed, Operations: []magosv1.RunOperation{
				{Operation: "plan", Outcome: "Succeeded", OutputSecret: "local-new-plan"},
				{Operation: "apply", Outcome: "Succeeded", OutputSecret: "local-new-apply"},
			}},
		{RunID: runOld, Trigger: magosv1.TriggerInitial, Revision: strings.Repeat("a", 40), Generation: 1, StartedAt: at(-60), FinishedAt: at(-59),
			Phase: magosv1.PhaseValidationFailed, Reason: magosv1.ReasonPolicyViolation, ResourceChanges: &magosv1.ResourceChanges{Destroy: 4},
			Policy: magosv1.PolicyResultViolated, PolicyViolations: 3, Operations: []magosv1.RunOperation{
				{Operation: "plan", Outcome: "PolicyViolation", OutputSecret: "local-old-plan"},
			}},
	}
}

// TestRuns: magosctl runs lists a Workspace's recorded runs, from the hub (its mirror; a name
// several clusters hold needs --cluster) or from its own cluster; magosctl plan and magosctl
// logs print the plan text and the logs the output Secrets hold, and say clearly what they
// cannot show.
func TestRuns(t *testing.T) {
	f := setup(t)
	now := time.Now()
	var m magosv1.Workspace
	if err := f.hub.Client.Get(f.ctx, client.ObjectKey{Namespace: mirror.Namespace("us-east-1"), Name: mirror.Name("default", "edge")}, &m); err != nil {
		t.Fatal(err)
	}
	m.Status.Runs = records(now)
	if err := f.hub.Client.Status().Update(f.ctx, &m); err != nil {
		t.Fatal(err)
	}

	// From the hub.
	if _, err := run(t, f.hub.Kubeconfig, "runs", "edge", "-n", "default"); err == nil || !strings.Contains(err.Error(), "lives in clusters eu-west-1, us-east-1: name one with --cluster") {
		t.Errorf("runs of a Workspace two clusters hold: %v", err)
	}
	out := mustRun(t, f.hub.Kubeconfig, "runs", "edge", "-n", "default", "--cluster", "us-east-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "RUN ") || !strings.HasPrefix(lines[1], runNew) || !strings.HasPrefix(lines[2], runOld) {
		t.Fatalf("runs table, want a header and the newest run first:\n%s", out)
	}
	for _, want := range []string{"Applied", "ApplySucceeded", "bbbbbbb", "revision", "+2 ~1 -0", "Passed", "10m ago", "3m"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("newest run's row lacks %q: %s", want, lines[1])
		}
	}
	for _, want := range []string{"ValidationFailed", "PolicyViolation", "+0 ~0 -4", "Violated (3)", "60m ago", "60s"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("older run's row lacks %q: %s", want, lines[2])
		}
	}
	var got []magosv1.RunRecord
	if err := json.Unmarshal([]byte(mustRun(t, f.hub.Kubeconfig, "runs", "edge", "-n", "default", "--cluster", "us-east-1", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RunID != runNew || got[1].PolicyViolations != 3 || len(got[0].Operations) != 2 {
		t.Errorf("runs -o json: %+v", got)
	}
	runsFromHub := []string{"runs", "edge", "-n", "default", "--cluster", "us-east-1"}
	if out := mustRun(t, f.hub.Kubeconfig, append(runsFromHub, "-o", "name")...); out != runNew+"\n"+runOld+"\n" {
		t.Errorf("runs -o name: %q, want the run IDs newest first", out)
	}
	if out := mustRun(t, f.hub.Kubeconfig, append(runsFromHub, "-o", "jsonpath={.items[0].runID}")...); out != runNew {
		t.Errorf("runs -o jsonpath: %q, want %s", out, runNew)
	}
	if out := mustRun(t, f.hub.Kubeconfig, append(runsFromHub, "-o", "wide")...); !strings.Contains(out, "OPERATIONS") || !strings.Contains(out, "plan:Succeeded") {
		t.Errorf("runs -o wide lacks the operations:\n%s", out)
	}
	if out := mustRun(t, f.hub.Kubeconfig, "runs", "other", "-n", "default"); out != "" {
		t.Errorf("runs of a Workspace with no record printed %q, want nothing on stdout", out)
	}
	planFromHub := []string{"plan", "edge", "-n", "default", "--cluster", "us-east-1"}
	if _, err := run(t, f.hub.Kubeconfig, planFromHub...); err == nil ||
		!strings.Contains(err.Error(), "the hub has no copy of its output (Secret magos-cluster-us-east-1/"+m.Name+"-"+strings.ToLower(runNew)+"-plan)") {
		t.Errorf("plan from the hub without the agent's copy: %v", err)
	}
	// The agent's copy, named after the mirror (written here by hand).
	f.outputSecret(t, m.Namespace, m.Name+"-"+strings.ToLower(runNew)+"-plan", map[string]string{"plan.gz": "Plan: 2 to add (copied to the hub).\n", "log.gz": "hub copy of the log\n"}, nil)
	if out := mustRun(t, f.hub.Kubeconfig, planFromHub...); out != "Plan: 2 to add (copied to the hub).\n" {
		t.Errorf("plan from the hub printed %q, want the copy's plan text", out)
	}
	if out := mustRun(t, f.hub.Kubeconfig, "logs", "edge", "-n", "default", "--cluster", "us-east-1", "--operation", "plan"); out != "hub copy of the log\n" {
		t.Errorf("logs from the hub printed %q, want the copy's log", out)
	}
	m.Spec.RunHistory = &magosv1.RunHistorySpec{CopyToHub: new(false)}
	if err := f.hub.Client.Update(f.ctx, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, f.hub.Kubeconfig, planFromHub...); err == nil ||
		!strings.Contains(err.Error(), "is kept in cluster us-east-1 only (spec.runHistory.copyToHub: false)") {
		t.Errorf("plan from the hub of a Workspace that opted out: %v", err)
	}

	// In the Workspace's own cluster (the hub's test API server plays it: the Workspace is not a
	// mirror).
	local := f.workspace(t, "local")
	local.Status.Runs = records(now)
	if err := f.hub.Client.Status().Update(f.ctx, local); err != nil {
		t.Fatal(err)
	}
	f.outputSecret(t, "default", "local-new-plan", map[string]string{"plan.gz": "Plan: 2 to add, 1 to change, 0 to destroy.\n", "log.gz": "Initializing...\nthe new plan log\n"}, nil)
	f.outputSecret(t, "default", "local-new-apply", map[string]string{"log.gz": "Apply complete! Resources: 2 added, 1 changed, 0 destroyed.\n"}, nil)
	f.outputSecret(t, "default", "local-old-plan", map[string]string{"plan.gz": "  - resource will be destroyed\n[... truncated by magos ...]\n", "log.gz": "old plan log\n"},
		map[string]string{"magosproject.io/plan-truncated": "true"})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "local"}, "Plan: 2 to add, 1 to change, 0 to destroy.\n"},
		{[]string{"plan", "local", "--run", runOld}, "  - resource will be destroyed\n[... truncated by magos ...]\n"},
		{[]string{"logs", "local"}, "Apply complete! Resources: 2 added, 1 changed, 0 destroyed.\n"},
		{[]string{"logs", "local", "--operation", "plan"}, "Initializing...\nthe new plan log\n"},
		{[]string{"logs", "local", "--run", runOld}, "old plan log\n"},
	} {
		if out := mustRun(t, f.hub.Kubeconfig, append(tc.args, "-n", "default")...); out != tc.want {
			t.Errorf("magosctl %v printed %q, want %q", tc.args, out, tc.want)
		}
	}
	var printed struct {
		RunID, Operation, Outcome, Text string
		Truncated                       bool
	}
	if err := json.Unmarshal([]byte(mustRun(t, f.hub.Kubeconfig, "plan", "local", "--run", runOld, "-n", "default", "-o", "json")), &printed); err != nil {
		t.Fatal(err)
	}
	if printed.RunID != runOld || printed.Operation != "plan" || printed.Outcome != "PolicyViolation" || !printed.Truncated || !strings.Contains(printed.Text, "destroyed") {
		t.Errorf("plan -o json: %+v", printed)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "local", "--run", "20260101T000000-cccccccc"}, "has no recorded run 20260101T000000-cccccccc (its runs: " + runNew + ", " + runOld + ")"},
		{[]string{"logs", "local", "--run", runOld, "--operation", "apply"}, "run " + runOld + " of workspace default/local has no apply that kept output"},
		{[]string{"logs", "local", "--operation", "destroy"}, `--operation "destroy": want plan, apply or verify`},
		{[]string{"plan", "nowhere"}, "workspace default/nowhere not found here, nor mirrored on a hub here"},
	} {
		if _, err := run(t, f.hub.Kubeconfig, append(tc.args, "-n", "default")...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("magosctl %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	if err := f.hub.Client.Delete(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "local-new-apply"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, f.hub.Kubeconfig, "logs", "local", "-n", "default"); err == nil || !strings.Contains(err.Error(), "its output Secret local-new-apply is gone") {
		t.Errorf("logs of a run whose Secret is gone: %v", err)
	}
}
