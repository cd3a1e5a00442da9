package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// The two situations of issue 30 in which the step order broke on every change, each with three
// regions applying a module whose every apply of a new release appends a line to a ledger file
// (ledgerModule): the observer, independent of Magos, that checkLedger judges.

// TestOneRepositorySpelledThreeWays: the three regions track one repository and branch spelled
// three ways (the demo's file:// URL at the branch name; the same with /.git at refs/heads/<branch>;
// the same with a trailing slash), and us-east-1, the first step, polls git much less often than
// the others. Each new commit is still applied region by region in step order, once per region,
// and magosctl rollout status names the spellings. (Before sources were canonical, the later
// regions applied each commit about half a minute before us-east-1.)
func TestOneRepositorySpelledThreeWays(t *testing.T) {
	releases := []string{"v1", "v2", "v3"}
	f, ctx, ledger, head := ledgerFleet(t, releases[0], map[string]time.Duration{"us-east-1": 30 * time.Second, "eu-west-1": 5 * time.Second, "ap-south-1": 5 * time.Second})

	// Spell the repository and ref differently in two regions (a spec change: each runs again,
	// at the same commit, which adds no ledger line).
	repo := workspace(t, ctx, f, "us-east-1").Spec.Source
	spellings := map[string]magosv1.Source{
		"eu-west-1":  {RepoURL: strings.TrimSuffix(repo.RepoURL, "/") + "/.git", TargetRevision: "refs/heads/" + repo.TargetRevision},
		"ap-south-1": {RepoURL: strings.TrimSuffix(repo.RepoURL, "/") + "/", TargetRevision: repo.TargetRevision},
	}
	for cluster, src := range spellings {
		ws := workspace(t, ctx, f, cluster)
		patch := client.MergeFrom(ws.DeepCopy())
		ws.Spec.Source.RepoURL, ws.Spec.Source.TargetRevision = src.RepoURL, src.TargetRevision
		if err := f.Client(cluster).Patch(ctx, ws, patch); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitSettled(ctx, f, head); err != nil {
		t.Fatalf("after the spelling change: %v", err)
	}
	text, _, err := cli.RolloutStatus(ctx, f.Client("hub"), client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Project})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "one source spelled 3 ways by the Workspaces: ") {
		t.Errorf("rollout status does not name the three spellings:\n%s", text)
	}

	for _, release := range releases[1:] {
		sha, err := demo.Commit(f, "edge module "+release, ledgerModule(release, ledger))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("committed %s as %s", release, sha)
		if err := waitRelease(t, ctx, f, ledger, release, sha); err != nil {
			t.Fatalf("%s was not applied everywhere in time: %v", release, err)
		}
	}
	checkLedgerFile(t, ledger, f.Order, releases)
}

