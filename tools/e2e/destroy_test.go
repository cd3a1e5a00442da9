package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// Names of the Workspace TestDestroyUnderARollout deletes: a second Workspace in the last
// step's cluster (so that the step still selects a Workspace once it is gone), with its own
// VariableSet whose region value names it in the ledgers.
const (
	retired       = "cdn-edge-old"
	retiredVars   = "cdn-edge-old-inputs"
	retiredRegion = "ap-south-1-old"
)

// destroyModule is ledgerModule (every apply of a new release appends "<region> <release>
// <unix-nanos>" to the file ledger) plus a resource whose destroy-time local-exec provisioner
// appends the same line to the file destroyed: an observer of destroys independent of Magos,
// written by tofu on this machine when, and only when, the resource is destroyed. The
// provisioner refuses (exits 1, so the destroy fails and the resource stays in the state) while
// the file "<destroyed>.refuse-<region>" exists: a simulated destroy failure the test switches on
// and off.
func destroyModule(release, ledger, destroyed string) string {
	return ledgerModule(release, ledger) + strings.NewReplacer("@RELEASE@", release, "@DESTROYED@", destroyed).Replace(`
# The file every destroy appends to: the test's observer of destroys.
variable "destroyed" {
  type    = string
  default = "@DESTROYED@"
}

# Its provisioner runs when the resource is destroyed. A destroy-time provisioner may only read
# self, so the input carries what it writes.
resource "terraform_data" "destroyed" {
  input = {
    region  = var.region
    release = "@RELEASE@"
    ledger  = var.destroyed
  }

  provisioner "local-exec" {
    when    = destroy
    command = <<-EOT
      if [ -e "$LEDGER.refuse-$REGION" ]; then
        echo "simulated destroy failure: $LEDGER.refuse-$REGION exists" >&2
        exit 1
      fi
      printf '%s %s %s\n' "$REGION" "$RELEASE" "$(date +%s%N)" >> "$LEDGER"
    EOT
    environment = {
      REGION  = self.input.region
      RELEASE = self.input.release
      LEDGER  = self.input.ledger
    }
  }
}
`)
}

