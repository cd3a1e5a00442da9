// Package devfleet starts a complete Magos Fleet on one machine: a hub API server and spoke API
// servers (real etcd + kube-apiserver, from pkg/localcluster), the hub registered with every spoke
// as an agent cluster through its config file, and the real magos-hub and magos-agent binaries
// (built from this checkout) as child processes, the agents running Workspaces with the local
// runner. It is what `magos-dev up` and `make demo` run.
package devfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/logging"
	"github.com/magosfleet/magos/pkg/runner"
)

// DefaultSpokes are the spoke clusters started when Options.Spokes is empty.
var DefaultSpokes = []string{"us-east-1", "eu-west-1", "ap-south-1"}

// Options configures Start.
type Options struct {
	// Dir receives the kubeconfigs, the hub config, the binaries, logs and run data.
	Dir string
	// Spokes are the spoke clusters (default DefaultSpokes).
	Spokes []string
	// Single starts one cluster that is both hub and spoke (registered as a direct cluster).
	Single bool
	// Progress receives one line per step of the start-up.
	Progress io.Writer
	// HubProxy makes every agent reach the hub's API server through its own TCP proxy, owned
	// by the fleet on 127.0.0.1, so that tests can partition an agent from the hub at the
	// transport level (Partition, Heal). Off by default: agents dial the hub directly.
	HubProxy bool
	// ControllerManager also runs kube-controller-manager (namespace deletion, garbage
	// collection) against every API server, which Deregister needs: deregistering a cluster
	// deletes its namespace on the hub, and without it the namespace stays Terminating.
	ControllerManager bool
	// HubReplicas is the number of magos-hub processes (default 1). With more than one, every
	// replica runs with leader election on (the Lease HubLeaseName in the default namespace),
	// under its process name as its identity: "hub", "hub-2", "hub-3"... One leads, the others
	// stand by (HubLeader). With one, the hub runs without leader election.
	HubReplicas int
	// ProjectParallelGracePeriod is the hub's projectParallelGracePeriod (the hub's default if
	// zero).
	ProjectParallelGracePeriod time.Duration
	// HubMetricsAddress is where the hub serves its Prometheus metrics (off if empty; AnyAddress:
	// a free loopback port, see Fleet.HubMetricsAddress); with several replicas, only the first
	// serves them. Start returns once the hub listens there.
	HubMetricsAddress string
	// Dashboard is the address the hub serves its dashboard on (host:port; off if empty;
	// AnyAddress: a free loopback port, see Fleet.DashboardURL). With several replicas, only the
	// first serves it. Start returns once the hub listens there.
	Dashboard string
	// HubLeaseDuration is how long an agent's heartbeat is valid (6s if zero, with a heartbeat
	// every third of it): after it, the hub marks a stopped agent's cluster unavailable.
	HubLeaseDuration time.Duration
	// Bindings bind each named cluster to hub namespaces (the hub config's bindings); a cluster
	// not named is bound to every namespace ("*"), as a local dev fleet needs. Bind changes them
	// while the fleet runs.
	Bindings map[string][]string
	// AgentClockSkew runs the named clusters' agents as if their clocks ran that far ahead
	// (negative: behind): every time they write for the hub (when their poll saw a commit,
	// their Lease's renew time, their sync watermark) is shifted by it (magos-agent's hidden
	// --testing-clock-skew).
	AgentClockSkew map[string]time.Duration
	// Notifications is the hub config's notifications section, as YAML would hold it
	// (dashboardUrl, webhooks: see hub/notify.Config); nil: none.
	Notifications map[string]any
}

// Fleet is a running local fleet.
type Fleet struct {
	// Hub is the hub cluster.
	Hub *localcluster.Cluster
	// Spokes are the spoke clusters by name (in single mode: the hub itself, as "local").
	Spokes map[string]*localcluster.Cluster
	// Order is the spoke names in the order given.
	Order []string
	// Dir is Options.Dir.
	Dir string

	env       *localcluster.Fleet
	procs     []*process
	out       io.Writer
	single    bool
	proxies   map[string]*transportProxy // by spoke name, when Options.HubProxy
	hubs      []string                   // the hub replicas' process names
	grace     time.Duration              // Options.ProjectParallelGracePeriod
	dashboard string                     // the hub's dashboard address (Options.Dashboard, or the one chosen)
	metrics   string                     // the hub's metrics address (Options.HubMetricsAddress, or the one chosen)
	notify    map[string]any             // Options.Notifications

	// mu guards registered, bindings and the hub's config file.
	mu         sync.Mutex
	registered map[string]bool
	bindings   map[string][]string
}

