// Command magos-agent runs in every spoke cluster. Subcommands:
//
//	magos-agent controller   the agent (default): runs the cluster's Workspaces
//	magos-agent runner       one run (plan, apply or destroy); what run Jobs and local runs execute
//	magos-agent check        the magos-agent chart's helm test: waits until an agent leads and,
//	                         with --hub-kubeconfig, its heartbeat on the hub is live
//
// The controller reads its configuration from --config (YAML), MAGOS_* environment variables
// and flags, in that order of precedence (flags win); see `magos-agent controller --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/hubsync"
	"github.com/magosfleet/magos/agent/hubtoken"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/config"
	"github.com/magosfleet/magos/pkg/installcheck"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/logging"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/runner"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/version"
)

// Config is the agent's configuration.
type Config struct {
	// Kubeconfig reaches the spoke cluster (in-cluster config or $KUBECONFIG if empty).
	Kubeconfig string `mapstructure:"kubeconfig"`
	// ClusterName is the name this cluster is registered under in the hub's config.
	ClusterName string `mapstructure:"clusterName"`
	// HubKubeconfig is the agent's bootstrap kubeconfig for the hub (from
	// `magosctl agent-kubeconfig`); empty runs the agent without a hub (a single-cluster
	// install, or a direct cluster the hub watches itself).
	HubKubeconfig string `mapstructure:"hubKubeconfig"`
	// HubGrants says a hub grants this cluster's runs by writing on its Workspaces itself (a
	// direct cluster of a hub, the single-cluster install): as under a hub connection, a grant
	// that names no run is ignored and a destroy waits for the hub's grant. Implied by
	// HubKubeconfig.
	HubGrants bool `mapstructure:"hubGrants"`
	// TestingClockSkew shifts every time the agent writes for the hub (when its poll saw a
	// commit, its Lease's renew time, its sync watermark) by this much, as if its clock ran that
	// far ahead (negative: behind). For tests of clock skew (tools/devfleet); hidden, zero in
	// production.
	TestingClockSkew time.Duration `mapstructure:"testingClockSkew"`
	// HubHeartbeatInterval is how often the agent renews its Lease on the hub (10s).
	HubHeartbeatInterval time.Duration `mapstructure:"hubHeartbeatInterval"`
	// HubLeaseDuration is how long a renewal is valid: the hub marks the cluster unavailable
	// when it passes without one (40s).
	HubLeaseDuration time.Duration `mapstructure:"hubLeaseDuration"`
	// HubTokenExpiry is the lifetime of the hub tokens the agent renews itself (1h, at least
	// 10m, renewed at about 80% of it); 0 uses the bootstrap token as it is, without renewal.
	HubTokenExpiry time.Duration `mapstructure:"hubTokenExpiry"`
	// HubTokenSecret is the Secret, in HubTokenSecretNamespace in this cluster, the agent keeps
	// its last renewed hub token in, for its next start; empty: not kept.
	HubTokenSecret string `mapstructure:"hubTokenSecret"`
	// HubTokenSecretNamespace is the namespace of HubTokenSecret (default $POD_NAMESPACE; when
	// both are empty the token is not kept).
	HubTokenSecretNamespace string `mapstructure:"hubTokenSecretNamespace"`
	// InputsKeySecret is the Secret, in InputsKeySecretNamespace in this cluster, that keeps the
	// key of the Workspaces' status.plannedInputs (the keyed digest of a plan's inputs); the
	// agent writes a random key there when it has none. Empty: a key in memory only (a run
	// planned before an agent restart is then planned again instead of applied).
	InputsKeySecret string `mapstructure:"inputsKeySecret"`
	// InputsKeySecretNamespace is the namespace of InputsKeySecret (default $POD_NAMESPACE; when
	// both are empty the key is kept in memory only).
	InputsKeySecretNamespace string `mapstructure:"inputsKeySecretNamespace"`
	// MetricsBindAddress serves /metrics ("0" turns it off).
	MetricsBindAddress string `mapstructure:"metricsBindAddress"`
	// HealthProbeBindAddress serves /healthz and /readyz ("0" turns it off).
	HealthProbeBindAddress string `mapstructure:"healthProbeBindAddress"`
	// LeaderElect keeps one active agent per cluster.
	LeaderElect bool `mapstructure:"leaderElect"`
	// LeaderElectionNamespace holds the leader Lease (the Pod's namespace in a cluster).
	LeaderElectionNamespace string `mapstructure:"leaderElectionNamespace"`
	// ReconcileInterval is the default Workspace schedule (3m).
	ReconcileInterval time.Duration `mapstructure:"reconcileInterval"`
	// GitPollInterval is the default ref poll interval (30s).
	GitPollInterval time.Duration `mapstructure:"gitPollInterval"`
	// SecretNamespaces is a comma-separated list of the namespaces whose Secrets the agent reads
	// (repository credentials, the Secrets VariableSets name); empty: every namespace.
	SecretNamespaces string `mapstructure:"secretNamespaces"`
	// MandatoryPolicies is a comma-separated list of the names of ValidatingPolicies
	// (policies.kyverno.io/v1) every plan in this cluster is checked against, in addition to
	// what the Workspace's or Project's policySelector selects; a name that does not exist fails
	// every plan (MandatoryPolicyMissing). Empty: none.
	MandatoryPolicies string `mapstructure:"mandatoryPolicies"`
	// Runner says how runs execute.
	Runner RunnerConfig `mapstructure:"runner"`
	// Log configures logging.
	Log LogConfig `mapstructure:"log"`
}

