package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/steer"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

func newRetryCommand(o *Options) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "retry WORKSPACE [--cluster CLUSTER]",
		Short: "Ask a Workspace for a fresh run now",
		Long: "Ask a Workspace for a fresh run now. Against the Workspace's own cluster it sets\n" +
			"magosproject.io/reconcile-request. With --cluster, against the hub: it asks for a retry of the\n" +
			"Workspace's current run (which must have ended) on the hub's mirror, and the cluster's agent\n" +
			"carries it down; it needs the verb retry on the mirror (workspaces, in the cluster's hub\n" +
			"namespace). The new run is granted as any other, by the Workspace's Rollout or Project.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster != "" {
				return o.requestFromHub(cmd, cluster, args[0], keys.RetryRun)
			}
			value := o.Now().UTC().Format(time.RFC3339Nano)
			return o.annotateWorkspace(cmd, args[0], keys.ReconcileRequest, value,
				"workspace %s/%s: fresh run requested at %s\n")
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the registered cluster the Workspace lives in: act from the hub")
	return cmd
}

func newApproveCommand(o *Options) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "approve WORKSPACE [--cluster CLUSTER]",
		Short: "Approve applying a Workspace's plan (autoApply: false)",
		Long: "Approve applying a Workspace's plan (autoApply: false). Against the Workspace's own\n" +
			"cluster it sets magosproject.io/approved. With --cluster, against the hub: it approves the\n" +
			"plan of the Workspace's current run (which must be Planned) on the hub's mirror, and the\n" +
			"cluster's agent carries it down; it needs the verb approve on the mirror. It does not\n" +
			"approve a Rollout step that requires approval: use magosctl rollout approve.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster != "" {
				return o.requestFromHub(cmd, cluster, args[0], keys.ApproveRun)
			}
			return o.annotateWorkspace(cmd, args[0], keys.Approved, "true", "workspace %s/%s: plan approved%.0s\n")
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the registered cluster the Workspace lives in: act from the hub")
	return cmd
}

// requestFromHub writes a request (keys.RetryRun or keys.ApproveRun) for the current run of
// Workspace name (namespace -n) of cluster on its hub mirror, in the caller's own name
// (steer.RequestRun).
func (o *Options) requestFromHub(cmd *cobra.Command, cluster, name, key string) error {
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return err
	}
	ctx := contextFor(cmd)
	user, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	run, err := steer.RequestRun(ctx, c, cluster, ns, name, key, user)
	if err != nil {
		return err
	}
	what := "retry"
	if key == keys.ApproveRun {
		what = "approval"
	}
	_, err = fmt.Fprintf(o.Out, "workspace %s/%s of cluster %s: %s of run %s requested by %s; the agent of %s carries it down\n",
		ns, name, cluster, what, run, user, cluster)
	return err
}

// annotateWorkspace sets one annotation on a Workspace with a merge patch, after checking that
// the Workspace exists and is not a hub mirror (a request on a mirror goes through --cluster).
func (o *Options) annotateWorkspace(cmd *cobra.Command, name, key, value, done string) error {
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return err
	}
	ctx := contextFor(cmd)
	var ws magosv1.Workspace
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ws); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("workspace %s/%s: %w (from the hub, name its cluster: --cluster)", ns, name, err)
		}
		return fmt.Errorf("workspace %s/%s: %w", ns, name, err)
	}
	// The mirror's cluster is the namespace it lives in, and its origin what its labels say
	// once held to its name (mirror.Verify): its cluster label is the agent's word only.
	id, err := mirror.Verify(&ws)
	switch {
	case err != nil:
		return fmt.Errorf("workspace %s/%s is labelled a hub mirror, one the hub does not believe; run this against the cluster it mirrors (--context): %w", ns, name, err)
	case id.Mirror:
		return fmt.Errorf("workspace %s/%s is the hub's mirror of %s/%s in cluster %s: run this against that cluster (--context), or from the hub with -n %s --cluster %s",
			ns, name, id.Namespace, id.Name, id.Cluster, id.Namespace, id.Cluster)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err := c.Patch(ctx, &ws, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("workspace %s/%s: %w", ns, name, err)
	}
	_, err = fmt.Fprintf(o.Out, done, ns, name, value)
	return err
}
