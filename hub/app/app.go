// Package app builds the hub: a multicluster-runtime manager whose provider is the fleet (every
// registered cluster, agent or direct), with the cluster registry and its Cluster status
// controller, and the decision makers, the Rollout and Project controllers. The magos-hub binary
// and the tests all build the hub through New (the local development environment runs the
// magos-hub binary); magos-hub runs it with Hub.Start, which refuses to start beside another hub
// on the same API server (package hubclaim).
package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/magosfleet/magos/hub/dashboard"
	"github.com/magosfleet/magos/hub/decider"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/hub/hubclaim"
	"github.com/magosfleet/magos/hub/notify"
	"github.com/magosfleet/magos/hub/project"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/version"
)

// LeaderElectionID is the Lease the hub replicas elect their leader with.
const LeaderElectionID = keys.HubLeaderLease

// Options configures a hub.
type Options struct {
	// RestConfig reaches the hub's API server. Config's kubeApiQps and kubeApiBurst, when set,
	// replace its QPS and Burst, and the manager's clients share one bucket of them.
	RestConfig *rest.Config
	// Config is the configuration loaded at start-up (registry.LoadConfig).
	Config registry.Config
	// ConfigFile is watched and reloaded (its clusters); empty turns reloading off.
	ConfigFile string
	// Flags are the command-line flags (they override the file on every reload too).
	Flags *pflag.FlagSet
	// LeaderElectionNamespace is where the leader Lease lives; empty: the in-cluster namespace.
	LeaderElectionNamespace string
	// LeaderElectionIdentity is this replica's identity in the leader Lease (its holderIdentity
	// while it leads), written with each of its decisions; empty: the host name and a random
	// UUID, as controller-runtime's default. Distinct replicas must have distinct identities.
	LeaderElectionIdentity string
	// Logger is the hub's logger.
	Logger logr.Logger
	// Fleet tunes the provider (its Hub and OnChange are set by New).
	Fleet fleet.Options
	// HealthInterval is how often a Cluster's status is re-evaluated without events.
	HealthInterval time.Duration
	// ConfigDebounce coalesces bursts of config file events.
	ConfigDebounce time.Duration
	// ConfigResync is how often the registry re-applies the configuration, re-creating what
	// was deleted by hand (an agent cluster's namespace, ServiceAccount, Role, RoleBinding).
	// Default 10m.
	ConfigResync time.Duration
	// SkipNameValidation lets several hubs run in one process (tests). At multicluster-runtime
	// v0.24.1 multi-cluster controllers ignore the manager-level setting: the hub's own
	// controllers honour this flag, controllers added by the caller must set it themselves.
	SkipNameValidation bool
	// WithoutDecisionControllers builds the hub without the Rollout and Project controllers: the
	// registry, the fleet provider and the dashboard only. For tests of those parts that write
	// Rollouts, Projects and Workspaces and expect no controller to decide them (hub/registry,
	// hub/dashboard, agent/hubsync). magos-hub always runs them.
	WithoutDecisionControllers bool
}

// Hub is a hub ready to start.
type Hub struct {
	// Manager is the multi-cluster manager, with every controller of the hub registered (unless
	// Options.WithoutDecisionControllers). Manager.GetCluster(ctx, name) returns any engaged
	// registered cluster.
	Manager mcmanager.Manager
	// Fleet is the provider: which clusters are engaged, their transport and labels.
	Fleet *fleet.Fleet
	// Registry keeps the registered clusters and their Cluster objects.
	Registry *registry.Registry
	// Dashboard is the read-only HTTP API and web page, when Config.Dashboard enables it.
	Dashboard *dashboard.Server
	// Claim keeps this hub the only one on its API server (package hubclaim): Start checks for
	// another hub before the manager starts, and, with leader election, the Claim runs on the
	// leader and holds the registry's removals until it has judged the other hubs' Leases.
	Claim *hubclaim.Claim
}

// Start runs the hub until ctx ends: it refuses to start beside another hub on the same API
// server (hubclaim.Claim.Check; the error is a hubclaim.AnotherHubError, errors.Is
// hubclaim.ErrAnotherHub), then starts the manager. It returns the manager's error, which is an
// AnotherHubError too when the leading Claim finds this hub the one to stop. magos-hub runs the
// hub with Start; tests that start Manager themselves skip the start-up check.
func (h *Hub) Start(ctx context.Context) error {
	if err := h.Claim.Check(ctx); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := h.Manager.Start(ctx); err != nil {
		if errors.Is(err, hubclaim.ErrAnotherHub) {
			return fmt.Errorf("hub: %w", err)
		}
		return err
	}
	return nil
}