// process is a child process and a channel closed when it exits.
type process struct {
	name   string
	binary string
	env    []string
	args   []string
	cmd    *exec.Cmd
	done   chan struct{}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts the fleet and returns when every cluster is registered and Ready, or an error
// (after stopping whatever it started).
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	// The fleet's clients log through controller-runtime: errors only, and never its "SetLogger
	// was never called" warning and stack trace.
	if logger, err := logging.New(logging.Options{Level: "error"}); err == nil {
		ctrllog.SetLogger(logger)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if len(opts.Spokes) == 0 {
		opts.Spokes = DefaultSpokes
	}
	if opts.Single {
		opts.Spokes = []string{"local"}
	}
	for _, dir := range []string{"bin", "logs", "data"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, dir), 0o755); err != nil {
			return nil, err
		}
	}
	f := &Fleet{Dir: opts.Dir, Order: opts.Spokes, Spokes: map[string]*localcluster.Cluster{}, out: opts.Progress,
		single: opts.Single, proxies: map[string]*transportProxy{}, registered: map[string]bool{},
		grace: opts.ProjectParallelGracePeriod, bindings: maps.Clone(opts.Bindings), notify: opts.Notifications}
	if f.bindings == nil {
		f.bindings = map[string][]string{}
	}
	for _, name := range opts.Spokes {
		f.registered[name] = true
	}
	if err := f.start(ctx, opts); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

func (f *Fleet) step(format string, args ...any) {
	fmt.Fprintf(f.out, "magos-dev: "+format+"\n", args...)
}

