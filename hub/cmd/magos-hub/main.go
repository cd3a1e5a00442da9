// Command magos-hub runs the Magos Fleet hub.
//
//	magos-hub [controller] --config FILE [--leader-elect] [--metrics-bind-address ADDR]
//	          [--health-probe-bind-address ADDR] [--pprof-bind-address ADDR] [--log-level LEVEL] [--log-development]
//	magos-hub agent-kubeconfig --cluster NAME [--server URL] [--duration 24h]
//	magos-hub check [--config FILE] [--leader-elect] [--timeout 2m]
//
// controller (the default) runs the hub: the cluster registry (hot-reloaded from the config file),
// the multi-cluster provider, and the Rollout and Project controllers; it exits 1 without doing
// anything on an API server where another hub runs (hub/hubclaim). agent-kubeconfig prints the
// bootstrap kubeconfig of an agent cluster's agent (a token for its ServiceAccount on the hub).
// check is the magos-hub chart's `helm test`: it waits until a hub replica leads (with
// --leader-elect) and every cluster of the config file is registered, and prints them.
// All reach the hub's API server with --kubeconfig, $KUBECONFIG or the in-cluster config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/installcheck"
	"github.com/magosfleet/magos/pkg/logging"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/version"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "magos-hub:", err)
		os.Exit(1)
	}
}

// run runs a command until ctx ends; the command's output goes to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if slices.Contains(args, "--version") || len(args) > 0 && args[0] == "version" {
		_, err := fmt.Fprintln(stdout, version.Get())
		return err
	}
	cmd := "controller"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "controller":
		return controller(ctx, args)
	case "agent-kubeconfig":
		return agentKubeconfig(ctx, args, stdout)
	case "check":
		return check(ctx, args, stdout)
	default:
		return fmt.Errorf("unknown command %q: want controller, agent-kubeconfig, check or version", cmd)
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
	fs.String("pprof-bind-address", def.PprofBindAddress, "address of Go's pprof profiles, /debug/pprof/ (0 or empty turns them off)")
	fs.String("dashboard-bind-address", def.Dashboard.BindAddress, "address of the read-only HTTP API and web page, host:port (0 or empty turns it off)")
	fs.String("dashboard-cert-file", def.Dashboard.CertFile, "PEM certificate the dashboard serves HTTPS with (with --dashboard-key-file; neither: plain HTTP)")
	fs.String("dashboard-key-file", def.Dashboard.KeyFile, "PEM key of --dashboard-cert-file")
	fs.String("log-level", def.Log.Level, "debug, info, warn or error")
	fs.Bool("log-development", def.Log.Development, "human-readable logs")
	fs.Float32("kube-api-qps", def.KubeAPIQPS, "requests per second the hub makes to its API server, over every controller")
	fs.Int("kube-api-burst", def.KubeAPIBurst, "burst of requests the hub makes to its API server (at least --kube-api-qps)")
	fs.Duration("project-parallel-grace-period", def.ProjectParallelGracePeriod, "how long a new Project without a Rollout waits for one before it runs its Workspaces in parallel")
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
	// Kubernetes libraries that log through klog (the dashboard's token and access reviews) log
	// through the same logger.
	klog.SetLogger(log.WithName("klog"))
	log.Info("magos-hub starting", "version", version.Get(), "agentVersionsSupported", version.SupportedBy(version.Get()))
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the hub's API server: %w", err)
	}
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

	log.Info("starting the hub", "config", *file, "clusters", len(cfg.Clusters))
	return hub.Start(ctx)
}

func agentKubeconfig(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("agent-kubeconfig")
	cluster := fs.String("cluster", "", "the agent cluster's registered name (required)")
	server := fs.String("server", "", "the hub API server URL as the agent reaches it (default: the host of the hub kubeconfig)")
	duration := fs.Duration("duration", registry.DefaultBootstrapTokenLifetime, "requested lifetime of the agent's bootstrap token: long enough to install the agent, which renews its own (the API server may shorten it)")
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

// check waits until the hub runs: a replica holds the leader Lease (with --leader-elect) and
// every cluster of --config has its Cluster object. It prints the leader and the clusters.
func check(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("check")
	file := fs.String("config", os.Getenv("MAGOS_CONFIG"), "the hub's configuration file: each of its clusters must be registered")
	leaderElect := fs.Bool("leader-elect", false, "require a hub replica to hold the leader Lease")
	leNamespace := fs.String("leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election Lease (default: the pod's)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the hub")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var want []string
	if *file != "" {
		cfg, err := registry.LoadConfig(*file, nil)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		for _, cl := range cfg.Clusters {
			want = append(want, cl.Name)
		}
	}
	if *leaderElect && *leNamespace == "" {
		return errors.New("check: --leader-election-namespace (or $POD_NAMESPACE) is required with --leader-elect")
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the hub's API server: %w", err)
	}
	c, err := client.New(restCfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return fmt.Errorf("check: hub client: %w", err)
	}
	leader := "(leader election off)"
	var clusters magosv1.ClusterList
	err = installcheck.Until(ctx, *timeout, func(ctx context.Context) error {
		if *leaderElect {
			holder, err := installcheck.HeldLease(ctx, c, *leNamespace, app.LeaderElectionID)
			if err != nil {
				return fmt.Errorf("no hub replica leads: %w", err)
			}
			leader = holder
		}
		if err := c.List(ctx, &clusters); err != nil {
			return fmt.Errorf("listing Clusters: %w", err)
		}
		registered := map[string]bool{}
		for _, cl := range clusters.Items {
			registered[cl.Name] = true
		}
		var missing []string
		for _, name := range want {
			if !registered[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("clusters of %s not registered yet: %s", *file, strings.Join(missing, ", "))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	fmt.Fprintf(stdout, "hub leader: %s\nregistered clusters: %d\n", leader, len(clusters.Items))
	for _, cl := range clusters.Items {
		ready := "Unknown"
		if cond := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionReady); cond != nil {
			ready = string(cond.Status)
		}
		fmt.Fprintf(stdout, "  %s (%s) Ready=%s\n", cl.Name, cl.Spec.Transport, ready)
	}
	return nil
}
