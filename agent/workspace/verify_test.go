package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	grantpkg "github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// moduleWithOutputs has outputs of several types, and a sensitive one.
const moduleWithOutputs = `resource "terraform_data" "edge" {
  input = "edge"
}
output "replicas" {
  value = 3
}
output "endpoint" {
  value = "https://${terraform_data.edge.output}.example.com"
}
output "token" {
  value     = "s3cr3t-token"
  sensitive = true
}
`

// TestVerification: an apply granted with a step's verification is checked before the
// Workspace counts as Applied, with real tofu and the check as a local process (the
// LocalLauncher's stand-in for the check Job, which runs on real kubelets in make test-real).
// A passing expression and Job end Applied, with the Job's log in the run history; a false
// expression, a Job that exits non-zero and a Job that sees the sensitive output fail the run
// with reason VerificationFailed, the commit still recorded as applied (the apply happened);
// an apply granted without a verification is Applied at once.
func TestVerification(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleWithOutputs})
	job := func(script string) *magosv1.VerificationJob {
		return &magosv1.VerificationJob{Image: "example.com/check:1", Command: []string{"sh", "-c", script}}
	}
	for _, tc := range []struct {
		name         string
		verification *magosv1.StepVerification
		wantPhase    magosv1.Phase
		wantResult   string
		wantMessage  string
		wantLog      string
	}{
		{name: "none", wantPhase: magosv1.PhaseApplied},
		{name: "passes", wantPhase: magosv1.PhaseApplied, wantResult: magosv1.VerificationPassed, wantLog: "checked ws-passes 3",
			verification: &magosv1.StepVerification{
				Expression: `outputs.replicas >= 3 && outputs.endpoint.startsWith("https://edge.")`,
				Job:        job(`test "$OUTPUT_REPLICAS" = 3 && test "$OUTPUT_ENDPOINT" = https://edge.example.com && echo checked $MAGOS_WORKSPACE $OUTPUT_REPLICAS`),
			}},
		{name: "expression-only", wantPhase: magosv1.PhaseApplied, wantResult: magosv1.VerificationPassed,
			verification: &magosv1.StepVerification{Expression: "outputs.replicas == 3"}},
		{name: "false", wantPhase: magosv1.PhaseFailed, wantResult: magosv1.VerificationFailed, wantMessage: "is false",
			verification: &magosv1.StepVerification{Expression: "outputs.replicas > 3", Job: job("echo never; exit 0")}},
		{name: "sensitive", wantPhase: magosv1.PhaseFailed, wantResult: magosv1.VerificationFailed, wantMessage: "no such key",
			verification: &magosv1.StepVerification{Expression: `outputs.token != ""`}},
		{name: "exits", wantPhase: magosv1.PhaseFailed, wantResult: magosv1.VerificationFailed, wantMessage: "code 3", wantLog: "unhealthy",
			verification: &magosv1.StepVerification{Job: job(`echo unhealthy; test -z "$OUTPUT_TOKEN" || echo leaked; exit 3`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := newWorkspace(t, c, ns, "ws-"+tc.name, repo.URL(), nil)
			ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
			runID := ws.Status.CurrentRunID
			annotate(t, c, key, map[string]any{keys.ExecutionAllowed: "true", keys.GrantedRun: runID, keys.GrantedBy: keys.GrantedByRollout,
				keys.GrantedVerification: nilIfEmpty(grantpkg.EncodeVerification(tc.verification))})
			ws = waitFor(t, c, key, 180*time.Second, func(ws *magosv1.Workspace) error {
				if ws.Status.CurrentRunID != runID {
					return fmt.Errorf("run %s replaced by %s", runID, ws.Status.CurrentRunID)
				}
				if !ws.Status.Phase.Info().Ended {
					return fmt.Errorf("phase %s/%s: %s", ws.Status.Phase, ws.Status.Reason, ws.Status.Message)
				}
				return nil
			})
			if ws.Status.Phase != tc.wantPhase {
				t.Fatalf("phase %s/%s (%s), want %s", ws.Status.Phase, ws.Status.Reason, ws.Status.Message, tc.wantPhase)
			}
			if tc.wantPhase == magosv1.PhaseFailed && ws.Status.Reason != magosv1.ReasonVerificationFailed {
				t.Fatalf("reason %s, want %s", ws.Status.Reason, magosv1.ReasonVerificationFailed)
			}
			if ws.Status.ObservedRevision != ws.Status.CurrentRevision {
				t.Errorf("observedRevision %s, want the applied commit %s", ws.Status.ObservedRevision, ws.Status.CurrentRevision)
			}
			v := ws.Status.Verification
			switch {
			case tc.verification == nil && v != nil:
				t.Fatalf("status.verification %+v without a verification granted", v)
			case tc.verification == nil:
			case v == nil || v.RunID != runID || v.Result != tc.wantResult || v.StartedAt == nil || v.FinishedAt == nil:
				t.Fatalf("status.verification %+v, want run %s result %s with its times", v, runID, tc.wantResult)
			case !strings.Contains(v.Message, tc.wantMessage) || !strings.Contains(ws.Status.Message, tc.wantMessage):
				t.Fatalf("verification message %q, status message %q: want both to contain %q", v.Message, ws.Status.Message, tc.wantMessage)
			}
			if strings.Contains(ws.Status.Message, "s3cr3t") || (v != nil && strings.Contains(v.Message, "s3cr3t")) {
				t.Fatalf("the sensitive output leaked into the status: %q", ws.Status.Message)
			}
			verifyLog := verifyOutput(t, c, ws)
			if tc.wantLog == "" {
				if verifyLog != "" {
					t.Fatalf("a verify operation was recorded (log %q), want none", verifyLog)
				}
				return
			}
			if !strings.Contains(verifyLog, tc.wantLog) || strings.Contains(verifyLog, "leaked") {
				t.Fatalf("the check's log in the run history is %q, want it to contain %q (and no sensitive output)", verifyLog, tc.wantLog)
			}
		})
	}
}

// nilIfEmpty is nil (remove the annotation) for "", else s.
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// verifyOutput is the log of the current run's verify operation, as its run record's output
// Secret keeps it ("" when the record names no verify operation).
func verifyOutput(t *testing.T, c client.Client, ws *magosv1.Workspace) string {
	t.Helper()
	out, err := runoutput.ReadOperation(context.Background(), c, ws, ws.Status.CurrentRunID, runner.OperationVerify)
	if errors.Is(err, runoutput.ErrNotRecorded) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.Log
}
