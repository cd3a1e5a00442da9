// Package app assembles the agent: a controller-runtime manager for the spoke cluster with
// the Workspace controller, the ref watcher and a run launcher (Jobs or local processes).
// The magos-agent binary, tests and the local development environment all build the agent
// with NewManager.
package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/magosfleet/magos/agent/credentials"
	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/hubsync"
	"github.com/magosfleet/magos/agent/revision"
	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/runner"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
)

// Runner modes.
const (
	// RunnerJob runs every operation in a Kubernetes Job (production).
	RunnerJob = "job"
	// RunnerLocal runs every operation as a child process of the agent (development, tests).
	RunnerLocal = "local"
)

// LeaderElectionID is the leader Lease of the agent replicas when Options.LeaderElectionID is
// empty.
const LeaderElectionID = "magos-agent.magosproject.io"

// RunnerOptions says how runs execute.
type RunnerOptions struct {
	// Mode is RunnerJob (default) or RunnerLocal.
	Mode string
	// Image is the runner image of Jobs (required in job mode).
	Image string
	// ImagePullPolicy of Job containers (IfNotPresent if empty).
	ImagePullPolicy corev1.PullPolicy
	// StorageClass of the Workspaces' data volumes in job mode (the cluster's default if empty).
	StorageClass string
	// Resources of Job containers.
	Resources corev1.ResourceRequirements
	// Command runs the runner entrypoint in local mode ([<agent executable>, "runner"] if empty).
	Command []string
	// DataDir holds local runs' results, logs and plans (required in local mode).
	DataDir string
	// Kubeconfig reaches this cluster from a local run, for the kubernetes state backend. Empty
	// keeps state in files under DataDir.
	Kubeconfig string
	// BinaryPath is the tofu/terraform binary of local runs (PATH lookup if empty).
	BinaryPath string
	// Env is added to every local run's environment.
	Env []string
	// ProviderNetworkMirror is the https:// URL of a provider network mirror every run installs
	// providers from (runner.EnvProviderNetworkMirror); empty: none.
	ProviderNetworkMirror string
	// ProviderVolume is a volume holding a provider mirror, mounted into every run Job
	// (execution.JobOptions.ProviderVolume). Nil: the runner image's mirror only. Local runs
	// ignore it (the agent's configuration refuses it in local mode): they take
	// MAGOS_PROVIDER_MIRROR from the agent's environment.
	ProviderVolume *corev1.VolumeSource
}

// Options configures the agent.
type Options struct {
	// Config reaches the spoke cluster. Required.
	Config *rest.Config
	// Clock is the clock of the times the agent writes for the hub: when the ref watcher saw a
	// commit (detected-at). HubSync.Clock is the same for its Lease. time.Now if nil.
	Clock func() time.Time
	// Scheme is the scheme of the manager (built-in kinds and Magos kinds if nil).
	Scheme *runtime.Scheme
	// MetricsAddress serves /metrics ("0" or empty: off).
	MetricsAddress string
	// HealthAddress serves /healthz and /readyz ("0" or empty: off).
	HealthAddress string
	// LeaderElection runs only one active agent per cluster.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader Lease (the agent's namespace in a cluster).
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease (LeaderElectionID if empty).
	LeaderElectionID string
	// Runner says how runs execute.
	Runner RunnerOptions
	// DefaultReconcileInterval and MinReconcileInterval bound Workspace schedules.
	DefaultReconcileInterval, MinReconcileInterval time.Duration
	// MaxConcurrentReconciles of the Workspace controller.
	MaxConcurrentReconciles int
	// GitPollInterval is the default ref poll interval; MinGitPollInterval the shortest.
	GitPollInterval, MinGitPollInterval time.Duration
	// ResolveRevision overrides gitrepo.Resolve (tests).
	ResolveRevision func(context.Context, gitrepo.ResolveOptions) (string, error)
	// Logger is the manager's logger.
	Logger logr.Logger
	// SkipNameValidation allows several agents in one process (tests, the dev environment).
	SkipNameValidation bool
	// SecretNamespaces are the namespaces whose Secrets the agent reads: repository credentials
	// (watched) and the Secrets VariableSets name. Empty: every namespace. Workspaces in other
	// namespaces cannot run: their credentials and Secret variables cannot be read. With
	// namespaces here, the agent needs no right to read Secrets elsewhere (the magos-agent chart
	// grants it only these).
	SecretNamespaces []string
	// HubSync connects the agent to its hub (mirrors up, decisions down, heartbeat); nil runs
	// the agent without a hub.
	HubSync *hubsync.Options
	// HubGrants says a hub grants the cluster's runs by writing on its Workspaces itself (a
	// direct cluster): the Workspace controller then obeys only the hub's fenced grants, as
	// with HubSync (workspace.Options.HubConnected).
	HubGrants bool
	// InputsKeySecret is the Secret, in the agent's own namespace, that keeps the key of the
	// Workspaces' status.plannedInputs (workspace.Options.InputsKeySecret); empty: a key in
	// memory only.
	InputsKeySecret types.NamespacedName
	// MandatoryPolicies name the ValidatingPolicies every plan of the cluster is checked against,
	// whatever the Workspace's or Project's policySelector (workspace.Options.MandatoryPolicies).
	MandatoryPolicies []string
}

