// Package steer makes the requests a person makes of the hub to steer a change: approve or
// reject the plans a Rollout's step waits with, pause or resume a Rollout, and ask a Workspace of
// an agent cluster for a retry (or approve its plan) through its hub mirror. magosctl and the
// dashboard both make them through this package, so they check the same things and write the
// same objects.
//
// Every request is written with the client it is given, which must act as the person (their
// kubeconfig, or their own token in the dashboard): the API server's RBAC and the hub chart's
// admission policy decide whether they may, and each request names its writer (approvedBy,
// rejectedBy, magosproject.io/paused-by, magosproject.io/requested-by), which the policy holds to
// the user the API server knows them as.
package steer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// Refusal is a request refused before anything was written, because what it is about cannot
// take it (a step that does not await approval, a run still under way), or because the object
// changed while it was made. Its message says why.
type Refusal struct{ msg string }

func (r *Refusal) Error() string { return r.msg }

func refuse(format string, args ...any) error { return &Refusal{msg: fmt.Sprintf(format, args...)} }

// IsRefusal reports whether err is (or wraps) a Refusal.
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}

// Rollout reads Rollout key.
func Rollout(ctx context.Context, c client.Reader, key client.ObjectKey) (*magosv1.Rollout, error) {
	r := &magosv1.Rollout{}
	if err := c.Get(ctx, key, r); err != nil {
		return nil, fmt.Errorf("rollout %s: %w", key, err)
	}
	return r, nil
}

// Approve writes, in user's name, the approval of the plans step of Rollout key waits with, as
// its status lists them, and removes the step's rejection if it has one. It refuses a step that
// does not await approval.
func Approve(ctx context.Context, c client.Client, key client.ObjectKey, step, user string, now time.Time) (*magosv1.StepApproval, error) {
	r, err := Rollout(ctx, c, key)
	if err != nil {
		return nil, err
	}
	plans, err := PlansAwaiting(r, step)
	if err != nil {
		return nil, fmt.Errorf("rollout %s: %w", key, err)
	}
	a := magosv1.StepApproval{Step: step, Plans: plans, ApprovedBy: user, ApprovedAt: metav1.NewTime(now.Truncate(time.Second))}
	r.Spec.Approvals = append(slices.DeleteFunc(r.Spec.Approvals, func(x magosv1.StepApproval) bool { return x.Step == step }), a)
	r.Spec.Rejections = slices.DeleteFunc(r.Spec.Rejections, func(x magosv1.StepRejection) bool { return x.Step == step })
	if err := update(ctx, c, r, "approving (its plans may have too)"); err != nil {
		return nil, err
	}
	return &a, nil
}

// Reject writes, in user's name, the rejection of the plans step of Rollout key waits with, for
// reason, and removes the step's approval if it has one: the step applies none of them. It
// refuses a step that does not await approval, and an empty reason.
func Reject(ctx context.Context, c client.Client, key client.ObjectKey, step, reason, user string, now time.Time) (*magosv1.StepRejection, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, refuse("rollout %s: a rejection needs a reason", key)
	}
	r, err := Rollout(ctx, c, key)
	if err != nil {
		return nil, err
	}
	plans, err := PlansAwaiting(r, step)
	if err != nil {
		return nil, fmt.Errorf("rollout %s: %w", key, err)
	}
	x := magosv1.StepRejection{Step: step, Plans: plans, Reason: reason, RejectedBy: user, RejectedAt: metav1.NewTime(now.Truncate(time.Second))}
	r.Spec.Rejections = append(slices.DeleteFunc(r.Spec.Rejections, func(y magosv1.StepRejection) bool { return y.Step == step }), x)
	r.Spec.Approvals = slices.DeleteFunc(r.Spec.Approvals, func(a magosv1.StepApproval) bool { return a.Step == step })
	if err := update(ctx, c, r, "rejecting (its plans may have changed)"); err != nil {
		return nil, err
	}
	return &x, nil
}

// SetPaused pauses (or resumes) Rollout key in user's name: spec.paused and the annotation
// magosproject.io/paused-by, in one merge patch.
func SetPaused(ctx context.Context, c client.Client, key client.ObjectKey, paused bool, user string) error {
	r := &magosv1.Rollout{}
	r.Namespace, r.Name = key.Namespace, key.Name
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{keys.PausedBy: user}},
		"spec":     map[string]any{"paused": paused},
	})
	if err := c.Patch(ctx, r, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("rollout %s: %w", key, err)
	}
	return nil
}

// PlansAwaiting is what an approval or rejection of step names: the plans the step waits with,
// as the Rollout's status lists them. It refuses a step that does not require approval or does
// not await it, and a status that does not describe the Rollout's current spec.
func PlansAwaiting(r *magosv1.Rollout, step string) ([]magosv1.ApprovedPlan, error) {
	spec, err := StepOf(r, step)
	if err != nil {
		return nil, err
	}
	if !spec.RequireApproval {
		return nil, refuse("step %s does not require approval (steps[].requireApproval)", step)
	}
	st, err := DecidedStatus(r, step)
	if err != nil {
		return nil, err
	}
	if st == nil || st.Phase != magosv1.StepAwaitingApproval || len(st.Plans) == 0 {
		phase := "not decided yet"
		if st != nil {
			phase = st.Phase
		}
		return nil, refuse("step %s is not awaiting approval (it is %s)", step, phase)
	}
	plans := make([]magosv1.ApprovedPlan, 0, len(st.Plans))
	for _, p := range st.Plans {
		plans = append(plans, magosv1.ApprovedPlan{Workspace: p.Workspace, Revision: p.Revision, Digest: p.Digest})
	}
	return plans, nil
}

