package workspace_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// moduleWithSecret plans a resource from a variable marked sensitive, with a value nobody may
// read in a plan or a log.
const (
	secretValue      = "s3cr3t-7f1c9e-do-not-print"
	moduleWithSecret = `variable "token" {
  type      = string
  sensitive = true
  default   = "` + secretValue + `"
}
variable "greeting" {
  type    = string
  default = "hello"
}
resource "terraform_data" "this" {
  input = "${var.greeting}-${var.token}"
}
resource "terraform_data" "visible" {
  input = var.greeting
}
`
)

// outputOf reads an output Secret the way a user would (kubectl and gunzip): not through the
// code under test. It returns the Secret and its uncompressed data.
func outputOf(t *testing.T, c client.Client, ns, name string) (*corev1.Secret, map[string]string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatalf("reading output Secret %s: %v", name, err)
	}
	data := map[string]string{}
	for k, v := range s.Data {
		zr, err := gzip.NewReader(bytes.NewReader(v))
		if err != nil {
			t.Fatalf("output Secret %s: %s is not gzip: %v", name, k, err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("output Secret %s: %s: %v", name, k, err)
		}
		data[k] = string(b)
	}
	return s, data
}

// TestRunHistory: every run leaves a record in status.runs (newest first, at most
// spec.runHistory.limit), each operation an immutable output Secret owned by the Workspace with
// its plan text or log, gzipped, where values tofu marks sensitive stay masked; the Secrets of
// runs that leave the history are deleted. A run that fails keeps its log too.
func TestRunHistory(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, first := newRepo(t, map[string]string{"main.tf": moduleWithSecret})
	key := newWorkspace(t, c, ns, "history", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Annotations = map[string]string{keys.GitPollInterval: "1s"}
		ws.Spec.RunHistory = &magosv1.RunHistorySpec{Limit: new(int32(2))}
	})

	ws := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	firstRun := ws.Status.CurrentRunID
	if len(ws.Status.Runs) != 1 {
		t.Fatalf("after one run: %d records, want 1: %+v", len(ws.Status.Runs), ws.Status.Runs)
	}
	rec := ws.Status.Runs[0]
	if rec.RunID != firstRun || rec.Phase != magosv1.PhaseApplied || rec.Reason != magosv1.ReasonApplySucceeded ||
		rec.Revision != first || rec.Generation != ws.Generation || rec.Trigger != magosv1.TriggerInitial ||
		rec.PlanDigest == "" || rec.PlanDigest != ws.Status.PlanDigest || rec.Policy != magosv1.PolicyResultNotChecked ||
		rec.ResourceChanges == nil || rec.ResourceChanges.Add != 2 {
		t.Fatalf("record %+v", rec)
	}
	if rec.StartedAt == nil || rec.FinishedAt == nil || rec.FinishedAt.Before(rec.StartedAt) {
		t.Fatalf("record times %v to %v", rec.StartedAt, rec.FinishedAt)
	}
	if len(rec.Operations) != 2 || rec.Operations[0].Operation != "plan" || rec.Operations[1].Operation != "apply" {
		t.Fatalf("operations %+v, want plan then apply", rec.Operations)
	}
	for _, op := range rec.Operations {
		if op.Outcome != "Succeeded" || op.OutputSecret == "" || op.StartedAt == nil || op.FinishedAt == nil {
			t.Fatalf("operation %+v", op)
		}
		s, data := outputOf(t, c, ns, op.OutputSecret)
		stored := 0
		for _, v := range s.Data {
			stored += len(v)
		}
		t.Logf("%s: %d bytes stored (%s of output)", s.Name, stored, s.Annotations["magosproject.io/output-bytes"])
		if s.Type != "magosproject.io/run-output" || s.Immutable == nil || !*s.Immutable {
			t.Errorf("%s: type %q immutable %v", s.Name, s.Type, s.Immutable)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != ws.UID {
			t.Errorf("%s: owners %+v, want the Workspace", s.Name, s.OwnerReferences)
		}
		if s.Labels[keys.Workspace] != key.Name || s.Labels[keys.RunID] != firstRun {
			t.Errorf("%s: labels %v", s.Name, s.Labels)
		}
		for k, v := range data {
			if strings.Contains(v, secretValue) {
				t.Errorf("%s: %s shows the sensitive value", s.Name, k)
			}
		}
		switch op.Operation {
		case "plan":
			plan := data["plan.gz"]
			for _, want := range []string{"terraform_data.visible will be created", "(sensitive value)", "Plan: 2 to add, 0 to change, 0 to destroy."} {
				if !strings.Contains(plan, want) {
					t.Errorf("plan text lacks %q:\n%s", want, plan)
				}
			}
			if strings.Contains(plan, "Initializing") {
				t.Errorf("plan text holds the init output:\n%s", plan)
			}
			if !strings.Contains(data["log.gz"], "Initializing") || !strings.Contains(data["log.gz"], "Plan: 2 to add") {
				t.Errorf("plan log lacks init and plan:\n%s", data["log.gz"])
			}
		case "apply":
			if _, ok := data["plan.gz"]; ok {
				t.Errorf("apply output has a plan text")
			}
			if !strings.Contains(data["log.gz"], "Apply complete! Resources: 2 added") {
				t.Errorf("apply log lacks the apply:\n%s", data["log.gz"])
			}
		}
	}

	// A plan that fails is recorded with its log.
	repo.Commit(t, "break it", map[string]string{"main.tf": modulePlanFails})
	ws = pendingRun(t, c, key, magosv1.ReasonNewRevisionDetected, firstRun)
	failedRun := ws.Status.CurrentRunID
	grant(t, c, key, failedRun)
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
	if len(ws.Status.Runs) != 2 || ws.Status.Runs[0].RunID != failedRun || ws.Status.Runs[1].RunID != firstRun {
		t.Fatalf("records %+v, want the failed run then the first", ws.Status.Runs)
	}
	failed := ws.Status.Runs[0]
	if failed.Phase != magosv1.PhaseFailed || len(failed.Operations) != 1 || failed.Operations[0].Outcome != "Failed" {
		t.Fatalf("failed run's record %+v", failed)
	}
	if _, data := outputOf(t, c, ns, failed.Operations[0].OutputSecret); !strings.Contains(data["log.gz"], "Reference to undeclared input variable") {
		t.Errorf("failed plan's log lacks the error:\n%s", data["log.gz"])
	}

	// A third run pushes the first out of the history (limit 2), and its Secrets go with it.
	repo.Commit(t, "fix it", map[string]string{"main.tf": moduleOK})
	ws = runToApplied(t, c, key, "", failedRun)
	if len(ws.Status.Runs) != 2 || ws.Status.Runs[0].RunID != ws.Status.CurrentRunID || ws.Status.Runs[1].RunID != failedRun {
		t.Fatalf("records %+v, want the third run then the failed one", ws.Status.Runs)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		list := &corev1.SecretList{}
		if err := c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{keys.Workspace: key.Name}); err != nil {
			return err
		}
		var runs []string
		for _, s := range list.Items {
			if s.Type == "magosproject.io/run-output" {
				runs = append(runs, s.Labels[keys.RunID]+"/"+s.Labels[keys.JobType])
			}
		}
		want := []string{failedRun + "/plan", ws.Status.CurrentRunID + "/plan", ws.Status.CurrentRunID + "/apply"}
		if !sameSet(runs, want) {
			return fmt.Errorf("output Secrets of runs %v, want %v", runs, want)
		}
		return nil
	})
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}
