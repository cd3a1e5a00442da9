package cli

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/version"
)

// versions is what `magosctl version` reports: the client's version, the hub's (as its leader
// names it on the leader Lease) and each registered cluster's agent, with the skew policy's
// verdict.
type versions struct {
	// Client is magosctl's own version.
	Client string `json:"client"`
	// Hub is the leading hub's version; empty when it could not be read (HubError says why).
	Hub string `json:"hub,omitempty"`
	// HubLeader is the replica holding the leader Lease, and HubLease the Lease (namespace/name).
	HubLeader string `json:"hubLeader,omitempty"`
	HubLease  string `json:"hubLease,omitempty"`
	HubError  string `json:"hubError,omitempty"`
	// Agents are the registered clusters, by name.
	Agents []agentVersion `json:"agents,omitempty"`
}

// agentVersion is one cluster's agent as its Cluster object reports it.
type agentVersion struct {
	Cluster   string `json:"cluster"`
	Transport string `json:"transport"`
	// Version is what the agent reports on its heartbeat Lease (empty: none yet, or a direct
	// cluster, whose agent does not report to the hub).
	Version string `json:"version,omitempty"`
	// Skew is "ok", or why the version is outside the policy (the hub's words on the Cluster
	// when it refused the agent).
	Skew string `json:"skew"`
}

func newVersionCommand(o *Options) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of magosctl, the hub and every cluster's agent, and whether each agent is within the version skew policy (run against the hub)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versions{Client: version.Get()}
			if !clientOnly {
				c, err := o.Client()
				if err != nil {
					return err
				}
				if err := v.read(contextFor(cmd), c); err != nil {
					return err
				}
			}
			if done, err := o.print(v); done {
				return err
			}
			return o.printVersions(v, clientOnly)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print magosctl's version only, without reaching the hub")
	return cmd
}

// read fills in the hub's and the agents' versions.
func (v *versions) read(ctx context.Context, c client.Client) error {
	var leases coordinationv1.LeaseList
	err := c.List(ctx, &leases, client.HasLabels{keys.HubVersion})
	switch {
	case err != nil:
		v.HubError = fmt.Sprintf("cannot list Leases to find the hub's leader Lease: %v", err)
	default:
		for _, l := range leases.Items {
			if l.Name != keys.HubLeaderLease {
				continue
			}
			v.Hub, v.HubLease = l.Labels[keys.HubVersion], l.Namespace+"/"+l.Name
			if l.Spec.HolderIdentity != nil {
				v.HubLeader = *l.Spec.HolderIdentity
			}
		}
		if v.Hub == "" {
			v.HubError = fmt.Sprintf("no leader Lease %s names a hub version (is the hub running, with leader election on?)", keys.HubLeaderLease)
		}
	}
	var clusters magosv1.ClusterList
	if err := c.List(ctx, &clusters); err != nil {
		return fmt.Errorf("listing clusters: %w", err)
	}
	sort.Slice(clusters.Items, func(i, j int) bool { return clusters.Items[i].Name < clusters.Items[j].Name })
	for _, cl := range clusters.Items {
		a := agentVersion{Cluster: cl.Name, Transport: cl.Spec.Transport, Version: cl.Status.AgentVersion, Skew: "ok"}
		_, reason := cl.Availability()
		switch {
		case reason == magosv1.ReasonAgentVersionSkew:
			if c := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionAvailable); c != nil {
				a.Skew = "refused: " + c.Message
			}
		case cl.Spec.Transport != magosv1.TransportAgent:
			a.Skew = "-"
		case a.Version == "":
			a.Skew = "unknown: no heartbeat yet"
		case v.Hub != "":
			if err := version.Compatible(v.Hub, a.Version); err != nil {
				a.Skew = "outside the policy: " + err.Error()
			}
		}
		v.Agents = append(v.Agents, a)
	}
	return nil
}

func (o *Options) printVersions(v versions, clientOnly bool) error {
	fmt.Fprintf(o.Out, "Client: %s\n", v.Client)
	if clientOnly {
		return nil
	}
	if v.Hub != "" {
		fmt.Fprintf(o.Out, "Hub:    %s (leader %s, Lease %s)\n", v.Hub, orDash(v.HubLeader), v.HubLease)
	} else {
		fmt.Fprintf(o.Out, "Hub:    unknown: %s\n", v.HubError)
	}
	if len(v.Agents) == 0 {
		fmt.Fprintln(o.Out, "No clusters are registered.")
		return nil
	}
	fmt.Fprintln(o.Out)
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tTRANSPORT\tAGENT VERSION\tSKEW")
	for _, a := range v.Agents {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", a.Cluster, a.Transport, orDash(a.Version), a.Skew)
	}
	return w.Flush()
}