// CacheOptions are the agent's cache rules: Workspaces that are not mirrors only
// (mirror.NotMirrors: an agent in the hub's own cluster never sees, let alone runs, the hub's
// mirrors); only the
// Jobs and Pods of runs; only repository credential Secrets, and only in secretNamespaces when
// any are given (all namespaces otherwise).
func CacheOptions(secretNamespaces ...string) (cache.Options, error) {
	notMirror := mirror.NotMirrors()
	runs, err := labels.Parse(keys.JobType)
	if err != nil {
		return cache.Options{}, err
	}
	repoSecrets := labels.SelectorFromSet(labels.Set{credentials.SecretTypeLabel: credentials.SecretTypeRepository})
	secrets := cache.ByObject{Label: repoSecrets}
	if len(secretNamespaces) > 0 {
		secrets.Namespaces = map[string]cache.Config{}
		for _, ns := range secretNamespaces {
			secrets.Namespaces[ns] = cache.Config{}
		}
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&magosv1.Workspace{}: {Label: notMirror},
		&batchv1.Job{}:       {Label: runs},
		&corev1.Pod{}:        {Label: runs},
		&corev1.Secret{}:     secrets,
	}}, nil
}

// NewManager builds the agent for the cluster opts.Config reaches. Start the manager to run it.
func NewManager(opts Options) (manager.Manager, error) {
	if opts.Config == nil {
		return nil, errors.New("agent: a cluster config is required")
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = magosscheme.New()
	}
	cacheOpts, err := CacheOptions(opts.SecretNamespaces...)
	if err != nil {
		return nil, fmt.Errorf("agent: cache options: %w", err)
	}
	addr := func(a string) string {
		if a == "" {
			return "0"
		}
		return a
	}
	id := opts.LeaderElectionID
	if id == "" {
		id = LeaderElectionID
	}
	mopts := ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: addr(opts.MetricsAddress)},
		HealthProbeBindAddress:  addr(opts.HealthAddress),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        id,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		Logger:                  opts.Logger,
	}
	if opts.SkipNameValidation {
		mopts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	}
	mgr, err := ctrl.NewManager(opts.Config, mopts)
	if err != nil {
		return nil, fmt.Errorf("agent: creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}

	launcher, err := newLauncher(mgr, opts)
	if err != nil {
		return nil, err
	}
	wopts := workspace.Options{
		Launcher:                 launcher,
		DefaultReconcileInterval: opts.DefaultReconcileInterval,
		MinReconcileInterval:     opts.MinReconcileInterval,
		MaxConcurrentReconciles:  opts.MaxConcurrentReconciles,
		// Connected to a hub, the hub is the only authority: no unfenced (manual) grants.
		HubConnected:      opts.HubSync != nil || opts.HubGrants,
		InputsKeySecret:   opts.InputsKeySecret,
		MandatoryPolicies: opts.MandatoryPolicies,
	}
	ropts := revision.Options{DefaultInterval: opts.GitPollInterval, MinInterval: opts.MinGitPollInterval, Now: opts.Clock}
	if opts.ResolveRevision != nil {
		wopts.ResolveRevision = opts.ResolveRevision
		ropts.Resolve = opts.ResolveRevision
	}
	if err := workspace.SetupWithManager(mgr, wopts); err != nil {
		return nil, fmt.Errorf("agent: workspace controller: %w", err)
	}
	if _, err := revision.SetupWithManager(mgr, ropts); err != nil {
		return nil, fmt.Errorf("agent: ref watcher: %w", err)
	}

	if opts.HubSync != nil {
		if err := hubsync.SetupWithManager(mgr, *opts.HubSync); err != nil {
			return nil, fmt.Errorf("connecting to the hub: %w", err)
		}
	}

	return mgr, nil
}

func newLauncher(mgr manager.Manager, opts Options) (execution.Launcher, error) {
	switch opts.Runner.Mode {
	case RunnerJob, "":
		return execution.NewJobLauncher(mgr, execution.JobOptions{
			Image:                 opts.Runner.Image,
			ImagePullPolicy:       opts.Runner.ImagePullPolicy,
			Resources:             opts.Runner.Resources,
			StorageClassName:      opts.Runner.StorageClass,
			ProviderNetworkMirror: opts.Runner.ProviderNetworkMirror,
			ProviderVolume:        opts.Runner.ProviderVolume,
		})
	case RunnerLocal:
		l, err := execution.NewLocalLauncher(execution.LocalOptions{
			Command:    opts.Runner.Command,
			DataDir:    opts.Runner.DataDir,
			Kubeconfig: opts.Runner.Kubeconfig,
			BinaryPath: opts.Runner.BinaryPath,
			Env:        localEnv(opts.Runner),
			Reader:     mgr.GetAPIReader(),
			Logger:     mgr.GetLogger().WithName("local-runner"),
		})
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(manager.RunnableFunc(l.Run)); err != nil {
			return nil, err
		}
		return l, nil
	default:
		return nil, fmt.Errorf("agent: runner mode %q: want %q or %q", opts.Runner.Mode, RunnerJob, RunnerLocal)
	}
}

// localEnv is what every local run's environment gets besides the agent's own: r.Env, and the
// provider network mirror.
func localEnv(r RunnerOptions) []string {
	env := slices.Clip(r.Env)
	if r.ProviderNetworkMirror != "" {
		env = append(env, runner.EnvProviderNetworkMirror+"="+r.ProviderNetworkMirror)
	}
	return env
}
