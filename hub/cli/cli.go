// Package cli implements magosctl, the Magos Fleet command line: registered clusters and their
// health, where a Rollout stands across clusters, and the everyday actions (retry, approve,
// pause, resume). It is also installed as the kubectl plugin `kubectl magos`.
//
// Commands talk to the cluster of the current kubeconfig context, like kubectl: the hub for
// clusters and rollouts, the spoke that holds a Workspace for retry and approve.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	authenticationv1 "k8s.io/api/authentication/v1"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/magosfleet/magos/pkg/scheme"
)

// Options are the settings shared by every command.
type Options struct {
	// Config holds the kubectl-style flags (--kubeconfig, --context, -n, ...).
	Config *genericclioptions.ConfigFlags
	// Output is "" (a table), "yaml" or "json".
	Output string
	// Out and ErrOut are where commands write.
	Out, ErrOut io.Writer
	// Now is the clock (tests set it).
	Now func() time.Time
	// NewClient builds the client (tests may replace it); nil uses Config.
	NewClient func() (client.Client, error)
}

// NewCommand returns the root magosctl command.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := &Options{Config: genericclioptions.NewConfigFlags(true), Out: out, ErrOut: errOut, Now: time.Now}
	root := &cobra.Command{
		Use:           "magosctl",
		Short:         "Operate a Magos Fleet: clusters, rollouts, retries and approvals",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.Config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.Output, "output", "o", "", "output format: yaml or json (default: a table)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		switch o.Output {
		case "", "yaml", "json":
			return nil
		}
		return fmt.Errorf("--output %q: want yaml or json", o.Output)
	}
	root.AddCommand(
		newClustersCommand(o),
		newRolloutCommand(o),
		newRetryCommand(o),
		newApproveCommand(o),
		newRunsCommand(o),
		newPlanCommand(o),
		newLogsCommand(o),
		newAgentKubeconfigCommand(o),
	)
	return root
}

// Client returns a client for the current context.
func (o *Options) Client() (client.Client, error) {
	if o.NewClient != nil {
		return o.NewClient()
	}
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

// clientInNamespace is Client and Namespace together: most commands need both.
func (o *Options) clientInNamespace() (client.Client, string, error) {
	c, err := o.Client()
	if err != nil {
		return nil, "", err
	}
	ns, err := o.Namespace()
	return c, ns, err
}

// whoAmI returns the user name the API server knows the caller by (a SelfSubjectReview): the
// name approvals and requests are written in, which the hub's admission policies check.
func whoAmI(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("finding out who you are (SelfSubjectReview): %w", err)
	}
	return review.Status.UserInfo.Username, nil
}

// Namespace returns the namespace of -n or of the current context.
func (o *Options) Namespace() (string, error) {
	ns, _, err := o.Config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("resolving the namespace: %w", err)
	}
	return ns, nil
}

// print writes obj as YAML or JSON per --output, and reports whether it did.
func (o *Options) print(obj any) (bool, error) {
	switch o.Output {
	case "json":
		b, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintln(o.Out, string(b))
		return true, err
	case "yaml":
		b, err := yaml.Marshal(obj)
		if err != nil {
			return true, err
		}
		_, err = o.Out.Write(b)
		return true, err
	}
	return false, nil
}

func contextFor(cmd *cobra.Command) context.Context {
	if cmd.Context() != nil {
		return cmd.Context()
	}
	return context.Background()
}
