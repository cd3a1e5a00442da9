package hubsync

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// The run output on the hub: unless a Workspace opts out (spec.runHistory.copyToHub: false),
// the output Secret of each operation its status.runs names (pkg/runoutput) is copied to the
// cluster's hub namespace, named after the mirror and owned by it, so that readers of the hub
// see plan text and logs without credentials to the spoke.
//
// Which copies exist follows from the mirror alone: a copy is made before the mirror's status
// that names its operation is written, so every operation the mirror's status names (when its
// spec does not opt out) has its copy. The syncer copies what the new status names and the
// mirror's does not yet, writes the status, then deletes the copies of what the old status
// named and the new one does not. The agent may create and delete Secrets in its hub namespace,
// never read them: it needs to know nothing else. A copy left behind by an agent that stopped
// between the status and the deletion goes with the mirror (owner reference).

// hubOutputs returns the output Secrets the mirror (or desired mirror) m stands for on the hub:
// the name of each copy, with the name of the spoke Secret it copies. None when m's spec opts
// out.
func hubOutputs(m *magosv1.Workspace) map[string]string {
	if !m.Spec.CopiesRunOutputToHub() {
		return nil
	}
	out := map[string]string{}
	for _, rec := range m.Status.Runs {
		for _, op := range rec.Operations {
			if op.OutputSecret != "" {
				out[runoutput.SecretName(m.Name, rec.RunID, runner.Operation(op.Operation))] = op.OutputSecret
			}
		}
	}
	return out
}

// copyRunOutput copies to the hub, as the copies of the mirror m, the output Secrets in
// wanted (hubOutputs of the desired mirror) that are not in had (hubOutputs of m as the hub
// held it). A spoke Secret already gone (its run left the history) is skipped; a hub that
// refuses the copy (one whose agent Role predates run output copies) is logged and skipped, so
// that mirroring goes on.
func (r *syncer) copyRunOutput(ctx context.Context, m *magosv1.Workspace, had, wanted map[string]string, spokeNamespace string) error {
	owner := metav1.OwnerReference{APIVersion: magosv1.GroupVersion.String(), Kind: "Workspace", Name: m.Name, UID: m.UID}
	for _, name := range slices.Sorted(maps.Keys(wanted)) {
		if _, ok := had[name]; ok {
			continue
		}
		src := &corev1.Secret{}
		key := client.ObjectKey{Namespace: spokeNamespace, Name: wanted[name]}
		if err := r.spokeLive.Get(ctx, key, src); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading run output %s to copy to the hub: %w", key, err)
		}
		cp, err := runoutput.Copy(src, m.Namespace, m.Name, owner)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "not copying to the hub what is not a run's output", "secret", key.Name)
			continue
		}
		switch err := r.hub.Create(ctx, cp); {
		case err == nil, apierrors.IsAlreadyExists(err):
		case apierrors.IsForbidden(err):
			ctrl.LoggerFrom(ctx).Error(err, "the hub refuses run output copies: plan text and logs of this Workspace stay in this cluster", "secret", cp.Name)
			return nil
		default:
			return fmt.Errorf("copying run output %s to the hub: %w", key.Name, err)
		}
	}
	return nil
}

// pruneRunOutput deletes from the hub namespace the copies in had (what the mirror's old status
// named) that are not in wanted (what its new one names): runs that left the history, or every
// copy when the Workspace opted out.
func (r *syncer) pruneRunOutput(ctx context.Context, namespace string, had, wanted map[string]string) error {
	for name := range had {
		if _, ok := wanted[name]; ok {
			continue
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if err := r.hub.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			return fmt.Errorf("deleting run output %s from the hub: %w", name, err)
		}
	}
	return nil
}
