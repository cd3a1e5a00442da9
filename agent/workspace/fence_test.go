package workspace_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/hubsync"
	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// patchWorkspace merge-patches the Workspace (spec, labels, annotations) and returns it as written.
func patchWorkspace(t testing.TB, c client.Client, key types.NamespacedName, patch string) *magosv1.Workspace {
	t.Helper()
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	testenv.Eventually(t, 30*time.Second, func() error {
		return c.Patch(context.Background(), ws, client.RawPatch(types.MergePatchType, []byte(patch)))
	})
	return ws
}

// stillPending checks for a while that the Workspace waits in run runID without running it.
func stillPending(t testing.TB, c client.Client, key types.NamespacedName, runID string) {
	t.Helper()
	testenv.Consistently(t, 3*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhasePending || ws.Status.CurrentRunID != runID {
			return fmt.Errorf("%s/%s run %s, want Pending in run %s and nothing started",
				ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID, runID)
		}
		return nil
	})
}

// TestChangesWhilePendingMintNewRuns: a label change and a spec change while a run waits for
// its grant each mint a new run (ConfigurationChanged), minted for the current generation and
// labels; the grants decided for the old runs are stale and run nothing; the grant for the
// last run runs the new spec.
func TestChangesWhilePendingMintNewRuns(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{
		"a/main.tf": moduleOK,
		"b/main.tf": strings.Replace(moduleOK, `"hello"`, `"bonjour"`, 1),
	})
	key := newWorkspace(t, c, ns, "moving", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Labels = map[string]string{"region": "eu"}
		ws.Spec.Source.Path = "a"
	})
	first := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	if first.Status.ObservedGeneration != first.Generation || first.Status.CurrentRunFor == "" {
		t.Errorf("run %s minted for generation %d (%q), want generation %d and a digest", first.Status.CurrentRunID,
			first.Status.ObservedGeneration, first.Status.CurrentRunFor, first.Generation)
	}

	// The hub decides steps by labels: new labels, new run.
	patchWorkspace(t, c, key, `{"metadata":{"labels":{"region":"us"}}}`)
	second := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, first.Status.CurrentRunID)
	if second.Status.CurrentRunFor == first.Status.CurrentRunFor {
		t.Errorf("currentRunFor %q unchanged by a label change", second.Status.CurrentRunFor)
	}
	grant(t, c, key, first.Status.CurrentRunID)
	waitEvent(t, c, key, "StaleGrant")
	stillPending(t, c, key, second.Status.CurrentRunID)

	// A spec change (here the module path): new run, minted for the new generation.
	after := patchWorkspace(t, c, key, `{"spec":{"source":{"path":"b"}}}`)
	third := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, second.Status.CurrentRunID)
	if third.Status.ObservedGeneration != after.Generation {
		t.Errorf("run %s minted for generation %d, want %d", third.Status.CurrentRunID, third.Status.ObservedGeneration, after.Generation)
	}
	grant(t, c, key, second.Status.CurrentRunID)
	stillPending(t, c, key, third.Status.CurrentRunID)

	ws := runToApplied(t, c, key, magosv1.ReasonConfigurationChanged, second.Status.CurrentRunID)
	if ws.Status.CurrentRunID != third.Status.CurrentRunID {
		t.Errorf("applied run %s, want %s", ws.Status.CurrentRunID, third.Status.CurrentRunID)
	}
	if out := stateOutputs(t, c, key); out["greeting"] != "bonjour" {
		t.Errorf("state outputs %v, want the new path's greeting=bonjour", out)
	}
}