// RunnerConfig says how runs execute.
type RunnerConfig struct {
	// Mode is job (a Kubernetes Job per run) or local (a child process per run).
	Mode string `mapstructure:"mode"`
	// Image is the runner image of Jobs (the agent's own image).
	Image string `mapstructure:"image"`
	// ImagePullPolicy of run Jobs: Always, IfNotPresent (default) or Never.
	ImagePullPolicy string `mapstructure:"imagePullPolicy"`
	// StorageClass is the StorageClass of the volume that keeps a Workspace's saved plans
	// between its plan and apply Jobs (empty: the cluster's default).
	StorageClass string `mapstructure:"storageClass"`
	// CPURequest, MemoryRequest, CPULimit, MemoryLimit are the resources of run Jobs.
	CPURequest    string `mapstructure:"cpuRequest"`
	MemoryRequest string `mapstructure:"memoryRequest"`
	CPULimit      string `mapstructure:"cpuLimit"`
	MemoryLimit   string `mapstructure:"memoryLimit"`
	// DataDir holds local runs' results, logs and plans.
	DataDir string `mapstructure:"dataDir"`
	// Kubeconfig lets local runs keep state in the cluster (kubernetes backend).
	Kubeconfig string `mapstructure:"kubeconfig"`
	// BinaryPath is the tofu/terraform binary of local runs.
	BinaryPath string `mapstructure:"binaryPath"`
	// ProviderNetworkMirror is the https:// URL of a provider network mirror runs install
	// providers from, after the mirror folders (empty: none). See docs/providers.md.
	ProviderNetworkMirror string `mapstructure:"providerNetworkMirror"`
	// ProviderVolume is a Kubernetes volume source, as JSON, holding a provider mirror (OpenTofu's
	// filesystem mirror layout at its root) that every run Job mounts read-only and installs
	// providers from before the image's own mirror; job mode only (empty: none). For example
	// {"persistentVolumeClaim":{"claimName":"providers"}}.
	ProviderVolume string `mapstructure:"providerVolume"`
}

// LogConfig configures logging.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `mapstructure:"level"`
	// Development selects readable console logs.
	Development bool `mapstructure:"development"`
}