// TestDestroyUnderARollout deletes a destroyOnDelete Workspace that a Rollout manages, in the
// last step's cluster, through the real hub and agents and a real tofu, and checks, from the
// clusters and the module's own ledgers only, that:
//
//   - while the Rollout is paused, the Workspace waits in Deleting/DestroyPending: no grant for
//     its destroy run, its finalizer kept, its state whole, nothing destroyed, also after its
//     agent restarted;
//   - resumed while an earlier step is held (the first step's agent is down: the Rollout waits
//     for that cluster), it still waits, also after an impatient `magosctl retry`: destroys go
//     in step order;
//   - once the earlier step is done again, the hub grants the destroy; the destroy fails
//     (simulated: the module's destroy provisioner refuses), the Workspace stays in
//     Deleting/DestroyFailed with its finalizer and its state, is not retried by itself (the
//     earlier retry was satisfied by the destroy that failed), and the Rollout halts with
//     StepFailed naming it;
//   - `magosctl retry` after the fix, with the Rollout paused again, mints a new destroy run
//     that waits too; resumed, the hub grants it, the destroy runs once (one line in the
//     destroy ledger), the finalizer goes, the Workspace and its mirror are gone, and the
//     Rollout completes without it, every other Workspace untouched;
//   - the last step's other Workspace, deleted without destroyOnDelete, goes at once, its state
//     kept and nothing destroyed; its step selecting nothing, the Rollout halts with
//     NoWorkspacesFound, and completes once the step is removed from its spec.
//
// Every check that the Workspace waits first pokes its agent (poke), so that a wait is the
// agent's decision and not the mere absence of a reconcile. Simulated: the first step's outage
// (its agent is killed) and the destroy's failure (the provisioner refuses); everything else is
// the real thing.
func TestDestroyUnderARollout(t *testing.T) {
	began := time.Now()
	f, ctx := start(t)
	t.Logf("[+%s] fleet started", since(began))
	dir := t.TempDir()
	ledger, destroyed := filepath.Join(dir, "applied"), filepath.Join(dir, "destroyed")
	refuse := destroyed + ".refuse-" + retiredRegion
	last := f.Order[len(f.Order)-1]
	spoke := f.Client(last)
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: retired}

	// The demo's Workspaces, one per region, and a second one in the last region, rolled out.
	if err := demo.Setup(ctx, f, demo.Options{Paused: true, Module: destroyModule("v1", ledger, destroyed)}); err != nil {
		t.Fatal(err)
	}
	createRetired(t, ctx, f, last)
	testenv.Eventually(t, time.Minute, func() error {
		r := rolloutOf(t, ctx, f)
		if r.Status.TotalWorkspaces != int32(len(f.Order)+1) || r.Status.Reason != magosv1.ReasonPaused {
			return fmt.Errorf("rollout %s with %d Workspaces, want Paused with %d", r.Status.Reason, r.Status.TotalWorkspaces, len(f.Order)+1)
		}
		return nil
	})
	magosctl(t, ctx, f, "hub", "rollout", "resume", demo.Project)
	if s, err := demo.Follow(ctx, f, demo.Options{}); err != nil || !s.Completed {
		t.Fatalf("the rollout did not complete (%v):\n%s", err, s.Final)
	}
	applied := readLines(t, ledger)
	if regions := regionsOf(applied); !slices.Equal(regions, []string{"ap-south-1", retiredRegion, "eu-west-1", "us-east-1"}) {
		t.Fatalf("applies recorded for %v, want one per Workspace", regions)
	}
	if n := stateResources(t, ctx, spoke, retired); n != 3 {
		t.Fatalf("the state of %s holds %d resources, want 3", retired, n)
	}
	t.Logf("[+%s] rolled out: %d Workspaces applied", since(began), len(applied))

	// Paused: the deleted Workspace mints its destroy run and waits for the hub.
	magosctl(t, ctx, f, "hub", "rollout", "pause", demo.Project)
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.Reason != magosv1.ReasonPaused {
			return fmt.Errorf("rollout %s, want Paused", r.Status.Reason)
		}
		return nil
	})
	if err := os.WriteFile(refuse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spoke.Delete(ctx, &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	var destroyRun string
	testenv.Eventually(t, time.Minute, func() error {
		ws, err := getWorkspace(ctx, spoke, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhaseDeleting || ws.Status.Reason != magosv1.ReasonDestroyPending || ws.Status.CurrentRunID == "" {
			return fmt.Errorf("%s is %s/%s, want Deleting/DestroyPending", retired, ws.Status.Phase, ws.Status.Reason)
		}
		destroyRun = ws.Status.CurrentRunID
		// The hub must know of the destroy run, or waiting here proves nothing.
		m, err := mirrorOf(ctx, f, last, retired)
		if err != nil {
			return err
		}
		if m.Status.Reason != magosv1.ReasonDestroyPending || m.Status.CurrentRunID != destroyRun {
			return fmt.Errorf("the hub's mirror is %s/%s run %s, want DestroyPending run %s",
				m.Status.Phase, m.Status.Reason, m.Status.CurrentRunID, destroyRun)
		}
		return nil
	})
	t.Logf("[+%s] deleted %s: Deleting/DestroyPending, destroy run %s", since(began), retired, destroyRun)
	// stillWaiting wakes the agent up first (a poke), so that the wait it checks is the agent's
	// decision and not merely the absence of a reconcile: a waiting destroy is reconciled only
	// on a change to the Workspace.
	pokes := 0
	stillWaiting := func(why string, resources int) {
		t.Helper()
		pokes++
		poke(t, ctx, f, last, key, pokes)
		testenv.Consistently(t, 4*time.Second, func() error {
			if err := waitsForItsDestroy(ctx, f, last, key, destroyRun, destroyed); err != nil {
				return fmt.Errorf("%s: %w", why, err)
			}
			return nil
		})
		if n := stateResources(t, ctx, spoke, retired); n != resources {
			t.Fatalf("%s: the state of %s holds %d resources, want %d", why, retired, n, resources)
		}
	}
	stillWaiting("while the rollout is paused", 3)
	// A restarted agent reconciles every Workspace afresh: it still waits.
	if err := f.Kill(last); err != nil {
		t.Fatal(err)
	}
	if err := f.Restart(last); err != nil {
		t.Fatal(err)
	}
	stillWaiting("after the agent of "+last+" restarted", 3)
	if r := rolloutOf(t, ctx, f); r.Status.TotalWorkspaces != int32(len(f.Order)+1) {
		t.Errorf("the paused rollout counts %d Workspaces, want %d: one waiting for its destroy grant is still a member",
			r.Status.TotalWorkspaces, len(f.Order)+1)
	}

	// Resumed while the first step is held: its agent is down, so the Rollout waits there.
	first := f.Order[0]
	if err := f.Kill(first); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		var c magosv1.Cluster
		if err := f.Client("hub").Get(ctx, client.ObjectKey{Name: first}, &c); err != nil {
			return err
		}
		if meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionAvailable) {
			return fmt.Errorf("%s still Available", first)
		}
		return nil
	})
	magosctl(t, ctx, f, "hub", "rollout", "resume", demo.Project)
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.CurrentStepName != first || r.Status.Reason != magosv1.ReasonWaitingForClusters {
			return fmt.Errorf("rollout at step %q, %s: %s; want step %s WaitingForClusters", r.Status.CurrentStepName, r.Status.Reason, r.Status.Message, first)
		}
		return nil
	})
	t.Logf("[+%s] resumed with the %s agent down: the rollout waits at step %s", since(began), first, first)
	stillWaiting("while an earlier step is held", 3)
	// An impatient operator asks for a retry of the waiting destroy: it still waits, and the
	// destroy that runs once granted satisfies the request (a failure is not retried on it).
	magosctl(t, ctx, f, last, "retry", retired)
	testenv.Eventually(t, time.Minute, func() error {
		if m, err := mirrorOf(ctx, f, last, retired); err != nil || m.Annotations[keys.ReconcileRequest] == "" {
			return fmt.Errorf("the hub's mirror of %s carries no reconcile-request yet (%v)", retired, err)
		}
		return nil
	})
	stillWaiting("after a retry while an earlier step is held", 3)

	// The earlier step is done again: the hub grants the destroy, which fails (simulated).
	if err := f.Restart(first); err != nil {
		t.Fatal(err)
	}
	var failed *magosv1.Workspace
	testenv.Eventually(t, 2*time.Minute, func() error {
		ws, err := getWorkspace(ctx, spoke, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhaseDeleting || ws.Status.Reason != magosv1.ReasonDestroyFailed {
			return fmt.Errorf("%s is %s/%s, want Deleting/DestroyFailed", retired, ws.Status.Phase, ws.Status.Reason)
		}
		failed = ws
		return nil
	})
	t.Logf("[+%s] granted; the destroy failed as simulated: %s", since(began), failed.Status.Message)
	if failed.Status.CurrentRunID != destroyRun {
		t.Errorf("the destroy that failed is run %s, want the granted run %s", failed.Status.CurrentRunID, destroyRun)
	}
	for _, want := range []string{"simulated destroy failure", keys.ReconcileRequest, "remove the finalizer"} {
		if !strings.Contains(failed.Status.Message, want) {
			t.Errorf("the DestroyFailed message does not say %q: %s", want, failed.Status.Message)
		}
	}
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.Reason != magosv1.ReasonStepFailed || r.Status.CurrentStepName != last || !strings.Contains(r.Status.Message, retired) {
			return fmt.Errorf("rollout at step %q, %s: %s; want StepFailed at %s naming %s", r.Status.CurrentStepName, r.Status.Reason, r.Status.Message, last, retired)
		}
		return nil
	})
	// Not retried by itself, even when its agent looks at it again.
	pokes++
	poke(t, ctx, f, last, key, pokes)
	testenv.Consistently(t, 4*time.Second, func() error {
		ws, err := getWorkspace(ctx, spoke, key)
		if err != nil {
			return err
		}
		if ws.Status.Reason != magosv1.ReasonDestroyFailed || ws.Status.CurrentRunID != destroyRun || !controllerutil.ContainsFinalizer(ws, keys.Finalizer) {
			return fmt.Errorf("%s is %s/%s run %s (finalizers %v), want it kept in DestroyFailed (run %s) until someone acts",
				retired, ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID, ws.Finalizers, destroyRun)
		}
		if lines := readLines(t, destroyed); len(lines) > 0 {
			return fmt.Errorf("the destroy ledger has %q after a failed destroy", lines)
		}
		return nil
	})
	kept := stateResources(t, ctx, spoke, retired)
	if kept == 0 {
		t.Fatalf("the state of %s is empty after the failed destroy, want the refusing resource kept", retired)
	}

	// Fixed and retried while the Rollout is paused: the retry is a new destroy run, which waits
	// for its grant like the first.
	if err := os.Remove(refuse); err != nil {
		t.Fatal(err)
	}
	magosctl(t, ctx, f, "hub", "rollout", "pause", demo.Project)
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.Reason != magosv1.ReasonPaused {
			return fmt.Errorf("rollout %s, want Paused", r.Status.Reason)
		}
		return nil
	})
	magosctl(t, ctx, f, last, "retry", retired)
	testenv.Eventually(t, time.Minute, func() error {
		ws, err := getWorkspace(ctx, spoke, key)
		if err != nil {
			return err
		}
		if ws.Status.Reason != magosv1.ReasonDestroyPending || ws.Status.CurrentRunID == failed.Status.CurrentRunID {
			return fmt.Errorf("%s is %s/%s run %s, want DestroyPending in a new run", retired, ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID)
		}
		destroyRun = ws.Status.CurrentRunID
		return nil
	})
	t.Logf("[+%s] fixed and retried while paused: destroy run %s waits", since(began), destroyRun)
	stillWaiting("after the retry, while the rollout is paused", kept)

	// Resumed: the hub grants the new run, it runs once and the Workspace goes.
	magosctl(t, ctx, f, "hub", "rollout", "resume", demo.Project)
	testenv.Eventually(t, 2*time.Minute, func() error {
		ws, err := getWorkspace(ctx, spoke, key)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s still there: %s/%s %s", retired, ws.Status.Phase, ws.Status.Reason, ws.Status.Message)
	})
	t.Logf("[+%s] resumed: %s destroyed and gone", since(began), retired)
	if n := stateResources(t, ctx, spoke, retired); n != 0 {
		t.Errorf("the state of %s holds %d resources after the destroy, want none", retired, n)
	}
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.Phase != magosv1.PhaseApplied || r.Status.Reason != magosv1.ReasonRolloutCompleted ||
			r.Status.TotalWorkspaces != int32(len(f.Order)) || r.Status.AppliedWorkspaces != int32(len(f.Order)) {
			return fmt.Errorf("rollout %s/%s with %d/%d applied: %s; want RolloutCompleted with %d/%d", r.Status.Phase, r.Status.Reason,
				r.Status.AppliedWorkspaces, r.Status.TotalWorkspaces, r.Status.Message, len(f.Order), len(f.Order))
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if m, err := mirrorOf(ctx, f, last, retired); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the hub still mirrors %s (%v): %v", retired, m != nil, err)
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, func() error {
		if r := rolloutOf(t, ctx, f); r.Status.Reason != magosv1.ReasonRolloutCompleted {
			return fmt.Errorf("rollout went %s after the destroy: %s", r.Status.Reason, r.Status.Message)
		}
		if lines := readLines(t, destroyed); len(lines) != 1 {
			return fmt.Errorf("destroy ledger %q, want exactly one line", lines)
		}
		return nil
	})
	if lines := readLines(t, destroyed); len(lines) != 1 || lines[0].Region != retiredRegion || lines[0].Release != "v1" {
		t.Errorf("destroy ledger %q, want one destroy of %s v1 and nothing else", lines, retiredRegion)
	}
	if got := readLines(t, ledger); !slices.Equal(got, applied) {
		t.Errorf("the apply ledger changed after the rollout completed: %q, was %q", got, applied)
	}
	for _, cluster := range f.Order {
		if ws := workspace(t, ctx, f, cluster); ws.Status.Phase != magosv1.PhaseApplied {
			t.Errorf("%s's %s is %s/%s, want it untouched (Applied)", cluster, demo.Workspace, ws.Status.Phase, ws.Status.Reason)
		}
	}
	t.Logf("[+%s] the rollout completed without %s; the destroy ledger holds one line", since(began), retired)

	// The last Workspace of the last step goes too, without destroyOnDelete: its finalizer goes
	// at once and nothing is destroyed. Its step now selects nothing, so the Rollout halts
	// (NoWorkspacesFound: a step that selects nothing is never skipped) until the step is
	// removed from it.
	if err := spoke.Delete(ctx, &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		ws, err := getWorkspace(ctx, spoke, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s's %s still there: %s/%s", last, demo.Workspace, ws.Status.Phase, ws.Status.Reason)
	})
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.Reason != magosv1.ReasonNoWorkspacesFound || r.Status.CurrentStepName != last {
			return fmt.Errorf("rollout at step %q, %s: %s; want NoWorkspacesFound at %s", r.Status.CurrentStepName, r.Status.Reason, r.Status.Message, last)
		}
		return nil
	})
	if n := stateResources(t, ctx, spoke, demo.Workspace); n != 3 {
		t.Errorf("the state of %s's %s holds %d resources after its deletion without destroyOnDelete, want all 3 kept", last, demo.Workspace, n)
	}
	if lines := readLines(t, destroyed); len(lines) != 1 {
		t.Errorf("destroy ledger %q after a deletion without destroyOnDelete, want only the earlier destroy", lines)
	}
	r := rolloutOf(t, ctx, f)
	r.Spec.Strategy.Steps = slices.DeleteFunc(r.Spec.Strategy.Steps, func(s magosv1.RolloutStep) bool { return s.Name == last })
	if err := f.Client("hub").Update(ctx, r); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, f, func(r *magosv1.Rollout) error {
		if r.Status.Reason != magosv1.ReasonRolloutCompleted || r.Status.TotalWorkspaces != int32(len(f.Order)-1) {
			return fmt.Errorf("rollout %s with %d Workspaces: %s; want RolloutCompleted with %d", r.Status.Reason, r.Status.TotalWorkspaces, r.Status.Message, len(f.Order)-1)
		}
		return nil
	})
	t.Logf("[+%s] %s's last Workspace deleted without destroyOnDelete: its state kept, the rollout halted at its empty step and completed once the step was removed",
		since(began), last)
}

