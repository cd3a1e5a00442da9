package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

func newRetryCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "retry WORKSPACE",
		Short: "Ask a Workspace for a fresh run now (sets magosproject.io/reconcile-request; run against the Workspace's cluster)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			value := o.Now().UTC().Format(time.RFC3339Nano)
			return o.annotateWorkspace(cmd, args[0], keys.ReconcileRequest, value,
				"workspace %s/%s: fresh run requested at %s\n")
		},
	}
}

func newApproveCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "approve WORKSPACE",
		Short: "Approve applying a Workspace's plan (autoApply: false; run against the Workspace's cluster)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.annotateWorkspace(cmd, args[0], keys.Approved, "true", "workspace %s/%s: plan approved%.0s\n")
		},
	}
}

// annotateWorkspace sets one annotation on a Workspace with a merge patch, after checking that
// the Workspace exists and is not a hub mirror (whose annotations the agent overwrites).
func (o *Options) annotateWorkspace(cmd *cobra.Command, name, key, value, done string) error {
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return err
	}
	ctx := contextFor(cmd)
	var ws magosv1.Workspace
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ws); err != nil {
		return fmt.Errorf("workspace %s/%s: %w", ns, name, err)
	}
	if mirror.IsMirror(&ws) {
		return fmt.Errorf("workspace %s/%s is the hub's mirror of %s/%s in cluster %s: run this against that cluster (--context)",
			ns, name, ws.Labels[keys.OriginNamespace], ws.Labels[keys.OriginName], ws.Labels[keys.Cluster])
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err := c.Patch(ctx, &ws, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("workspace %s/%s: %w", ns, name, err)
	}
	_, err = fmt.Fprintf(o.Out, done, ns, name, value)
	return err
}