// Defaults returns the default configuration.
func Defaults() *Config {
	return &Config{
		HubHeartbeatInterval:   hubsync.DefaultHeartbeatInterval,
		HubLeaseDuration:       hubsync.DefaultLeaseDuration,
		HubTokenExpiry:         hubtoken.DefaultExpiry,
		HubTokenSecret:         "magos-agent-hub-token",
		InputsKeySecret:        "magos-agent-inputs-key",
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		ReconcileInterval:      3 * time.Minute,
		GitPollInterval:        30 * time.Second,
		Runner: RunnerConfig{
			Mode:            app.RunnerJob,
			ImagePullPolicy: string(corev1.PullIfNotPresent),
			CPURequest:      "100m",
			MemoryRequest:   "256Mi",
			MemoryLimit:     "1Gi",
			DataDir:         "/var/lib/magos-agent",
		},
		Log: LogConfig{Level: "info"},
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs config.Errors
	switch c.Runner.Mode {
	case app.RunnerJob:
		if c.Runner.Image == "" {
			errs.Add("runner.image", "is required in job mode: the image run Jobs use (the agent's own)")
		}
	case app.RunnerLocal:
		if c.Runner.DataDir == "" {
			errs.Add("runner.dataDir", "is required in local mode")
		}
	default:
		errs.Add("runner.mode", "%q: want job or local", c.Runner.Mode)
	}
	switch corev1.PullPolicy(c.Runner.ImagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs.Add("runner.imagePullPolicy", "%q: want Always, IfNotPresent or Never", c.Runner.ImagePullPolicy)
	}
	c.validateResources(&errs)
	if u := c.Runner.ProviderNetworkMirror; u != "" {
		if err := runner.CheckNetworkMirrorURL(u); err != nil {
			errs.Add("runner.providerNetworkMirror", "%v", err)
		}
	}
	if v := c.Runner.ProviderVolume; v != "" {
		if c.Runner.Mode == app.RunnerLocal {
			errs.Add("runner.providerVolume", "is mounted into run Jobs only: local runs read %s from the agent's environment", runner.EnvProviderMirror)
		} else if _, err := execution.ParseProviderVolume(v); err != nil {
			errs.Add("runner.providerVolume", "%v", err)
		}
	}
	for _, ns := range c.secretNamespaces() {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs.Add("secretNamespaces", "%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
		}
	}
	seen := map[string]bool{}
	for _, name := range c.mandatoryPolicies() {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs.Add("mandatoryPolicies", "%q is not a ValidatingPolicy name: %s", name, strings.Join(msgs, "; "))
		}
		if seen[name] {
			errs.Add("mandatoryPolicies", "%q is listed twice", name)
		}
		seen[name] = true
	}
	if n := len(c.mandatoryPolicies()); n > magosv1.MaxEvaluatedPolicies {
		errs.Add("mandatoryPolicies", "%d policies: at most %d (the most a plan is checked against)", n, magosv1.MaxEvaluatedPolicies)
	}
	if c.HubKubeconfig != "" {
		if msgs := validation.IsDNS1123Label(c.ClusterName); len(msgs) > 0 || len(c.ClusterName) > 40 {
			errs.Add("clusterName", "%q: with a hub kubeconfig the agent needs the name its cluster is registered under (a DNS label of at most 40 characters)", c.ClusterName)
		}
		if c.HubHeartbeatInterval <= 0 || c.HubLeaseDuration < c.HubHeartbeatInterval {
			errs.Add("hubLeaseDuration", "%s must be at least hubHeartbeatInterval %s, both positive", c.HubLeaseDuration, c.HubHeartbeatInterval)
		}
		if c.HubTokenExpiry < 0 || (c.HubTokenExpiry > 0 && c.HubTokenExpiry < hubtoken.MinExpiry) {
			errs.Add("hubTokenExpiry", "%s: must be 0 (no renewal) or at least %s, the shortest token the API server grants", c.HubTokenExpiry, hubtoken.MinExpiry)
		}
		if c.HubTokenSecret != "" {
			if msgs := validation.IsDNS1123Subdomain(c.HubTokenSecret); len(msgs) > 0 {
				errs.Add("hubTokenSecret", "%q is not a Secret name: %s", c.HubTokenSecret, strings.Join(msgs, "; "))
			}
		}
		if ns := c.hubTokenSecret().Namespace; ns != "" {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs.Add("hubTokenSecretNamespace", "%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
			}
		}
	}
	if c.InputsKeySecret != "" {
		if msgs := validation.IsDNS1123Subdomain(c.InputsKeySecret); len(msgs) > 0 {
			errs.Add("inputsKeySecret", "%q is not a Secret name: %s", c.InputsKeySecret, strings.Join(msgs, "; "))
		}
	}
	if ns := c.inputsKeySecret().Namespace; ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs.Add("inputsKeySecretNamespace", "%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
		}
	}
	if c.ReconcileInterval <= 0 {
		errs.Add("reconcileInterval", "must be positive, got %s", c.ReconcileInterval)
	}
	if c.GitPollInterval <= 0 {
		errs.Add("gitPollInterval", "must be positive, got %s", c.GitPollInterval)
	}
	return errs.Err()
}