func (f *Fleet) start(ctx context.Context, opts Options) error {
	f.step("provisioning etcd, kube-apiserver, tofu and the runner's providers (built from the Go module proxy on first use, then cached)")
	if _, err := localcluster.Assets(); err != nil {
		return err
	}
	tofu, err := localcluster.Tofu()
	if err != nil {
		return err
	}
	// The dev fleet's runs install providers from the mirror the runner image carries, never
	// from a registry (docs/providers.md).
	providers, err := localcluster.Providers()
	if err != nil {
		return err
	}
	f.step("building magos-hub and magos-agent")
	if err := BuildBinaries(ctx, filepath.Join(f.Dir, "bin")); err != nil {
		return err
	}
	if opts.Single {
		f.step("starting one API server (hub and spoke)")
		f.env, err = localcluster.New(localcluster.Options{ControllerManager: opts.ControllerManager})
	} else {
		f.step("starting API servers: hub, %s", strings.Join(opts.Spokes, ", "))
		f.env, err = localcluster.New(localcluster.Options{Spokes: opts.Spokes, ControllerManager: opts.ControllerManager})
	}
	if err != nil {
		return err
	}
	f.Hub = f.env.Hub
	if opts.Single {
		f.Spokes["local"] = f.Hub
	} else {
		f.Spokes = f.env.Spokes
	}
	if err := copyFile(f.Hub.Kubeconfig, f.Kubeconfig("hub")); err != nil {
		return err
	}
	for name, c := range f.Spokes {
		if err := copyFile(c.Kubeconfig, f.Kubeconfig(name)); err != nil {
			return err
		}
	}
	if err := f.writeHubConfig(); err != nil {
		return err
	}
	replicas := max(opts.HubReplicas, 1)
	for i := range replicas {
		name := "hub"
		if i > 0 {
			name = fmt.Sprintf("hub-%d", i+1)
		}
		args := []string{"controller",
			"--kubeconfig", f.Kubeconfig("hub"), "--config", f.path("hub-config.yaml"),
			"--health-probe-bind-address", "0", "--log-development"}
		var listeners []*hubListener
		metrics := &hubListener{flag: "--metrics-bind-address", asked: "0"}
		if i == 0 && opts.HubMetricsAddress != "" {
			metrics.asked = opts.HubMetricsAddress
			listeners = append(listeners, metrics)
		} else {
			args = append(args, metrics.flag, metrics.asked)
		}
		dashboard := &hubListener{flag: "--dashboard-bind-address", asked: opts.Dashboard}
		if i == 0 && opts.Dashboard != "" {
			listeners = append(listeners, dashboard)
		}
		if replicas > 1 {
			f.step("starting the hub replica %s (leader election on)", name)
			args = append(args, "--leader-elect", "--leader-election-namespace", HubLeaseNamespace,
				"--leader-election-identity", name)
		} else {
			f.step("starting the hub")
		}
		if err := f.startHub(ctx, name, args, listeners); err != nil {
			return err
		}
		if i == 0 {
			f.metrics, f.dashboard = metrics.addr, dashboard.addr
		}
		f.hubs = append(f.hubs, name)
	}
	for _, name := range f.Order {
		f.step("starting the agent of %s", name)
		args := []string{"controller", "--kubeconfig", f.Kubeconfig(name), "--cluster-name", name,
			"--runner-mode", "local", "--runner-data-dir", f.path("data", name),
			"--runner-kubeconfig", f.Kubeconfig(name),
			// No Pod namespace here: the agent keeps the key of planned inputs in default, so that
			// a plan made before an agent restart (Kill, Restart) is still applied after it.
			"--inputs-key-secret-namespace", corev1.NamespaceDefault,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-development"}
		if skew := opts.AgentClockSkew[name]; skew != 0 {
			args = append(args, "--testing-clock-skew", skew.String())
		}
		if !opts.Single {
			if opts.HubProxy {
				p, err := newTransportProxy(f.Hub.Config.Host)
				if err != nil {
					return fmt.Errorf("the hub proxy of %s: %w", name, err)
				}
				f.proxies[name] = p
			}
			hubCfg, err := f.agentKubeconfig(ctx, name)
			if err != nil {
				return err
			}
			// Short heartbeats: a stopped agent shows as unavailable within seconds.
			lease := opts.HubLeaseDuration
			if lease <= 0 {
				lease = 6 * time.Second
			}
			args = append(args, "--hub-kubeconfig", hubCfg,
				"--hub-heartbeat-interval", (lease / 3).String(), "--hub-lease-duration", lease.String())
		}
		if err := f.run(name, "magos-agent", []string{runner.EnvTofu + "=" + tofu, runner.EnvProviderMirror + "=" + providers}, args...); err != nil {
			return err
		}
	}
	f.step("waiting for every cluster to be Ready")
	return f.waitReady(ctx)
}

func (f *Fleet) path(elem ...string) string {
	return filepath.Join(append([]string{f.Dir}, elem...)...)
}

// Kubeconfig returns the path of the kubeconfig of a cluster ("hub" or a spoke name).
func (f *Fleet) Kubeconfig(name string) string { return f.path(name + ".kubeconfig") }

// HubConfig is the part of the hub's config file (registry.Config) that the dev fleet and the
// scale benchmark write.
type HubConfig struct {
	ProjectParallelGracePeriod string         `json:"projectParallelGracePeriod,omitempty"`
	Clusters                   []ClusterEntry `json:"clusters"`
	Bindings                   []Binding      `json:"bindings,omitempty"`
	Notifications              map[string]any `json:"notifications,omitempty"`
}

// Binding binds clusters to hub namespaces.
type Binding struct {
	Namespaces []string `json:"namespaces"`
	Clusters   []string `json:"clusters"`
}

// ClusterEntry registers one cluster: an agent cluster (Agent set) or a direct one
// (Kubeconfig set).
type ClusterEntry struct {
	Name       string            `json:"name"`
	Labels     map[string]string `json:"labels,omitempty"`
	Agent      *struct{}         `json:"agent,omitempty"`
	Kubeconfig *KubeconfigSource `json:"kubeconfig,omitempty"`
}

// KubeconfigSource is the kubeconfig file of a direct cluster.
type KubeconfigSource struct {
	Path string `json:"path"`
}

// WriteHubConfig writes cfg to path whole and renamed, so the hub's reload never reads half a
// file.
func WriteHubConfig(path string, cfg HubConfig) error {
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("writing the hub's config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing the hub's config: %w", err)
	}
	return nil
}

// writeHubConfig writes the hub's config file: every registered spoke (the hub hot-reloads it).
func (f *Fleet) writeHubConfig() error {
	cfg := HubConfig{Notifications: f.notify}
	if f.grace > 0 {
		cfg.ProjectParallelGracePeriod = f.grace.String()
	}
	for _, name := range f.Order {
		if !f.registered[name] {
			continue
		}
		e := ClusterEntry{Name: name, Labels: map[string]string{"region": name}}
		if f.single {
			e.Kubeconfig = &KubeconfigSource{Path: f.Kubeconfig("hub")}
		} else {
			e.Agent = &struct{}{}
		}
		cfg.Clusters = append(cfg.Clusters, e)
		namespaces, ok := f.bindings[name]
		if !ok {
			namespaces = []string{magosv1.AllNamespaces}
		}
		if len(namespaces) > 0 {
			cfg.Bindings = append(cfg.Bindings, Binding{Namespaces: namespaces, Clusters: []string{name}})
		}
	}
	return WriteHubConfig(f.path("hub-config.yaml"), cfg)
}

