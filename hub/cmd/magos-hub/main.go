// Command magos-hub runs the Magos Fleet hub.
//
//	magos-hub [controller] --config FILE [--leader-elect] [--metrics-bind-address ADDR]
//	          [--health-probe-bind-address ADDR] [--log-level LEVEL] [--log-development]
//	magos-hub agent-kubeconfig --cluster NAME [--server URL] [--duration 8760h]
//
// controller (the default) runs the hub: the cluster registry (hot-reloaded from the config file),
// the multi-cluster provider, and the Rollout and Project controllers. agent-kubeconfig prints the
// bootstrap kubeconfig of an agent cluster's agent (a token for its ServiceAccount on the hub).
// Both reach the hub's API server with --kubeconfig, $KUBECONFIG or the in-cluster config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/project"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/logging"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "magos-hub:", err)
		os.Exit(1)
	}
}

// run runs a command until ctx ends; the command's output goes to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	cmd := "controller"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "controller":
		return controller(ctx, args)
	case "agent-kubeconfig":
		return agentKubeconfig(ctx, args, stdout)
	default:
		return fmt.Errorf("unknown command %q: want controller or agent-kubeconfig", cmd)
	}
}

func newFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.AddGoFlagSet(flag.CommandLine) // --kubeconfig (controller-runtime)
	return fs
}

func controller(ctx context.Context, args []string) error {
	def := registry.DefaultConfig()
	fs := newFlags("controller")
	file := fs.String("config", os.Getenv("MAGOS_CONFIG"), "the hub's configuration file (clusters; reloaded on change)")
	fs.Bool("leader-elect", def.LeaderElect, "run one active hub among replicas")
	fs.String("metrics-bind-address", def.MetricsBindAddress, "address of the Prometheus metrics endpoint (0 turns it off)")
	fs.String("health-probe-bind-address", def.HealthProbeBindAddress, "address of /healthz and /readyz (0 turns them off)")
	fs.String("log-level", def.Log.Level, "debug, info, warn or error")
	fs.Bool("log-development", def.Log.Development, "human-readable logs")
	leNamespace := fs.String("leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election Lease (default: the pod's)")
	leIdentity := fs.String("leader-election-identity", os.Getenv("POD_NAME"), "this replica's identity in the leader election Lease (default: the pod's name, else the host name and a random UUID)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := registry.LoadConfig(*file, fs)
	if err != nil {
		return err
	}
	log, err := logging.New(logging.Options{Development: cfg.Log.Development, Level: cfg.Log.Level})
	if err != nil {
		return fmt.Errorf("log options: %w", err)
	}
	ctrl.SetLogger(log)
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the hub's API server: %w", err)
	}
	// A step of many Workspaces is one merge patch each: client-go's default 20 requests/s
	// would make a 200-Workspace step take ten seconds of writes.
	restCfg.QPS, restCfg.Burst = 100, 200
	hub, err := app.New(app.Options{
		RestConfig:              restCfg,
		Config:                  cfg,
		ConfigFile:              *file,
		Flags:                   fs,
		LeaderElectionNamespace: *leNamespace,
		LeaderElectionIdentity:  *leIdentity,
		Logger:                  log,
	})
	if err != nil {
		return err
	}

	// The decision makers: Rollouts order a Project's Workspaces across the fleet; a Project
	// without a Rollout runs its Workspaces in parallel.
	if err := rollout.SetupWithManager(hub.Manager, rollout.Options{}); err != nil {
		return fmt.Errorf("setting up the Rollout controller: %w", err)
	}
	if err := project.SetupWithManager(hub.Manager, project.Options{}); err != nil {
		return fmt.Errorf("setting up the Project controller: %w", err)
	}

	log.Info("starting the hub", "config", *file, "clusters", len(cfg.Clusters))
	return hub.Manager.Start(ctx)
}

func agentKubeconfig(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("agent-kubeconfig")
	cluster := fs.String("cluster", "", "the agent cluster's registered name (required)")
	server := fs.String("server", "", "the hub API server URL as the agent reaches it (default: the host of the hub kubeconfig)")
	duration := fs.Duration("duration", 365*24*time.Hour, "requested lifetime of the agent's token (the API server may shorten it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cluster == "" {
		return errors.New("agent-kubeconfig: --cluster is required")
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the hub's API server: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := registry.AgentKubeconfig(ctx, restCfg, registry.AgentKubeconfigOptions{
		Cluster: *cluster, Server: *server, Duration: *duration,
	})
	if err != nil {
		return err
	}
	_, err = stdout.Write(raw)
	return err
}
