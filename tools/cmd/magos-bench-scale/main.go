// Command magos-bench-scale measures one hub at fleet scale (make bench-scale): for each size
// it starts a hub API server, the real magos-hub and that many emulated agents (package
// scalebench), rolls commits out, and prints a table and one line
//
//	scale: clusters=N workspaces=W rollout_p90_s=A concurrent_p90_s=B hub_rss_mib=M hub_heap_mib=H requests_per_grant=R agent_writes_per_run=X agent_heartbeats_per_run=L apiserver_cpu_ms_per_run=Y
//
// on stdout; its progress goes to stderr.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/pkg/logging"
	"github.com/magosfleet/magos/tools/devfleet"
	"github.com/magosfleet/magos/tools/scalebench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "magos-bench-scale:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var sizes string
	var opts scalebench.Options
	var logLevel string
	cmd := &cobra.Command{
		Use:           "magos-bench-scale",
		Short:         "Measure one hub with N emulated agent clusters: rollout times, hub memory, requests per grant, agent writes and API server CPU per run",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			// The emulated agents log nothing unless asked: a thousand agents retrying conflicts
			// would bury the progress lines.
			logger := logr.Discard()
			if logLevel != "" {
				if logger, err = logging.New(logging.Options{Level: logLevel}); err != nil {
					return err
				}
			}
			ctrllog.SetLogger(logger)
			opts.Logger, opts.Progress = logger, cmd.ErrOrStderr()
			dir, err := os.MkdirTemp("", "magos-bench-scale-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			fmt.Fprintln(cmd.ErrOrStderr(), "bench-scale: building magos-hub")
			if err := devfleet.BuildBinaries(cmd.Context(), filepath.Join(dir, "bin")); err != nil {
				return err
			}
			opts.HubBinary = filepath.Join(dir, "bin", "magos-hub")
			var lines []string
			for _, n := range ns {
				o := opts
				o.Clusters = n
				o.Dir = filepath.Join(dir, fmt.Sprintf("clusters-%d", n))
				if err := os.MkdirAll(o.Dir, 0o755); err != nil {
					return err
				}
				res, err := scalebench.Run(cmd.Context(), o)
				if err != nil {
					if log, rerr := os.ReadFile(filepath.Join(o.Dir, "magos-hub.log")); rerr == nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "bench-scale: the end of magos-hub's log:\n%s\n", tail(log, 6000))
					}
					return fmt.Errorf("clusters=%d: %w", n, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s\n", res.Table())
				lines = append(lines, res.Line())
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(lines, "\n"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizes, "clusters", "100", "the numbers of agent clusters to measure, comma-separated (each size runs on fresh API servers)")
	f.IntVar(&opts.Workspaces, "workspaces", 10, "Workspaces per cluster: one in the 3-stage Rollout, the others spread over the concurrent Rollouts")
	f.IntVar(&opts.Repeats, "repeats", 10, "how many commits the 3-stage Rollout rolls out one after the other (its p90 is over these)")
	f.IntVar(&opts.Concurrent, "concurrent", 100, "how many Rollouts roll one commit out at the same time")
	f.DurationVar(&opts.RunDelay, "run-delay", 0, "how long an emulated run takes from its grant to Applied (0: the control plane alone)")
	f.StringArrayVar(&opts.HubArgs, "hub-arg", nil, "one more argument for magos-hub, e.g. --hub-arg=--kube-api-qps=200 (repeatable)")
	f.DurationVar(&opts.Timeout, "timeout", 10*time.Minute, "the bound of each wait")
	f.StringVar(&logLevel, "log-level", "", "the emulated agents' and the benchmark's log level (debug, info, warn or error; default none)")
	return cmd
}

// parseSizes parses a comma-separated list of cluster counts.
func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 3 {
			return nil, fmt.Errorf("--clusters %q: want comma-separated numbers of clusters, each at least 3", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
