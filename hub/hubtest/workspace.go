package hubtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// Revision is the commit the simulated mirrors of the benchmark report applied.
const Revision = "0123456789abcdef0123456789abcdef01234567"

// RunID mints a run ID as the Workspace controller does.
func RunID() string { return runner.NewRunID(time.Now()) }

// Workspace returns a Workspace of the given Project with the given labels.
func Workspace(ns, name, project string, labels map[string]string) *magosv1.Workspace {
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: project},
			Source:     magosv1.Source{RepoURL: "https://git.example.com/infra.git", TargetRevision: "main", Path: "."},
			Terraform:  magosv1.TerraformSpec{Binary: magosv1.BinaryOpenTofu, Version: "1.10.6"},
		},
	}
}

// Create creates a Workspace in a spoke of h.
func (h *Hub) Create(t testing.TB, cluster string, ws *magosv1.Workspace) {
	t.Helper()
	if err := h.Fleet.Spokes[cluster].Client.Create(context.Background(), ws); err != nil {
		t.Fatalf("creating Workspace %s/%s in %s: %v", ws.Namespace, ws.Name, cluster, err)
	}
}

// Rollout returns a Rollout of the Project project whose steps select the given labels, in
// order (one step per map, named by stepNames).
func Rollout(ns, project string, stepNames []string, selectors ...map[string]string) *magosv1.Rollout {
	ro := &magosv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: project},
		Spec:       magosv1.RolloutSpec{ProjectRef: project},
	}
	for i, sel := range selectors {
		ro.Spec.Strategy.Steps = append(ro.Spec.Strategy.Steps, magosv1.RolloutStep{
			Name: stepNames[i], Selector: magosv1.MatchLabels(sel),
		})
	}
	return ro
}

// CreateHub creates an object on the hub.
func (h *Hub) CreateHub(t testing.TB, obj client.Object) {
	t.Helper()
	if err := h.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s on the hub: %v", obj, obj.GetName(), err)
	}
}

// WaitRollout waits until the hub Rollout's status satisfies check.
func (h *Hub) WaitRollout(t testing.TB, ns, name string, check func(*magosv1.Rollout) error) *magosv1.Rollout {
	t.Helper()
	ro := &magosv1.Rollout{}
	testenv.Eventually(t, 0, func() error {
		if err := h.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, ro); err != nil {
			return err
		}
		return check(ro)
	})
	return ro
}

// Phase checks a Rollout's phase and reason.
func Phase(phase magosv1.Phase, reason string) func(*magosv1.Rollout) error {
	return func(ro *magosv1.Rollout) error {
		if ro.Status.Phase != phase || ro.Status.Reason != reason {
			return fmt.Errorf("rollout is %s/%s (%s), want %s/%s", ro.Status.Phase, ro.Status.Reason, ro.Status.Message, phase, reason)
		}
		return nil
	}
}