// validateResources checks the run Jobs' resources: quantities, not negative, and no request
// above its limit (the API server would refuse every Job).
func (c *Config) validateResources(errs *config.Errors) {
	quantity := func(key, v string) *resource.Quantity {
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			errs.Add(key, "%q is not a quantity (for example 500m or 1Gi)", v)
			return nil
		}
		if q.Sign() < 0 {
			errs.Add(key, "%q is negative", v)
			return nil
		}
		return &q
	}
	cpuReq := quantity("runner.cpuRequest", c.Runner.CPURequest)
	memReq := quantity("runner.memoryRequest", c.Runner.MemoryRequest)
	cpuLim := quantity("runner.cpuLimit", c.Runner.CPULimit)
	memLim := quantity("runner.memoryLimit", c.Runner.MemoryLimit)
	if cpuReq != nil && cpuLim != nil && cpuReq.Cmp(*cpuLim) > 0 {
		errs.Add("runner.cpuRequest", "%s is more than runner.cpuLimit %s", c.Runner.CPURequest, c.Runner.CPULimit)
	}
	if memReq != nil && memLim != nil && memReq.Cmp(*memLim) > 0 {
		errs.Add("runner.memoryRequest", "%s is more than runner.memoryLimit %s", c.Runner.MemoryRequest, c.Runner.MemoryLimit)
	}
}

// secretNamespaces returns SecretNamespaces as a list (nil: every namespace).
func (c *Config) secretNamespaces() []string { return splitList(c.SecretNamespaces) }

// mandatoryPolicies returns MandatoryPolicies as a list (nil: none).
func (c *Config) mandatoryPolicies() []string { return splitList(c.MandatoryPolicies) }

// splitList splits a comma-separated list, dropping blanks and spaces around its items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// hubTokenSecret is the Secret the agent keeps its renewed hub token in: HubTokenSecret in
// HubTokenSecretNamespace, else in $POD_NAMESPACE. An empty name or namespace: not kept.
func (c *Config) hubTokenSecret() types.NamespacedName {
	ns := c.HubTokenSecretNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if c.HubTokenSecret == "" || ns == "" {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: ns, Name: c.HubTokenSecret}
}

// inputsKeySecret is the Secret that keeps the key of planned inputs: InputsKeySecret in
// InputsKeySecretNamespace, else in $POD_NAMESPACE. An empty name or namespace: not kept.
func (c *Config) inputsKeySecret() types.NamespacedName {
	ns := c.InputsKeySecretNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if c.InputsKeySecret == "" || ns == "" {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: ns, Name: c.InputsKeySecret}
}

// runnerOptions are the agent's run options: what execution.JobOptions (job mode) and
// execution.LocalOptions (local mode) are made of. (A validated configuration's provider
// volume parses.)
func (c *Config) runnerOptions() app.RunnerOptions {
	var volume *corev1.VolumeSource
	if c.Runner.ProviderVolume != "" {
		volume, _ = execution.ParseProviderVolume(c.Runner.ProviderVolume)
	}
	return app.RunnerOptions{
		Mode:                  c.Runner.Mode,
		Image:                 c.Runner.Image,
		ImagePullPolicy:       corev1.PullPolicy(c.Runner.ImagePullPolicy),
		StorageClass:          c.Runner.StorageClass,
		Resources:             c.resources(),
		DataDir:               c.Runner.DataDir,
		Kubeconfig:            c.Runner.Kubeconfig,
		BinaryPath:            c.Runner.BinaryPath,
		ProviderNetworkMirror: c.Runner.ProviderNetworkMirror,
		ProviderVolume:        volume,
	}
}

func (c *Config) resources() corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	set := func(list *corev1.ResourceList, name corev1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[name] = resource.MustParse(v)
	}
	set(&r.Requests, corev1.ResourceCPU, c.Runner.CPURequest)
	set(&r.Requests, corev1.ResourceMemory, c.Runner.MemoryRequest)
	set(&r.Limits, corev1.ResourceCPU, c.Runner.CPULimit)
	set(&r.Limits, corev1.ResourceMemory, c.Runner.MemoryLimit)
	return r
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if slices.Contains(args, "--version") || len(args) > 0 && args[0] == "version" {
		fmt.Println(version.Get())
		return 0
	}
	cmd := "controller"
	if len(args) > 0 && (args[0] == "controller" || args[0] == "runner" || args[0] == "check") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "runner" {
		// The runner logs through the context; its stdout and stderr are the run's log.
		logger, err := logging.New(logging.Options{Level: os.Getenv("MAGOS_LOG_LEVEL"), Development: os.Getenv("MAGOS_LOG_DEVELOPMENT") == "true"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "magos-agent runner:", err)
			return runner.ExitInvalidSpec
		}
		ctrl.SetLogger(logger)
		return runner.Main(log.IntoContext(ctx, logger))
	}
	command := controller
	if cmd == "check" {
		command = func(ctx context.Context, args []string) error { return check(ctx, args, os.Stdout) }
	}
	if err := command(ctx, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "magos-agent:", err)
		return 1
	}
	return 0
}

