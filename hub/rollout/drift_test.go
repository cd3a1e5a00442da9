package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// driftFleet is one agent cluster whose mirrors the test writes itself, as the agent would.
type driftFleet struct {
	h       *dt.Hub
	cluster string
	ns      string
}

// mirror creates the mirror of Workspace <ns>/<name> of Project project, Pending with a new run
// after it applied dt.Revision; drift, when set, is its status.drift. It returns the mirror.
func (f *driftFleet) mirror(t *testing.T, project, name string, drift *magosv1.DriftStatus) *magosv1.Workspace {
	t.Helper()
	ctx := context.Background()
	origin := dt.Workspace(f.ns, name, project, map[string]string{"env": "prod"})
	m := dt.Workspace(mirror.Namespace(f.cluster), mirror.Name(f.ns, name), project, mirror.Labels(f.cluster, origin))
	f.h.CreateHub(t, m)
	m.Status = magosv1.WorkspaceStatus{
		Phase: magosv1.PhasePending, Reason: magosv1.ReasonScheduledReconcile, ObservedGeneration: 1,
		ObservedRevision: dt.Revision, CurrentRevision: dt.Revision, CurrentRunID: dt.RunID(), Drift: drift,
		Origin: &magosv1.WorkspaceOrigin{Cluster: f.cluster, Namespace: f.ns, Name: name, Generation: 1},
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: magosv1.ConditionReady, Status: metav1.ConditionUnknown, Reason: magosv1.ReasonScheduledReconcile, Message: "pending",
	})
	if err := f.h.Client.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// grant reads the mirror's grant: the run it names ("" when none).
func (f *driftFleet) grant(t *testing.T, m *magosv1.Workspace) string {
	t.Helper()
	var cur magosv1.Workspace
	if err := f.h.Client.Get(context.Background(), client.ObjectKeyFromObject(m), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Annotations[keys.ExecutionAllowed] != "true" {
		return ""
	}
	return cur.Annotations[keys.GrantedRun]
}

// driftEvents returns the notes of the DriftDetected Events recorded on the Rollout.
func (f *driftFleet) driftEvents(t *testing.T, rolloutName string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := f.h.Client.List(context.Background(), &list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Rollout" && e.Regarding.Name == rolloutName && e.Reason == magosv1.ReasonDriftDetected && e.Type == corev1.EventTypeWarning {
			out = append(out, e.Note)
		}
	}
	return out
}

// setAcceptances writes the Rollout's spec.driftAcceptances and returns its new generation.
func (f *driftFleet) setAcceptances(t *testing.T, name string, as ...magosv1.DriftAcceptance) int64 {
	t.Helper()
	// The hub's admission policy takes an acceptance only in its writer's own name.
	review, err := kubernetes.NewForConfigOrDie(f.h.Fleet.Hub.Config).AuthenticationV1().SelfSubjectReviews().Create(
		context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking the hub who the test is: %v", err)
	}
	for i := range as {
		as[i].AcceptedBy = review.Status.UserInfo.Username
	}
	var gen int64
	testenv.Eventually(t, 0, func() error {
		var ro magosv1.Rollout
		if err := f.h.Client.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, &ro); err != nil {
			return err
		}
		ro.Spec.DriftAcceptances = as
		if err := f.h.Client.Update(context.Background(), &ro); err != nil {
			return err
		}
		gen = ro.Generation
		return nil
	})
	return gen
}