// createRetired creates the Workspace TestDestroyUnderARollout deletes, in cluster: a copy of
// the demo's Workspace there (same repository, labels and Project, so the same step selects
// it) with destroyOnDelete, and its own VariableSet.
func createRetired(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string) {
	t.Helper()
	src := workspace(t, ctx, f, cluster)
	vars := &magosv1.VariableSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: retiredVars},
		Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{
			{Name: "region", Value: ptr.To(retiredRegion)},
			{Name: "healthy", Value: ptr.To("true"), HCL: true},
		}},
	}
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: retired, Labels: src.Labels},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef:      src.Spec.ProjectRef,
			Source:          src.Spec.Source,
			Terraform:       src.Spec.Terraform,
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: retiredVars}},
			DestroyOnDelete: true,
		},
	}
	for _, o := range []client.Object{vars, ws} {
		if err := f.Client(cluster).Create(ctx, o); err != nil {
			t.Fatalf("creating %s in %s: %v", o.GetName(), cluster, err)
		}
	}
}

// waitsForItsDestroy checks that the deleted Workspace key of cluster still waits for the grant of its
// destroy run: Deleting/DestroyPending in that run, its finalizer kept, no grant naming the
// run on it nor on its mirror, and no line in the destroy ledger.
func waitsForItsDestroy(ctx context.Context, f *devfleet.Fleet, cluster string, key client.ObjectKey, run, destroyed string) error {
	ws, err := getWorkspace(ctx, f.Client(cluster), key)
	if err != nil {
		return err
	}
	if ws.Status.Phase != magosv1.PhaseDeleting || ws.Status.Reason != magosv1.ReasonDestroyPending || ws.Status.CurrentRunID != run {
		return fmt.Errorf("%s is %s/%s run %s, want Deleting/DestroyPending in run %s", key.Name, ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID, run)
	}
	if !controllerutil.ContainsFinalizer(ws, keys.Finalizer) {
		return fmt.Errorf("%s lost its finalizer", key.Name)
	}
	if ws.Annotations[keys.GrantedRun] == run {
		return fmt.Errorf("%s holds a grant for its destroy run %s", key.Name, run)
	}
	m, err := mirrorOf(ctx, f, cluster, key.Name)
	if err != nil {
		return err
	}
	if m.Annotations[keys.GrantedRun] == run {
		return fmt.Errorf("the hub granted the destroy run %s of %s", run, key.Name)
	}
	raw, err := os.ReadFile(destroyed)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if len(raw) > 0 {
		return fmt.Errorf("the destroy ledger has %q: something was destroyed", raw)
	}
	return nil
}