// agentKubeconfig waits for the hub to set up the cluster's access, then writes the agent's
// bootstrap kubeconfig, as an operator would with `magos-hub agent-kubeconfig`. With a hub proxy
// for the cluster, the kubeconfig names the proxy's address instead of the hub's.
func (f *Fleet) agentKubeconfig(ctx context.Context, cluster string) (string, error) {
	out := f.path(cluster + "-hub.kubeconfig")
	var last []byte
	err := f.poll(ctx, 2*time.Minute, func() error {
		cmd := exec.CommandContext(ctx, f.path("bin", "magos-hub"), "agent-kubeconfig",
			"--kubeconfig", f.Kubeconfig("hub"), "--cluster", cluster)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			last = stderr.Bytes()
			return fmt.Errorf("magos-hub agent-kubeconfig --cluster %s: %w: %s", cluster, err, last)
		}
		raw := stdout.Bytes()
		if p := f.proxies[cluster]; p != nil {
			var err error
			if raw, err = throughProxy(raw, p); err != nil {
				return err
			}
		}
		return os.WriteFile(out, raw, 0o600)
	})
	if exited := (*exitedError)(nil); err != nil && !errors.As(err, &exited) && len(f.hubs) > 0 {
		// The hub runs but has not set the cluster up: what it says may tell why.
		return "", fmt.Errorf("%w\nthe log of %s ends:\n%s", err, f.hubs[0], f.logTail(f.hubs[0]))
	}
	return out, err
}

func (f *Fleet) waitReady(ctx context.Context) error {
	return f.poll(ctx, 3*time.Minute, func() error {
		var list magosv1.ClusterList
		if err := f.Hub.Client.List(ctx, &list); err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, c := range list.Items {
			ready[c.Name] = meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionReady)
		}
		for _, name := range f.Order {
			if !ready[name] {
				return fmt.Errorf("cluster %s is not Ready yet (logs in %s)", name, f.path("logs"))
			}
		}
		return nil
	})
}

// run starts a binary from bin/ with its output appended to logs/<name>.log.
func (f *Fleet) run(name, binary string, env []string, args ...string) error {
	p := &process{name: name, binary: binary, env: env, args: args}
	if err := f.launch(p); err != nil {
		return err
	}
	f.procs = append(f.procs, p)
	return nil
}

func (f *Fleet) launch(p *process) error {
	logFile, err := os.OpenFile(f.path("logs", p.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(f.path("bin", p.binary), p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", p.binary, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(done)
	}(p.done)
	return nil
}

// Kill stops the process of "hub" or of a spoke's agent abruptly (SIGKILL), as a crash would.
func (f *Fleet) Kill(name string) error {
	p, err := f.process(name)
	if err != nil {
		return err
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	return nil
}

// Restart starts the process of "hub" or of a spoke's agent again, after Kill.
func (f *Fleet) Restart(name string) error {
	p, err := f.process(name)
	if err != nil {
		return err
	}
	if !p.exited() {
		return fmt.Errorf("%s is still running", name)
	}
	return f.launch(p)
}

func (f *Fleet) process(name string) (*process, error) {
	for _, p := range f.procs {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no process %q (have the hub and the agents of %s)", name, strings.Join(f.Order, ", "))
}

// Client returns the client of a cluster ("hub" or a spoke name).
func (f *Fleet) Client(name string) client.Client {
	if name == "hub" {
		return f.Hub.Client
	}
	return f.Spokes[name].Client
}

// Stop stops the agents, the hub and the API servers (and the hub proxies).
func (f *Fleet) Stop() error {
	for i := len(f.procs) - 1; i >= 0; i-- {
		_ = syscall.Kill(-f.procs[i].cmd.Process.Pid, syscall.SIGTERM)
		// A stopped process (StopProcess) acts on SIGTERM only once continued.
		_ = syscall.Kill(-f.procs[i].cmd.Process.Pid, syscall.SIGCONT)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range f.procs {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	f.procs = nil
	for name, p := range f.proxies {
		p.close()
		delete(f.proxies, name)
	}
	if f.env != nil {
		err := f.env.Stop()
		f.env = nil
		return err
	}
	return nil
}

// BuildBinaries builds magos-hub and magos-agent from the repository into dir.
func BuildBinaries(ctx context.Context, dir string) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	// Stamped with the checkout's VERSION, as the Makefile stamps its builds.
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return fmt.Errorf("reading the version to stamp: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", "-X github.com/magosfleet/magos/pkg/version.version="+strings.TrimSpace(string(raw)),
		"-o", dir+string(os.PathSeparator), "./hub/cmd/magos-hub", "./agent/cmd/magos-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the binaries: %w\n%s", err, out)
	}
	return nil
}

func copyFile(from, to string) error {
	raw, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, raw, 0o600)
}