// TestDriftGate: the Rollout controller reads the drift of the Workspaces from their mirrors'
// status.drift. A step whose drift is block, with a Workspace drifted at the commit it applied,
// grants no apply to any Workspace of it, and the Rollout says DriftDetected naming the
// Workspace (step DriftBlocked, status.steps[].drifted) with a Warning Event; an acceptance of
// another digest leaves it blocked; one of the drift's digest lets the step go. A step whose
// drift is warn grants, lists the drifted Workspace and records a Warning Event DriftDetected
// naming it, once.
func TestDriftGate(t *testing.T) {
	const ns, region = "drift", "region-a"
	h := dt.Start(t)
	ctx := context.Background()
	h.Namespace(t, ns)
	h.Namespace(t, mirror.Namespace(region))
	h.RegisterAgent(t, region, map[string]string{"region": region})
	f := &driftFleet{h: h, cluster: region, ns: ns}
	drifted := func(digest string) *magosv1.DriftStatus {
		return &magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: dt.Revision, PlanDigest: digest,
			CheckedAt: &metav1.Time{Time: time.Now().Truncate(time.Second)}, ResourceChanges: &magosv1.ResourceChanges{Change: 1}}
	}

	// Project web: web-a drifted, web-b not; its only step blocks on drift.
	webA := f.mirror(t, "web", "web-a", drifted("dd-2"))
	webB := f.mirror(t, "web", "web-b", nil)
	// Project shop: shop-a drifted; its only step warns.
	shopA := f.mirror(t, "shop", "shop-a", drifted("dd-9"))

	mgr := h.StartManager(t, dt.ManagerOptions{
		Setup: func(m mcmanager.Manager) error {
			return rollout.SetupWithManager(m, rollout.Options{SkipNameValidation: true})
		},
		Clusters: map[string]cluster.Cluster{region: dt.NamespacedCluster(t, h.Fleet.Hub.Config, mirror.Namespace(region), nil)},
	})
	mgr.WaitEngaged(t, region)
	web := dt.Rollout(ns, "web", []string{"prod"}, map[string]string{"env": "prod"})
	web.Spec.Strategy.Steps[0].Drift = magosv1.DriftBlock
	h.CreateHub(t, web)
	shop := dt.Rollout(ns, "shop", []string{"prod"}, map[string]string{"env": "prod"})
	shop.Spec.Strategy.Steps[0].Drift = magosv1.DriftWarn
	h.CreateHub(t, shop)

	webAKey := region + "/" + ns + "/web-a"
	blocked := func(gen int64) func(*magosv1.Rollout) error {
		return func(ro *magosv1.Rollout) error {
			if ro.Status.ObservedGeneration < gen {
				return fmt.Errorf("status of generation %d, want %d", ro.Status.ObservedGeneration, gen)
			}
			if err := dt.Phase(magosv1.PhaseReconciling, magosv1.ReasonDriftDetected)(ro); err != nil {
				return err
			}
			if !strings.Contains(ro.Status.Message, webAKey) {
				return fmt.Errorf("message %q does not name %s", ro.Status.Message, webAKey)
			}
			if s := ro.Status.Steps[0]; s.Phase != magosv1.StepDriftBlocked || !slices.Equal(s.Drifted, []string{webAKey}) {
				return fmt.Errorf("step %s is %s, drifted %v; want DriftBlocked, drifted %s", s.Name, s.Phase, s.Drifted, webAKey)
			}
			return nil
		}
	}
	noApply := func(what string) {
		t.Helper()
		for _, m := range []*magosv1.Workspace{webA, webB} {
			if run := f.grant(t, m); run != "" {
				t.Fatalf("%s: %s was granted run %s in a step blocked by drift", what, m.Name, run)
			}
		}
	}

	// Blocked: no grant, DriftDetected naming web-a, and a Warning Event naming it.
	h.WaitRollout(t, ns, "web", blocked(1))
	noApply("blocked")
	testenv.Eventually(t, 0, func() error {
		if notes := f.driftEvents(t, "web"); len(notes) != 1 || !strings.Contains(notes[0], webAKey) {
			return fmt.Errorf("DriftDetected Events on Rollout web: %q, want one naming %s", notes, webAKey)
		}
		return nil
	})

	// An acceptance of other drift (another digest) does not count.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	gen := f.setAcceptances(t, "web", magosv1.DriftAcceptance{Workspace: webAKey, Digest: "dd-1", AcceptedBy: "alice", AcceptedAt: now})
	h.WaitRollout(t, ns, "web", blocked(gen))
	noApply("accepted with another digest")

	// An acceptance of the drift's digest lets the step go: both Workspaces are granted.
	gen = f.setAcceptances(t, "web", magosv1.DriftAcceptance{Workspace: webAKey, Digest: "dd-2", AcceptedBy: "alice", AcceptedAt: now})
	testenv.Eventually(t, 0, func() error {
		for _, m := range []*magosv1.Workspace{webA, webB} {
			if run := f.grant(t, m); run != m.Status.CurrentRunID {
				return fmt.Errorf("%s granted run %q, want %s", m.Name, run, m.Status.CurrentRunID)
			}
		}
		return nil
	})
	h.WaitRollout(t, ns, "web", func(ro *magosv1.Rollout) error {
		if ro.Status.ObservedGeneration < gen || ro.Status.Reason != magosv1.ReasonLevelProgressing || len(ro.Status.Steps[0].Drifted) > 0 {
			return fmt.Errorf("generation %d %s, drifted %v; want generation %d LevelProgressing, none drifted",
				ro.Status.ObservedGeneration, ro.Status.Reason, ro.Status.Steps[0].Drifted, gen)
		}
		return nil
	})

	// warn: shop-a is granted, listed as drifted, and one Warning Event names it.
	shopAKey := region + "/" + ns + "/shop-a"
	testenv.Eventually(t, 0, func() error {
		if run := f.grant(t, shopA); run != shopA.Status.CurrentRunID {
			return fmt.Errorf("shop-a granted run %q, want %s", run, shopA.Status.CurrentRunID)
		}
		return nil
	})
	h.WaitRollout(t, ns, "shop", func(ro *magosv1.Rollout) error {
		if ro.Status.Reason != magosv1.ReasonLevelProgressing || !slices.Equal(ro.Status.Steps[0].Drifted, []string{shopAKey}) {
			return fmt.Errorf("%s, drifted %v; want LevelProgressing, drifted %s", ro.Status.Reason, ro.Status.Steps[0].Drifted, shopAKey)
		}
		return nil
	})
	testenv.Eventually(t, 0, func() error {
		if notes := f.driftEvents(t, "shop"); len(notes) != 1 || !strings.Contains(notes[0], shopAKey) || !strings.Contains(notes[0], "drift: warn") {
			return fmt.Errorf("DriftDetected Events on Rollout shop: %q, want one naming %s", notes, shopAKey)
		}
		return nil
	})
	// Its run starts: the Rollout is decided again, and records no second Event.
	testenv.Eventually(t, 0, func() error {
		var cur magosv1.Workspace
		if err := h.Client.Get(ctx, client.ObjectKeyFromObject(shopA), &cur); err != nil {
			return err
		}
		cur.Status.Phase, cur.Status.Reason = magosv1.PhasePlanning, magosv1.ReasonPlanJobCreated
		return h.Client.Status().Update(ctx, &cur)
	})
	h.WaitRollout(t, ns, "shop", func(ro *magosv1.Rollout) error {
		if ro.Status.Steps[0].Running != 1 {
			return fmt.Errorf("step prod runs %d, want 1", ro.Status.Steps[0].Running)
		}
		return nil
	})
	if notes := f.driftEvents(t, "shop"); len(notes) != 1 {
		t.Fatalf("DriftDetected Events on Rollout shop after another decision: %q, want the one", notes)
	}
}