// TestChangesWhilePlannedMintNewRuns: a plan waiting for approval is abandoned when the labels
// or the projectRef change; an approval given with the change approves nothing (it is
// consumed with the abandoned run) and nothing is applied until the new run is granted.
func TestChangesWhilePlannedMintNewRuns(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "replanned", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Labels = map[string]string{"tier": "1"}
		ws.Spec.AutoApply = ptr.To(false)
	})
	first := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, first.Status.CurrentRunID)
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))

	patchWorkspace(t, c, key, fmt.Sprintf(`{"metadata":{"labels":{"tier":"2"},"annotations":{%q:"true"}}}`, keys.Approved))
	second := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, first.Status.CurrentRunID)
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if _, ok := ws.Annotations[keys.Approved]; ok {
			return fmt.Errorf("the approval of the abandoned plan was kept")
		}
		return nil
	})
	stillPending(t, c, key, second.Status.CurrentRunID)

	grant(t, c, key, second.Status.CurrentRunID)
	waitFor(t, c, key, 120*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.CurrentRunID != second.Status.CurrentRunID {
			return fmt.Errorf("run %s, want %s", ws.Status.CurrentRunID, second.Status.CurrentRunID)
		}
		return inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded)(ws)
	})
	patchWorkspace(t, c, key, `{"spec":{"projectRef":{"name":"other"}}}`)
	third := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, second.Status.CurrentRunID)
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	stillPending(t, c, key, third.Status.CurrentRunID)
	if ws, err := getWorkspace(c, key); err != nil || ws.Status.ObservedRevision != "" {
		t.Fatalf("something was applied (%v): observedRevision %q", err, ws.Status.ObservedRevision)
	}
	if n := events(t, c, key, magosv1.ReasonApplySucceeded); len(n) != 0 {
		t.Errorf("applies %v, want none", n)
	}
}

// TestApplyRunsOnlyWhatWasPlanned: a VariableSet changed between the plan and its approval
// changes the inputs of the apply (the Workspace's generation does not change): the run is not
// applied but abandoned for a new one, whose plan and apply use the new value.
func TestApplyRunsOnlyWhatWasPlanned(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	ctx := context.Background()
	vs := &magosv1.VariableSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inputs"},
		Spec:       magosv1.VariableSetSpec{Variables: []magosv1.Variable{{Name: "greeting", Value: ptr.To("hi")}}},
	}
	if err := createWithRetry(ctx, c, vs); err != nil {
		t.Fatal(err)
	}
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "planned", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.AutoApply = ptr.To(false)
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "inputs"}}
	})
	first := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, first.Status.CurrentRunID)
	planned := waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
	if planned.Status.PlannedInputs == "" {
		t.Error("plannedInputs not recorded")
	}

	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vs), vs); err != nil {
			return err
		}
		vs.Spec.Variables[0].Value = ptr.To("salut")
		return c.Update(ctx, vs)
	})
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	second := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, first.Status.CurrentRunID)
	if err := contains(second.Status.Message, "changed since its plan"); err != nil {
		t.Error(err)
	}
	if second.Status.ObservedRevision != "" {
		t.Fatalf("run %s was applied on inputs it was not planned with", first.Status.CurrentRunID)
	}
	stillPending(t, c, key, second.Status.CurrentRunID)

	grant(t, c, key, second.Status.CurrentRunID)
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	ws := waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.CurrentRunID != second.Status.CurrentRunID {
		t.Errorf("applied run %s, want %s", ws.Status.CurrentRunID, second.Status.CurrentRunID)
	}
	if out := stateOutputs(t, c, key); out["greeting"] != "salut" {
		t.Errorf("state outputs %v, want greeting=salut", out)
	}
}