// pokeAnnotation is an annotation that means nothing to Magos. The test sets it on a spoke's
// Workspace to wake up its agent (any change to the annotations makes the agent reconcile the
// Workspace), as a person or a tool touching the object would.
const pokeAnnotation = "e2e.magosproject.io/poke"

// poke sets pokeAnnotation to n on the Workspace key of cluster and waits until the hub's
// mirror carries it: by then the agent has seen the change, so its reconcile is under way or
// done.
func poke(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string, key client.ObjectKey, n int) {
	t.Helper()
	value := strconv.Itoa(n)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{pokeAnnotation: value}}})
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := f.Client(cluster).Patch(ctx, ws, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("poking %s: %v", key.Name, err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		m, err := mirrorOf(ctx, f, cluster, key.Name)
		if err != nil {
			return err
		}
		if m.Annotations[pokeAnnotation] != value {
			return fmt.Errorf("the hub's mirror of %s has %s=%q, want %q", key.Name, pokeAnnotation, m.Annotations[pokeAnnotation], value)
		}
		return nil
	})
}

// getWorkspace reads a spoke's Workspace.
func getWorkspace(ctx context.Context, c client.Client, key client.ObjectKey) (*magosv1.Workspace, error) {
	var ws magosv1.Workspace
	if err := c.Get(ctx, key, &ws); err != nil {
		return nil, err
	}
	return &ws, nil
}

