package hubsync_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// spokeOutput creates in the spoke the output Secret of one operation of a run, as the agent's
// Workspace controller writes it (by hand here: the test checks the copy, not the writer).
func spokeOutput(t *testing.T, c client.Client, ns, name string, runID, op, text string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{"magosproject.io/workspace": "web", "magosproject.io/run-id": runID, "magosproject.io/job-type": op},
			Annotations: map[string]string{"magosproject.io/output-bytes": fmt.Sprint(len(text))}},
		Type: "magosproject.io/run-output",
		Data: map[string][]byte{"log.gz": []byte("gzipped " + text)},
	}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// hubSecrets lists the Secrets of a cluster's hub namespace as "name" sorted, with the Secrets
// themselves.
func hubSecrets(cluster string) ([]string, map[string]corev1.Secret, error) {
	var list corev1.SecretList
	if err := env.Hub.Client.List(context.Background(), &list, client.InNamespace(mirror.Namespace(cluster))); err != nil {
		return nil, nil, err
	}
	names, byName := []string{}, map[string]corev1.Secret{}
	for _, s := range list.Items {
		names = append(names, s.Name)
		byName[s.Name] = s
	}
	slices.Sort(names)
	return names, byName, nil
}

// TestRunOutputIsCopiedToTheHub: the agent copies to its hub namespace, with its own
// credentials, the output Secret of every operation its Workspace's status.runs names, named
// after the mirror and owned by it; it deletes the copy once the run leaves the history, and
// every copy once the Workspace opts out (spec.runHistory.copyToHub: false).
func TestRunOutputIsCopiedToTheHub(t *testing.T) {
	ctx := context.Background()
	const cluster = "eu-west-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "runoutput-test")
	startAgent(t, cluster, agentOptions{})

	ws := newWorkspace("runoutput-test", "web")
	if err := spoke.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	const run1, run2 = "20261205T010000-aaaaaaaa", "20261205T020000-bbbbbbbb"
	src := spokeOutput(t, spoke, "runoutput-test", "web-run1-plan", run1, "plan", "Plan: 1 to add.")
	spokeOutput(t, spoke, "runoutput-test", "web-run2-plan", run2, "plan", "Plan: 2 to add.")
	spokeOutput(t, spoke, "runoutput-test", "web-run2-apply", run2, "apply", "Apply complete!")
	ws.Status.Runs = []magosv1.RunRecord{
		{RunID: run2, Phase: magosv1.PhaseApplied, Operations: []magosv1.RunOperation{
			{Operation: "plan", Outcome: "Succeeded", OutputSecret: "web-run2-plan"},
			{Operation: "apply", Outcome: "Succeeded", OutputSecret: "web-run2-apply"}}},
		{RunID: run1, Phase: magosv1.PhasePlanned, Operations: []magosv1.RunOperation{
			{Operation: "plan", Outcome: "Succeeded", OutputSecret: "web-run1-plan"}}},
	}
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}

	m := mirror.Name("runoutput-test", "web")
	copies := []string{m + "-" + strings.ToLower(run1) + "-plan", m + "-" + strings.ToLower(run2) + "-apply", m + "-" + strings.ToLower(run2) + "-plan"}
	var byName map[string]corev1.Secret
	testenv.Eventually(t, 60*time.Second, func() error {
		var names []string
		var err error
		if names, byName, err = hubSecrets(cluster); err != nil {
			return err
		}
		if !slices.Equal(names, copies) {
			return fmt.Errorf("secrets in the hub namespace: %v, want %v", names, copies)
		}
		return nil
	})
	mw, err := mirrorOf(cluster, "runoutput-test", "web")
	if err != nil {
		t.Fatal(err)
	}
	got := byName[copies[0]]
	if !bytes.Equal(got.Data["log.gz"], src.Data["log.gz"]) || got.Type != src.Type || got.Annotations["magosproject.io/output-bytes"] != "15" ||
		got.Immutable == nil || !*got.Immutable || got.Labels["magosproject.io/run-id"] != run1 || got.Labels["magosproject.io/workspace"] != m {
		t.Errorf("the copy of run 1's plan: %+v, want the spoke Secret's data, type and annotations, immutable, labelled for the mirror", got)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != mw.UID || got.OwnerReferences[0].Kind != "Workspace" {
		t.Errorf("the copy's owners %+v, want the mirror %s (uid %s)", got.OwnerReferences, mw.Name, mw.UID)
	}

	// Run 1 leaves the history: its copy goes.
	if err := spoke.Get(ctx, client.ObjectKeyFromObject(ws), ws); err != nil {
		t.Fatal(err)
	}
	ws.Status.Runs = ws.Status.Runs[:1]
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		names, _, err := hubSecrets(cluster)
		if err != nil {
			return err
		}
		if !slices.Equal(names, copies[1:]) {
			return fmt.Errorf("secrets in the hub namespace: %v, want %v", names, copies[1:])
		}
		return nil
	})

	// The Workspace opts out: every copy goes, and none comes back.
	if err := spoke.Get(ctx, client.ObjectKeyFromObject(ws), ws); err != nil {
		t.Fatal(err)
	}
	ws.Spec.RunHistory = &magosv1.RunHistorySpec{CopyToHub: new(false)}
	if err := spoke.Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		names, _, err := hubSecrets(cluster)
		if err != nil {
			return err
		}
		if len(names) != 0 {
			return fmt.Errorf("secrets in the hub namespace after opting out: %v, want none", names)
		}
		if m, err := mirrorOf(cluster, "runoutput-test", "web"); err != nil || m.Spec.CopiesRunOutputToHub() {
			return fmt.Errorf("the mirror does not show the opt-out yet (%v)", err)
		}
		return nil
	})
	if err := spoke.Delete(ctx, ws); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