// StepOf is step of r's spec; a step r does not have is a Refusal naming those it has.
func StepOf(r *magosv1.Rollout, step string) (*magosv1.RolloutStep, error) {
	i := slices.IndexFunc(r.Spec.Strategy.Steps, func(s magosv1.RolloutStep) bool { return s.Name == step })
	if i < 0 {
		names := make([]string, len(r.Spec.Strategy.Steps))
		for j, s := range r.Spec.Strategy.Steps {
			names[j] = s.Name
		}
		return nil, refuse("no step %q (steps: %s)", step, strings.Join(names, ", "))
	}
	return &r.Spec.Strategy.Steps[i], nil
}

// DecidedStatus is the status of step as the hub last decided r (nil when it has not decided
// the step yet). A status that does not describe r's current spec is a Refusal: what it says
// may no longer hold.
func DecidedStatus(r *magosv1.Rollout, step string) (*magosv1.StepStatus, error) {
	if r.Status.ObservedGeneration != r.Generation {
		return nil, refuse("the hub has not decided the Rollout's latest spec yet (generation %d, status of %d): try again in a moment", r.Generation, r.Status.ObservedGeneration)
	}
	j := slices.IndexFunc(r.Status.Steps, func(s magosv1.StepStatus) bool { return s.Name == step })
	if j < 0 {
		return nil, nil
	}
	return &r.Status.Steps[j], nil
}

// Update writes r, as read and changed by the caller, with an update, not a patch: it fails if
// the Rollout changed since it was read (and with it what its status said), with a Refusal that
// asks to try again; doing says what the caller was doing.
func Update(ctx context.Context, c client.Client, r *magosv1.Rollout, doing string) error {
	return update(ctx, c, r, doing)
}

func update(ctx context.Context, c client.Client, r *magosv1.Rollout, doing string) error {
	if err := c.Update(ctx, r); err != nil {
		if apierrors.IsConflict(err) {
			return refuse("rollout %s/%s changed while %s: try again", r.Namespace, r.Name, doing)
		}
		return fmt.Errorf("rollout %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}

// Mirror reads the hub's mirror of Workspace ns/name of cluster. A Workspace the hub has no
// mirror of is an error saying so.
func Mirror(ctx context.Context, c client.Reader, cluster, ns, name string) (*magosv1.Workspace, error) {
	var m magosv1.Workspace
	if err := c.Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name(ns, name)}, &m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, refuse("workspace %s/%s of cluster %s: the hub has no mirror of it (is %s an agent cluster, and does the Workspace exist there?)", ns, name, cluster, cluster)
		}
		return nil, fmt.Errorf("workspace %s/%s of cluster %s: %w", ns, name, cluster, err)
	}
	return &m, nil
}

// RequestRun writes request (keys.RetryRun or keys.ApproveRun) for the current run of Workspace
// ns/name of cluster on its hub mirror, in user's name, after checking that the run can take it:
// a retry needs a run that ended (Applied, Failed, ValidationFailed or Planned), an approval a
// Planned run. The write is conditional on the mirror's version, so the request names the run
// it was checked against. It returns that run.
func RequestRun(ctx context.Context, c client.Client, cluster, ns, name, request, user string) (string, error) {
	if request != keys.RetryRun && request != keys.ApproveRun {
		return "", fmt.Errorf("steer: unknown request %q", request)
	}
	m, err := Mirror(ctx, c, cluster, ns, name)
	if err != nil {
		return "", err
	}
	run, phase := m.Status.CurrentRunID, m.Status.Phase
	switch {
	case run == "":
		return "", refuse("workspace %s/%s of cluster %s has no run yet", ns, name, cluster)
	case request == keys.RetryRun && !phase.Settled():
		return "", refuse("workspace %s/%s of cluster %s is %s (run %s): only a run that ended can be retried", ns, name, cluster, orDash(string(phase)), run)
	case request == keys.ApproveRun && phase != magosv1.PhasePlanned:
		return "", refuse("workspace %s/%s of cluster %s is %s (run %s): only a Planned run can be approved", ns, name, cluster, orDash(string(phase)), run)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": m.ResourceVersion,
		"annotations":     map[string]string{request: run, keys.RequestedBy: user},
	}})
	if err := c.Patch(ctx, m, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsConflict(err) {
			return "", refuse("workspace %s/%s of cluster %s changed while asking (its run may have moved on): try again", ns, name, cluster)
		}
		return "", fmt.Errorf("workspace %s/%s of cluster %s: %w", ns, name, cluster, err)
	}
	return run, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