// startHubbedAgent starts a cluster of its own with an agent connected to a hub, the cluster
// itself (its mirrors live in the cluster namespace of clusterName), and the namespace "apps"
// for Workspaces. The agent stops when the test ends.
func startHubbedAgent(t *testing.T, clusterName string) client.Client {
	t.Helper()
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{clusterName}})
	cluster := fleet.Spokes[clusterName]
	c := cluster.Client
	ctx := context.Background()
	for _, name := range []string{mirror.Namespace(clusterName), "apps"} {
		if err := createWithRetry(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := app.NewManager(app.Options{
		Config: cluster.Config,
		Runner: app.RunnerOptions{
			Mode:       app.RunnerLocal,
			Command:    []string{agentBin, "runner"},
			DataDir:    filepath.Join(t.TempDir(), "data"),
			Kubeconfig: cluster.Kubeconfig,
			BinaryPath: tofuPath,
		},
		SkipNameValidation: true,
		Logger:             ctrl.Log.WithName(clusterName + "-agent"),
		HubSync:            &hubsync.Options{ClusterName: clusterName, HubConfig: cluster.Config, ControllerName: "hubsync-" + clusterName},
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, ctx, "agent", mgr.Start)
	return c
}

// mirrorKey is the key of the hub's mirror of the Workspace key of the cluster clusterName.
func mirrorKey(clusterName string, key types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: mirror.Namespace(clusterName), Name: mirror.Name(key.Namespace, key.Name)}
}

// waitMirrorRun waits until the hub's mirror mkey reports run runID.
func waitMirrorRun(t testing.TB, c client.Client, mkey types.NamespacedName, runID string) {
	t.Helper()
	waitFor(t, c, mkey, 60*time.Second, func(m *magosv1.Workspace) error {
		if m.Status.CurrentRunID != runID {
			return fmt.Errorf("mirror reports run %q, want %s", m.Status.CurrentRunID, runID)
		}
		return nil
	})
}

// TestUnfencedGrantIgnoredWhenHubConnected: on an agent connected to a hub (here the hub is
// the cluster itself), a grant without granted-run written on the hub's mirror reaches the
// Workspace and runs nothing (a Warning event, UnfencedGrant, says to grant from the hub); the
// hub's fenced grant for the same run does run it.
func TestUnfencedGrantIgnoredWhenHubConnected(t *testing.T) {
	t.Parallel()
	const clusterName = "hubbed"
	c := startHubbedAgent(t, clusterName)

	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, "apps", "hubbed", repo.URL(), nil)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	runID := ws.Status.CurrentRunID
	mkey := mirrorKey(clusterName, key)
	waitMirrorRun(t, c, mkey, runID)

	// A person grants on the hub without naming the run: copied down, never run.
	annotate(t, c, mkey, map[string]any{keys.ExecutionAllowed: "true"})
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Annotations[keys.ExecutionAllowed] != "true" {
			return fmt.Errorf("the grant has not reached the Workspace")
		}
		return nil
	})
	notes := waitEvent(t, c, key, workspace.ReasonUnfencedGrant)
	if err := contains(notes[0], "grant run "+runID+" from the hub"); err != nil {
		t.Error(err)
	}
	stillPending(t, c, key, runID)

	// The hub's grant names the run: it runs.
	annotate(t, c, mkey, map[string]any{keys.GrantedRun: runID, keys.GrantedBy: keys.GrantedByRollout})
	ws = waitFor(t, c, key, 180*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.CurrentRunID != runID {
		t.Errorf("applied run %s, want %s", ws.Status.CurrentRunID, runID)
	}
}

// TestRunKeepsItsGrantWhenAStaleOneIsReplayed: on an agent connected to a hub, a run granted in
// full and planned keeps its grant: a stale grant replayed over it on the hub (another run)
// does not stop its apply once it is approved. (A run granted its plan only would wait for an
// apply grant of its own: TestPlanOnlyGrantWaitsForItsPlansApproval.)
func TestRunKeepsItsGrantWhenAStaleOneIsReplayed(t *testing.T) {
	t.Parallel()
	const clusterName = "replayed"
	c := startHubbedAgent(t, clusterName)

	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, "apps", "replayed", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.AutoApply = ptr.To(false) })
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	runID := ws.Status.CurrentRunID
	mkey := mirrorKey(clusterName, key)
	waitMirrorRun(t, c, mkey, runID)
	annotate(t, c, mkey, map[string]any{keys.ExecutionAllowed: "true", keys.GrantedRun: runID, keys.GrantedBy: keys.GrantedByRollout})
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))

	annotate(t, c, mkey, map[string]any{keys.GrantedRun: "20260101T000000-0badc0de"})
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Annotations[keys.GrantedRun] != "20260101T000000-0badc0de" {
			return fmt.Errorf("the replayed grant has not reached the Workspace")
		}
		return nil
	})
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.CurrentRunID != runID {
		t.Errorf("applied run %s, want %s", ws.Status.CurrentRunID, runID)
	}
}