// CacheOptions is the hub manager's cache: Workspaces only when they are mirrors (one informer
// for every agent cluster), Leases only when they are agent heartbeats.
func CacheOptions() cache.Options {
	byObject := map[client.Object]cache.ByObject{}
	maps.Copy(byObject, fleet.HubCacheByObject())
	maps.Copy(byObject, registry.HubCacheByObject())
	// Of the Events, those of Rollouts: what notifications are made of (package notify).
	byObject[&eventsv1.Event{}] = cache.ByObject{Field: fields.OneTermEqualSelector("regarding.kind", "Rollout")}
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
}

// New builds a hub: the manager, the fleet provider, the registry and the Rollout and Project
// controllers. Nothing runs until Hub.Manager.Start.
func New(opts Options) (*Hub, error) {
	if opts.RestConfig == nil {
		return nil, errors.New("hub: Options.RestConfig is required")
	}
	cfg := opts.Config
	restCfg := withBudget(opts.RestConfig, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	skip := opts.SkipNameValidation
	mopts := ctrl.Options{
		Scheme:                        scheme.New(),
		Logger:                        opts.Logger,
		Cache:                         CacheOptions(),
		Metrics:                       metricsserver.Options{BindAddress: orDefault(cfg.MetricsBindAddress, "0")},
		HealthProbeBindAddress:        orDefault(cfg.HealthProbeBindAddress, "0"),
		PprofBindAddress:              orDefault(cfg.PprofBindAddress, "0"),
		LeaderElection:                cfg.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// The leader's renewals do not queue behind the controllers' requests (sharedLimit).
		LeaderElectionConfig: restCfg,
		Controller:           config.Controller{SkipNameValidation: &skip},
	}
	// The replica's identity in the leader Lease is also written with every decision it makes
	// (the magos-hub-leader policy fences them), so the hub chooses it itself.
	leader := ""
	if cfg.LeaderElect {
		leader = opts.LeaderElectionIdentity
		if leader == "" {
			host, err := os.Hostname()
			if err != nil {
				return nil, fmt.Errorf("hub: a leader election identity: %w", err)
			}
			leader = host + "_" + string(uuid.NewUUID())
		}
		lock, err := leaderLock(restCfg, opts.LeaderElectionNamespace, leader)
		if err != nil {
			return nil, err
		}
		mopts.LeaderElectionResourceLockInterface = lock
	}
	local, err := ctrl.NewManager(sharedLimit(restCfg), mopts)
	if err != nil {
		return nil, fmt.Errorf("hub: creating the manager: %w", err)
	}
	// One hub per API server: every hub checks for another at start (Hub.Start); with leader
	// election the leader checks once more, for a hub that started at the same time, and the
	// registry removes nothing before it has. A hub without leader election holds no Lease, so
	// it runs no such check while it runs (and hubs that start later cannot see it).
	claim, err := hubclaim.New(hubclaim.Options{
		Reader:    local.GetAPIReader(),
		Namespace: opts.LeaderElectionNamespace,
		Logger:    opts.Logger.WithName("hubclaim"),
	})
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	var (
		beforeRemoval func(context.Context) error
		ready         func() bool
	)
	if cfg.LeaderElect {
		if err := local.Add(claim); err != nil {
			return nil, fmt.Errorf("hub: adding the check for another hub: %w", err)
		}
		// Neither removals nor decisions before the leading Claim judged the other hubs.
		beforeRemoval, ready = claim.Wait, claim.Judged
	}
	var reg *registry.Registry
	fopts := opts.Fleet
	fopts.Hub = local
	fopts.OnChange = func(name string) {
		if reg != nil {
			reg.Touch(name)
		}
	}
	if fopts.Logger == nil {
		l := opts.Logger
		fopts.Logger = &l
	}
	fl, err := fleet.New(fopts)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	mgr, err := mcmanager.WithMultiCluster(local, fl)
	if err != nil {
		return nil, fmt.Errorf("hub: creating the multi-cluster manager: %w", err)
	}
	if err := fleetview.IndexWorkspaces(context.Background(), mgr); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	reg, err = registry.New(local, registry.Options{
		ConfigFile:         opts.ConfigFile,
		Flags:              opts.Flags,
		Initial:            cfg,
		Fleet:              fl,
		Debounce:           opts.ConfigDebounce,
		Resync:             opts.ConfigResync,
		HealthInterval:     opts.HealthInterval,
		SkipNameValidation: opts.SkipNameValidation,
		BeforeRemoval:      beforeRemoval,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if err := reg.SetupWithManager(local); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	var dash *dashboard.Server
	if cfg.Dashboard.Enabled() {
		dash, err = dashboard.New(dashboard.Options{
			BindAddress: cfg.Dashboard.BindAddress,
			CertFile:    cfg.Dashboard.CertFile,
			KeyFile:     cfg.Dashboard.KeyFile,
			RestConfig:  restCfg,
			Cache:       local.GetCache(),
			APIReader:   local.GetAPIReader(),
			Logger:      opts.Logger.WithName("dashboard"),
			OIDC:        dashboardOIDC(cfg.Dashboard.OIDC, local.GetAPIReader()),
		})
		if err != nil {
			return nil, fmt.Errorf("hub: %w", err)
		}
		if err := local.Add(dash); err != nil {
			return nil, fmt.Errorf("hub: adding the dashboard: %w", err)
		}
	}
	if cfg.Notifications.Enabled() {
		n := notify.New(notify.Options{
			Config:   cfg.Notifications,
			Cache:    local.GetCache(),
			Client:   local.GetClient(),
			Secrets:  local.GetAPIReader(),
			Recorder: local.GetEventRecorder("magos-hub-notify"),
			Logger:   opts.Logger.WithName("notify"),
		})
		if err := local.Add(n); err != nil {
			return nil, fmt.Errorf("hub: adding the notifier: %w", err)
		}
	}
	if !opts.WithoutDecisionControllers {
		if err := setupDecisionControllers(mgr, cfg, decider.ControllerOptions{Leader: leader, SkipNameValidation: opts.SkipNameValidation, Ready: ready}); err != nil {
			return nil, err
		}
	}
	if err := local.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if err := local.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	return &Hub{Manager: mgr, Fleet: fl, Registry: reg, Dashboard: dash, Claim: claim}, nil
}

// dashboardOIDC is the dashboard's OIDC sign-in of the config (nil without one): the client
// secret is read from its Secret on the hub at each sign-in, with a get by name.
func dashboardOIDC(o *registry.OIDCConfig, secrets client.Reader) *dashboard.OIDCOptions {
	if o == nil {
		return nil
	}
	ref := *o.ClientSecretRef
	return &dashboard.OIDCOptions{
		IssuerURL: o.IssuerURL, ClientID: o.ClientID, CAFile: o.CAFile, RedirectURL: o.RedirectURL,
		Scopes: o.Scopes, SessionTTL: o.SessionTTL, DisplayName: o.DisplayName,
		ClientSecret: func(ctx context.Context) (string, error) {
			v, err := ref.Read(ctx, secrets)
			return strings.TrimSpace(string(v)), err
		},
	}
}

// setupDecisionControllers registers the decision makers: Rollouts order a Project's Workspaces
// across the fleet; a Project without a Rollout runs its Workspaces in parallel.
func setupDecisionControllers(mgr mcmanager.Manager, cfg registry.Config, opts decider.ControllerOptions) error {
	if err := rollout.SetupWithManager(mgr, opts); err != nil {
		return fmt.Errorf("hub: setting up the Rollout controller: %w", err)
	}
	popts := opts
	popts.ParallelGracePeriod = cfg.ProjectParallelGracePeriod
	if err := project.SetupWithManager(mgr, popts); err != nil {
		return fmt.Errorf("hub: setting up the Project controller: %w", err)
	}
	return nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// leaderLock is the leader Lease LeaderElectionID in namespace, held under identity: the lock
// controller-runtime builds itself, with a chosen identity instead of a random one.
func leaderLock(restCfg *rest.Config, namespace, identity string) (resourcelock.Interface, error) {
	if namespace == "" {
		return nil, errors.New("hub: leader election needs the namespace of its Lease (--leader-election-namespace or $POD_NAMESPACE)")
	}
	cfg := rest.AddUserAgent(rest.CopyConfig(restCfg), "leader-election")
	// As controller-runtime does: a hung request must not outlive the renew deadline (10s).
	cfg.Timeout = 5 * time.Second
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub: the leader election client: %w", err)
	}
	coordination, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub: the leader election client: %w", err)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaderElectionID, core, coordination,
		resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return nil, fmt.Errorf("hub: the leader Lease: %w", err)
	}
	// The leader names its version on the Lease at every renewal (magosctl version reads it).
	if l, ok := lock.(*resourcelock.LeaseLock); ok && len(validation.IsValidLabelValue(version.Get())) == 0 {
		l.Labels = map[string]string{keys.HubVersion: version.Get()}
	}
	return lock, nil
}