// controllerFlags are the controller's flags, with def's values as their defaults; the string
// is where --config goes.
func controllerFlags(def *Config) (*pflag.FlagSet, *string) {
	flags := pflag.NewFlagSet("magos-agent controller", pflag.ContinueOnError)
	file := flags.String("config", "", "YAML configuration file")
	flags.String("kubeconfig", "", "kubeconfig of the spoke cluster (default: in-cluster or $KUBECONFIG)")
	flags.String("cluster-name", "", "the name this cluster is registered under in the hub's config")
	flags.String("hub-kubeconfig", "", "the agent's bootstrap kubeconfig for the hub (empty: no hub)")
	flags.Bool("hub-grants", false, "a hub grants this cluster's runs, writing its grants on the Workspaces itself (a direct cluster): grants without granted-run are ignored and destroys wait for the hub's grant (implied by --hub-kubeconfig)")
	flags.Duration("hub-heartbeat-interval", def.HubHeartbeatInterval, "how often the agent renews its heartbeat Lease on the hub")
	flags.Duration("hub-lease-duration", def.HubLeaseDuration, "how long a heartbeat is valid (the hub marks the cluster unavailable after it)")
	flags.Duration("hub-token-expiry", def.HubTokenExpiry, "lifetime of the hub tokens the agent renews itself at about 80% of it (at least 10m; 0: use the bootstrap token without renewal)")
	flags.String("hub-token-secret", def.HubTokenSecret, `Secret in this cluster the agent keeps its renewed hub token in, for its next start ("": not kept)`)
	flags.String("hub-token-secret-namespace", "", "namespace of --hub-token-secret (default $POD_NAMESPACE)")
	flags.String("inputs-key-secret", def.InputsKeySecret, `Secret in this cluster that keeps the key of the Workspaces' plannedInputs digest ("": a key in memory only)`)
	flags.String("inputs-key-secret-namespace", "", "namespace of --inputs-key-secret (default $POD_NAMESPACE)")
	flags.String("metrics-bind-address", def.MetricsBindAddress, `address of /metrics ("0": off)`)
	flags.String("health-probe-bind-address", def.HealthProbeBindAddress, `address of /healthz and /readyz ("0": off)`)
	flags.Bool("leader-elect", false, "keep one active agent per cluster")
	flags.String("leader-election-namespace", "", "namespace of the leader Lease")
	flags.Duration("reconcile-interval", def.ReconcileInterval, "default Workspace re-plan/retry interval")
	flags.Duration("git-poll-interval", def.GitPollInterval, "default git ref poll interval")
	flags.String("secret-namespaces", "", "comma-separated namespaces whose Secrets the agent reads (repository credentials, VariableSet Secrets); empty: all")
	flags.String("mandatory-policies", "", "comma-separated names of ValidatingPolicies every plan in this cluster is checked against, whatever the policySelector (a missing one fails every plan)")
	flags.String("runner-mode", def.Runner.Mode, "job (a Kubernetes Job per run) or local (a child process per run)")
	flags.String("runner-image", "", "image of run Jobs (the agent's own image)")
	flags.String("runner-image-pull-policy", def.Runner.ImagePullPolicy, "image pull policy of run Jobs: Always, IfNotPresent or Never")
	flags.String("runner-storage-class", "", "StorageClass of the 1Gi volume (<workspace>-data) that keeps a Workspace's saved plan between its plan and apply Jobs (empty: the cluster's default)")
	flags.String("runner-cpu-request", def.Runner.CPURequest, `CPU request of run Jobs (a quantity such as 250m; "": none)`)
	flags.String("runner-memory-request", def.Runner.MemoryRequest, `memory request of run Jobs (a quantity such as 256Mi; "": none)`)
	flags.String("runner-cpu-limit", def.Runner.CPULimit, `CPU limit of run Jobs (a quantity such as 1; "": none)`)
	flags.String("runner-memory-limit", def.Runner.MemoryLimit, `memory limit of run Jobs (a quantity such as 1Gi; "": none)`)
	flags.String("runner-data-dir", def.Runner.DataDir, "folder of local runs' results, logs and plans")
	flags.String("runner-kubeconfig", "", "kubeconfig local runs use for the kubernetes state backend")
	flags.String("runner-binary-path", "", "tofu/terraform binary of local runs")
	flags.String("runner-provider-network-mirror", "", "https:// URL of a provider network mirror runs install providers from, after the mirror folders (empty: none)")
	flags.String("runner-provider-volume", "", `a volume source as JSON holding a provider mirror, mounted read-only into run Jobs and searched before the image's own, e.g. {"persistentVolumeClaim":{"claimName":"providers"}} (job mode; empty: none)`)
	flags.String("log-level", def.Log.Level, "debug, info, warn or error")
	flags.Bool("log-development", false, "readable console logs")
	flags.Duration("testing-clock-skew", 0, "tests only: shift the times the agent writes for the hub, as if its clock ran this far ahead")
	_ = flags.MarkHidden("testing-clock-skew")
	return flags, file
}

