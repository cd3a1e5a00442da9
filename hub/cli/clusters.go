package cli

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

func newClustersCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "clusters",
		Short: "List the registered clusters, their health and the hub namespaces they are bound to (run against the hub)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.Client()
			if err != nil {
				return err
			}
			var list magosv1.ClusterList
			if err := c.List(contextFor(cmd), &list); err != nil {
				return fmt.Errorf("listing clusters: %w", err)
			}
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			if done, err := o.print(&list); done {
				return err
			}
			return o.printClusters(list.Items)
		},
	}
}

func (o *Options) printClusters(clusters []magosv1.Cluster) error {
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	header := "NAME\tTRANSPORT\tREADY\tAVAILABLE\tWORKSPACES\tHEARTBEAT\tNAMESPACES\tLABELS"
	if o.wide() {
		header += "\tAGENT VERSION\tMIRRORED\tSYNCED SINCE\tCLOCK OFFSET"
	}
	fmt.Fprintln(w, header)
	for _, cl := range clusters {
		ready, available := "Unknown", "Unknown"
		if c := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		if _, reason := cl.Availability(); reason != "" {
			available = reason
		}
		heartbeat := "-"
		if cl.Status.LastHeartbeatTime != nil {
			heartbeat = duration.HumanDuration(o.Now().Sub(cl.Status.LastHeartbeatTime.Time)) + " ago"
		}
		bound := "<none>"
		if len(cl.Spec.Namespaces) > 0 {
			bound = strings.Join(cl.Spec.Namespaces, ",")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", cl.Name, cl.Spec.Transport, ready, available,
			cl.Status.Workspaces, heartbeat, bound, formatLabels(cl.Labels))
		if o.wide() {
			synced := "-"
			if cl.Status.SyncedSince != nil {
				synced = cl.Status.SyncedSince.UTC().Format(time.RFC3339)
			}
			// How far the agent's clock runs from the hub's (status.clockOffset), as +1m30s.
			offset := "-"
			if cl.Status.ClockOffset != nil {
				offset = cl.Status.ClockOffset.Duration.String()
				if cl.Status.ClockOffset.Duration >= 0 {
					offset = "+" + offset
				}
			}
			fmt.Fprintf(w, "\t%s\t%d\t%s\t%s", orDash(cl.Status.AgentVersion), cl.Status.Mirrored, synced, offset)
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

func formatLabels(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ","
		}
		out += k + "=" + l[k]
	}
	return out
}