// mirrorOf returns the hub's mirror of the Workspace name (namespace default) of cluster, or a
// NotFound error.
func mirrorOf(ctx context.Context, f *devfleet.Fleet, cluster, name string) (*magosv1.Workspace, error) {
	var list magosv1.WorkspaceList
	if err := f.Client("hub").List(ctx, &list, client.InNamespace(mirror.Namespace(cluster)),
		client.MatchingLabelsSelector{Selector: mirror.OnlyMirrors()}); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if o := mirror.OriginOf(cluster, &list.Items[i]); o.Namespace == corev1.NamespaceDefault && o.Name == name {
			return &list.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(magosv1.GroupVersion.WithResource("workspaces").GroupResource(), name)
}

// waitRollout waits until the Rollout's status, for its current spec, passes check.
func waitRollout(t *testing.T, ctx context.Context, f *devfleet.Fleet, check func(*magosv1.Rollout) error) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() error {
		r := rolloutOf(t, ctx, f)
		if r.Status.ObservedGeneration != r.Generation {
			return fmt.Errorf("rollout status of generation %d, spec at %d", r.Status.ObservedGeneration, r.Generation)
		}
		return check(r)
	})
}

// magosctl runs the CLI against cluster ("hub" or a spoke) in namespace default.
func magosctl(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := cli.NewCommand(&out, &out)
	cmd.SetArgs(append([]string{"--kubeconfig", f.Kubeconfig(cluster), "-n", corev1.NamespaceDefault}, args...))
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("magosctl %s: %v: %s", strings.Join(args, " "), err, out.String())
	}
}

// readLines reads a ledger file, failing the test on a malformed one.
func readLines(t *testing.T, path string) []ledgerLine {
	t.Helper()
	lines, err := readLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// regionsOf returns the regions of the ledger's lines, sorted.
func regionsOf(lines []ledgerLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Region)
	}
	slices.Sort(out)
	return out
}

// stateResources returns how many resources the state of the Workspace name (namespace default)
// holds, from its state Secret in the cluster of c (the kubernetes backend's gzipped JSON).
func stateResources(t *testing.T, ctx context.Context, c client.Client, name string) int {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: "tfstate-default-" + name}, &s); err != nil {
		t.Fatalf("the state Secret of %s: %v", name, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(s.Data["tfstate"]))
	if err != nil {
		t.Fatalf("the state of %s is not gzipped: %v", name, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Resources []json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(raw, &state); err != nil {
		t.Fatalf("decoding the state of %s: %v", name, err)
	}
	return len(state.Resources)
}

// since is the time since began, rounded for the log.
func since(began time.Time) time.Duration { return time.Since(began).Round(100 * time.Millisecond) }