// TestRolloutCreatedAgainMidChange: us-east-1 polls git every 5s and re-plans every 10s, the
// others poll every 60s. While us-east-1 runs a new commit the Rollout is deleted, and right
// after us-east-1 applied the commit it is created again with the same spec (as a GitOps tool
// replacing it would): the new Rollout knows nothing of the change, and the other regions have
// not seen the commit yet. No region is granted the previous commit again, and the commit goes on
// in step order, once per region. (Before the hub read the order of commits from the
// Workspaces' status.appliedRevisions, us-east-1 was granted the previous commit and applied it:
// a rollback nobody asked for.)
func TestRolloutCreatedAgainMidChange(t *testing.T) {
	releases := []string{"v1", "v2", "v3"}
	f, ctx, ledger, _ := ledgerFleet(t, releases[0], map[string]time.Duration{"us-east-1": 5 * time.Second, "eu-west-1": 60 * time.Second, "ap-south-1": 60 * time.Second})
	ws := workspace(t, ctx, f, "us-east-1")
	patch := client.MergeFrom(ws.DeepCopy())
	metav1.SetMetaDataAnnotation(&ws.ObjectMeta, keys.ReconcileInterval, "10s")
	if err := f.Client("us-east-1").Patch(ctx, ws, patch); err != nil {
		t.Fatal(err)
	}

	for _, release := range releases[1:] {
		sha, err := demo.Commit(f, "edge module "+release, ledgerModule(release, ledger))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("committed %s as %s", release, sha)
		// The Rollout is replaced while us-east-1 runs the release (a GitOps tool deletes it
		// and creates it again from the same manifest): deleted once us-east-1's run of the
		// commit started, created again once the hub sees that run Applied.
		err = localcluster.Poll(2*time.Minute, func() error {
			ws := &magosv1.Workspace{}
			if err := f.Client("us-east-1").Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, ws); err != nil {
				return err
			}
			if ws.Status.CurrentRevision == sha && (ws.Status.Phase.InFlight() || ws.Status.Phase == magosv1.PhaseApplied) {
				return nil
			}
			return fmt.Errorf("us-east-1 runs no run of %s yet (%s at %s)", release, ws.Status.Phase, ws.Status.CurrentRevision)
		})
		if err != nil {
			t.Fatal(err)
		}
		spec, err := deleteRollout(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		// Applied, as the hub sees it (the mirror), before the Rollout comes back.
		err = localcluster.Poll(2*time.Minute, func() error {
			var mirrors magosv1.WorkspaceList
			if err := f.Client("hub").List(ctx, &mirrors, client.InNamespace(mirror.Namespace("us-east-1"))); err != nil {
				return err
			}
			for _, m := range mirrors.Items {
				if mirror.OriginOf("us-east-1", &m).Name == demo.Workspace && m.Status.Phase == magosv1.PhaseApplied && m.Status.ObservedRevision == sha {
					return nil
				}
			}
			return fmt.Errorf("the hub does not see us-east-1 Applied at %s yet", release)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Client("hub").Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		t.Logf("the Rollout was deleted while us-east-1 ran %s and created again once it applied it", release)
		var mirrors magosv1.WorkspaceList
		if err := f.Client("hub").List(ctx, &mirrors, client.MatchingLabelsSelector{Selector: mirror.OnlyMirrors()}); err != nil {
			t.Fatal(err)
		}
		for _, m := range mirrors.Items {
			t.Logf("  %s as the hub saw it then: %s at %s (current %s), detected %q at %q", m.Namespace, m.Status.Phase,
				shortRev(m.Status.ObservedRevision), shortRev(m.Status.CurrentRevision), shortRev(m.Annotations[keys.DetectedRevision]), m.Annotations[keys.DetectedAt])
		}
		_ = localcluster.Poll(30*time.Second, func() error {
			ro := &magosv1.Rollout{}
			if err := f.Client("hub").Get(ctx, client.ObjectKeyFromObject(spec), ro); err != nil {
				return err
			}
			if len(ro.Status.Revisions) == 0 {
				return fmt.Errorf("no revision yet")
			}
			t.Logf("  the new Rollout rolls out %s (%s)", shortRev(ro.Status.Revisions[0].Commit), ro.Status.Message)
			return nil
		})
		if err := waitRelease(t, ctx, f, ledger, release, sha); err != nil {
			t.Fatalf("%s was not applied everywhere in time: %v", release, err)
		}
	}
	checkLedgerFile(t, ledger, f.Order, releases)
}

// deleteRollout deletes the demo's Rollout, waits until it is gone, and returns a new object of
// the same name, labels and spec to create it again.
func deleteRollout(ctx context.Context, f *devfleet.Fleet) (*magosv1.Rollout, error) {
	hub := f.Client("hub")
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Project}
	var old magosv1.Rollout
	if err := hub.Get(ctx, key, &old); err != nil {
		return nil, err
	}
	if err := hub.Delete(ctx, &old); err != nil {
		return nil, err
	}
	err := localcluster.Poll(time.Minute, func() error {
		err := hub.Get(ctx, key, &magosv1.Rollout{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the Rollout is not gone yet (%v)", err)
	})
	if err != nil {
		return nil, err
	}
	return &magosv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: old.Name, Labels: old.Labels},
		Spec:       *old.Spec.DeepCopy(),
	}, nil
}

// waitSettled waits until every region's Workspace is Applied at commit for its current spec.
func waitSettled(ctx context.Context, f *devfleet.Fleet, commit string) error {
	return localcluster.Poll(3*time.Minute, func() error {
		for _, cluster := range f.Order {
			var ws magosv1.Workspace
			if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &ws); err != nil {
				return err
			}
			if ws.Status.Phase != magosv1.PhaseApplied || ws.Status.ObservedRevision != commit || ws.Status.ObservedGeneration != ws.Generation {
				return fmt.Errorf("%s is %s at %s (generation %d observed %d), want Applied at %s",
					cluster, ws.Status.Phase, ws.Status.ObservedRevision, ws.Generation, ws.Status.ObservedGeneration, commit)
			}
		}
		return nil
	})
}

// checkLedgerFile reads the ledger, logs it, and fails the test on every violation of the step
// order or of once-per-region.
func checkLedgerFile(t *testing.T, ledger string, order, releases []string) {
	t.Helper()
	lines, err := readLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ledger:\n%s", formatLedger(lines))
	for _, v := range checkLedger(lines, order, releases) {
		t.Errorf("violation: %s", v)
	}
}

// shortRev is the first 12 characters of a commit SHA.
func shortRev(sha string) string { return sha[:min(len(sha), 12)] }