// loadConfig parses the controller's arguments and loads its configuration: the defaults, then
// --config, MAGOS_* variables and the flags set, validated.
func loadConfig(args []string) (*Config, error) {
	cfg := Defaults()
	flags, file := controllerFlags(cfg)
	if err := flags.Parse(args); err != nil {
		return nil, err
	}
	if err := config.Load(config.Options{File: *file, EnvPrefix: "MAGOS", Flags: flags}, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// clock is the clock of the times the agent writes for the hub: time.Now, shifted by skew.
func clock(skew time.Duration) func() time.Time {
	if skew == 0 {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(skew) }
}

func controller(ctx context.Context, args []string) error {
	cfg, err := loadConfig(args)
	if err != nil {
		return err
	}
	logger, err := logging.New(logging.Options{Development: cfg.Log.Development, Level: cfg.Log.Level})
	if err != nil {
		return err
	}
	ctrl.SetLogger(logger)
	logger.Info("magos-agent starting", "version", version.Get())
	restConfig, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	var hub *hubsync.Options
	if cfg.HubKubeconfig != "" {
		hubConfig, err := clientcmd.BuildConfigFromFlags("", cfg.HubKubeconfig)
		if err != nil {
			return fmt.Errorf("reading the hub kubeconfig %s: %w", cfg.HubKubeconfig, err)
		}
		hub = &hubsync.Options{ClusterName: cfg.ClusterName, HubConfig: hubConfig, AgentVersion: version.Get(), Clock: clock(cfg.TestingClockSkew),
			HeartbeatInterval: cfg.HubHeartbeatInterval, LeaseDuration: cfg.HubLeaseDuration,
			TokenExpiry: cfg.HubTokenExpiry, TokenSecret: cfg.hubTokenSecret(), BootstrapFile: cfg.HubKubeconfig}
	}
	mgr, err := app.NewManager(app.Options{
		Clock:                    clock(cfg.TestingClockSkew),
		HubSync:                  hub,
		HubGrants:                cfg.HubGrants,
		Config:                   restConfig,
		MetricsAddress:           cfg.MetricsBindAddress,
		HealthAddress:            cfg.HealthProbeBindAddress,
		LeaderElection:           cfg.LeaderElect,
		LeaderElectionNamespace:  cfg.LeaderElectionNamespace,
		DefaultReconcileInterval: cfg.ReconcileInterval,
		GitPollInterval:          cfg.GitPollInterval,
		SecretNamespaces:         cfg.secretNamespaces(),
		InputsKeySecret:          cfg.inputsKeySecret(),
		MandatoryPolicies:        cfg.mandatoryPolicies(),
		Logger:                   logger,
		Runner:                   cfg.runnerOptions(),
	})
	if err != nil {
		return err
	}
	logger.Info("starting magos-agent", "runnerMode", cfg.Runner.Mode, "secretNamespaces", cfg.secretNamespaces(),
		"inputsKeySecret", cfg.inputsKeySecret().String(), "mandatoryPolicies", cfg.mandatoryPolicies())
	return mgr.Start(ctx)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("finding the cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// check waits until the agent runs: a replica holds the leader Lease (with --leader-elect), the
// Workspace API answers, and with --hub-kubeconfig the agent's heartbeat Lease on the hub is
// live (it is renewed only while the mirror sync is). It reads the hub with the token the agent
// keeps in --hub-token-secret when that one is usable (the bootstrap token may have expired),
// else with the bootstrap kubeconfig's. It prints what it found.
func check(ctx context.Context, args []string, stdout io.Writer) error {
	flags := pflag.NewFlagSet("magos-agent check", pflag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the spoke cluster (default: in-cluster or $KUBECONFIG)")
	clusterName := flags.String("cluster-name", "", "the name this cluster is registered under in the hub's config")
	hubKubeconfig := flags.String("hub-kubeconfig", "", "the agent's hub kubeconfig: check its heartbeat on the hub (empty: no hub)")
	leaderElect := flags.Bool("leader-elect", false, "require an agent replica to hold the leader Lease")
	leNamespace := flags.String("leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader Lease (default: the pod's)")
	tokenSecret := flags.String("hub-token-secret", "", "the Secret the agent keeps its renewed hub token in (in --hub-token-secret-namespace): use that token when it is usable")
	tokenSecretNS := flags.String("hub-token-secret-namespace", os.Getenv("POD_NAMESPACE"), "namespace of --hub-token-secret (default: the pod's)")
	timeout := flags.Duration("timeout", 2*time.Minute, "how long to wait for the agent")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *leaderElect && *leNamespace == "" {
		return errors.New("check: --leader-election-namespace (or $POD_NAMESPACE) is required with --leader-elect")
	}
	if *hubKubeconfig != "" && *clusterName == "" {
		return errors.New("check: --cluster-name is required with --hub-kubeconfig")
	}
	spokeConfig, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	spoke, err := client.New(spokeConfig, client.Options{Scheme: magosscheme.New()})
	if err != nil {
		return fmt.Errorf("check: cluster client: %w", err)
	}
	var hub client.Client
	if *hubKubeconfig != "" {
		hubConfig, err := clientcmd.BuildConfigFromFlags("", *hubKubeconfig)
		if err != nil {
			return fmt.Errorf("reading the hub kubeconfig %s: %w", *hubKubeconfig, err)
		}
		if *tokenSecret != "" && *tokenSecretNS != "" {
			key := types.NamespacedName{Namespace: *tokenSecretNS, Name: *tokenSecret}
			kept, ok, err := hubtoken.ReadKept(ctx, spoke, key)
			switch {
			case err != nil:
				fmt.Fprintf(stdout, "using the bootstrap token: %v\n", err)
			case ok && kept.Usable(mirror.Namespace(*clusterName), hubConfig.Host, time.Now()):
				hubConfig.BearerToken, hubConfig.BearerTokenFile = kept.Token, ""
				fmt.Fprintf(stdout, "using the hub token kept in %s (expires %s)\n", key, kept.Expiry.UTC().Format(time.RFC3339))
			}
		}
		if hub, err = client.New(hubConfig, client.Options{Scheme: magosscheme.New()}); err != nil {
			return fmt.Errorf("check: hub client: %w", err)
		}
	}
	leader, heartbeat := "(leader election off)", "(no hub)"
	err = installcheck.Until(ctx, *timeout, func(ctx context.Context) error {
		if *leaderElect {
			holder, err := installcheck.HeldLease(ctx, spoke, *leNamespace, app.LeaderElectionID)
			if err != nil {
				return fmt.Errorf("no agent replica leads: %w", err)
			}
			leader = holder
		}
		if err := spoke.List(ctx, &magosv1.WorkspaceList{}, client.Limit(1)); err != nil {
			return fmt.Errorf("listing Workspaces: %w", err)
		}
		if hub != nil {
			holder, err := installcheck.HeldLease(ctx, hub, mirror.Namespace(*clusterName), keys.AgentLease)
			if err != nil {
				return fmt.Errorf("no live heartbeat on the hub: %w", err)
			}
			heartbeat = "live, renewed by " + holder
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "agent leader: %s\nhub heartbeat: %s\n", leader, heartbeat)
	return err
}
