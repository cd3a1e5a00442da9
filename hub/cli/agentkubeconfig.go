package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/magosfleet/magos/hub/registry"
)

func newAgentKubeconfigCommand(o *Options) *cobra.Command {
	var server string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "agent-kubeconfig CLUSTER",
		Short: "Print the bootstrap kubeconfig of an agent cluster's agent (run against the hub)",
		Long: "Print the bootstrap kubeconfig of an agent cluster's agent: a token for the\n" +
			"ServiceAccount the hub created for that cluster, which can write only the cluster's\n" +
			"namespace on the hub. Store it in a Secret in the spoke and install the agent chart.\n" +
			"The token is for the agent's first connection: the agent then renews its credentials\n" +
			"itself with short-lived tokens and keeps the last one in a Secret in its namespace, so\n" +
			"the bootstrap token may expire (default lifetime 24h).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.Config.ToRESTConfig()
			if err != nil {
				return fmt.Errorf("loading kubeconfig: %w", err)
			}
			raw, err := registry.AgentKubeconfig(contextFor(cmd), cfg, registry.AgentKubeconfigOptions{
				Cluster: args[0], Server: server, Duration: validity,
			})
			if err != nil {
				return err
			}
			_, err = o.Out.Write(raw)
			return err
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "the hub API server URL as the agent reaches it (default: the current context's server)")
	cmd.Flags().DurationVar(&validity, "duration", registry.DefaultBootstrapTokenLifetime, "requested lifetime of the bootstrap token: long enough to install the agent, which renews its own (the API server may shorten it)")
	return cmd
}
