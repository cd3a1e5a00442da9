// Command magos-demo-real shows a Rollout moving region by region on real nodes: a hub
// cluster and three spoke clusters (us-east-1, eu-west-1, ap-south-1), each a Docker container
// of the magos-node image with a real kubelet, the hub and agent charts installed with Helm's
// SDK, and every plan and apply a runner Job. It prints the Rollout as `magosctl rollout
// status` shows it whenever it changes, ends with a summary line, and exits 0 only when every
// region applied. With --fail-region REGION that region's plan fails on purpose (its VariableSet
// marks it unhealthy): the demo then shows the Rollout halting there, and exits 0 only when it
// halted at that region with no later region granted. Its nodes and network are removed on exit and on Ctrl-C, and the kernel
// settings the kubelets change are put back.
//
// `make demo-real` builds the images and runs it; it reads the same environment as `make
// test-real` (MAGOS_NODE_IMAGE, MAGOS_IMAGES_DIR, MAGOS_MAGOSCTL, MAGOS_IMAGE_TAG).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/mirror"

	"github.com/magosfleet/magos/tools/realnode"
)

// The demo's network and nodes: apart from `make test-real`'s (magos-real, 10.213.0.0/24,
// magos-hub and magos-spoke-1), so that the two never collide.
const (
	network = "magos-demo"
	subnet  = "10.214.0.0/24"
	system  = "magos-system"
)

// The demo's objects are those of `make demo` (pkg/demoscenario).
const (
	project   = demoscenario.Project
	workspace = demoscenario.Workspace
)

// region is a spoke and its node's address.
type region struct{ name, addr string }

// regions are the spokes, in the Rollout's order, with their nodes' addresses.
var regions = []region{
	{"us-east-1", "10.214.0.11"},
	{"eu-west-1", "10.214.0.12"},
	{"ap-south-1", "10.214.0.13"},
}

const hubAddr = "10.214.0.10"

func main() {
	repo := flag.String("repo", "../..", "the checkout (charts)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up on the Rollout after this long")
	failRegion := flag.String("fail-region", "", "make this region's plan fail, to show the Rollout halting there")
	flag.Parse()
	if *failRegion != "" && !slices.ContainsFunc(regions, func(r region) bool { return r.name == *failRegion }) {
		logf("--fail-region %s: no such region (have %s)", *failRegion, strings.Join(regionNames(), ", "))
		os.Exit(2)
	}
	os.Exit(run(*repo, *timeout, *failRegion))
}

func regionNames() []string {
	var out []string
	for _, r := range regions {
		out = append(out, r.name)
	}
	return out
}

func logf(format string, v ...any) {
	fmt.Fprintf(os.Stderr, "demo-real: "+format+"\n", v...)
}

func run(repo string, timeout time.Duration, failRegion string) int {
	env, err := realnode.EnvFromEnviron(repo)
	if err != nil {
		logf("%v", err)
		return 2
	}
	// Ctrl-C cancels the demo; the cleanup below still runs (and further signals are ignored
	// while it does, so that it finishes).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	restore, err := realnode.SaveKernelTunables()
	if err != nil {
		logf("%v", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "magos-demo-real-")
	if err != nil {
		logf("%v", err)
		return 2
	}
	var cleanups []func() error
	defer func() {
		if ctx.Err() != nil {
			logf("interrupted")
		}
		logf("cleaning up: nodes, network %s, kernel settings", network)
		var errs []error
		for _, c := range cleanups {
			errs = append(errs, c())
		}
		errs = append(errs, os.RemoveAll(dir), restore())
		if err := errors.Join(errs...); err != nil {
			logf("cleanup: %v", err)
		}
	}()

	ok, err := demo(ctx, env, dir, timeout, failRegion, &cleanups)
	switch {
	case ctx.Err() != nil:
		return 130 // interrupted: the deferred cleanup says so
	case err != nil:
		logf("%v", err)
		return 1
	case !ok:
		return 1
	}
	return 0
}

// demo sets the fleet up, rolls the module out and follows the Rollout. It registers what it
// must undo in cleanups, last first.
func demo(ctx context.Context, env realnode.Env, dir string, timeout time.Duration, failRegion string, cleanups *[]func() error) (bool, error) {
	push := func(f func() error) { *cleanups = append([]func() error{f}, *cleanups...) }
	start := time.Now()

	gateway, err := realnode.CreateNetwork(ctx, realnode.NetworkOptions{Name: network, Subnet: subnet})
	if err != nil {
		return false, err
	}
	push(func() error { return realnode.RemoveNetwork(context.Background(), network) })

	// Four nodes, started side by side.
	opts := []realnode.Options{{Name: "magos-demo-hub", Address: hubAddr}}
	for _, r := range regions {
		opts = append(opts, realnode.Options{Name: "magos-demo-" + r.name, Address: r.addr})
	}
	for i := range opts {
		opts[i].Image, opts[i].Network, opts[i].ImagesDir = env.NodeImage, network, env.ImagesDir
	}
	logf("starting 4 nodes on %s (%s): a node takes 20-60 s to be Ready", network, subnet)
	nodes, err := realnode.StartAll(ctx, opts)
	if err != nil {
		return false, err
	}
	clusters := map[string]*realnode.Cluster{}
	for _, o := range opts {
		cl, err := realnode.NewCluster(nodes[o.Name], dir)
		if err != nil {
			return false, err
		}
		clusters[strings.TrimPrefix(o.Name, "magos-demo-")] = cl
		logf("node %s Ready at %s after %s", o.Name, o.Address, nodes[o.Name].ReadyAfter.Round(time.Second))
	}
	hub := clusters["hub"]

	// The module, served from this machine (the nodes' gateway) over git's smart HTTP.
	repos := filepath.Join(dir, "repos")
	if _, err := realnode.GitRepo(repos, "edge.git", map[string]string{"main.tf": demoscenario.Module}); err != nil {
		return false, err
	}
	base, stopGit, err := realnode.GitServer(gateway, repos)
	if err != nil {
		return false, err
	}
	push(func() error { stopGit(); return nil })
	repoURL := base + "/edge.git"
	logf("module served at %s", repoURL)

	// The hub, installed once with Helm, knowing the three clusters.
	known := map[string]map[string]any{}
	for _, r := range regions {
		known[r.name] = map[string]any{"region": r.name}
	}
	logf("helm install magos-hub into the hub")
	if _, err := realnode.HelmInstall(ctx, hub, filepath.Join(env.RepoRoot, "charts/magos-hub"), "magos-hub", system,
		realnode.HubValues(env.Tag, known), false, nil); err != nil {
		return false, err
	}

	// An agent in each spoke, from the bootstrap kubeconfig magosctl prints against the hub.
	var wg sync.WaitGroup
	errs := make([]error, len(regions))
	for i, r := range regions {
		wg.Go(func() {
			errs[i] = installAgent(ctx, env, hub, clusters[r.name], r.name)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	names := make([]string, 0, len(regions))
	for _, r := range regions {
		names = append(names, r.name)
	}
	if err := realnode.WaitClustersReady(ctx, hub.Client, names, 3*time.Minute); err != nil {
		return false, err
	}
	logf("the three clusters are Ready on the hub (%s since start)", time.Since(start).Round(time.Second))

	// A Workspace and its VariableSet in every spoke, then, once the hub mirrors them, the
	// Project and the Rollout that orders them (see samples/multi-region).
	for _, r := range regions {
		if err := applySpoke(ctx, clusters[r.name], r.name, repoURL, r.name == failRegion); err != nil {
			return false, err
		}
	}
	if err := realnode.Poll(ctx, 3*time.Minute, "the Workspaces mirrored on the hub", func(ctx context.Context) (bool, string) {
		for _, r := range regions {
			m := &magosv1.Workspace{}
			key := client.ObjectKey{Namespace: mirror.Namespace(r.name), Name: mirror.Name(corev1.NamespaceDefault, workspace)}
			if err := hub.Client.Get(ctx, key, m); err != nil {
				return false, fmt.Sprintf("%s: %v", r.name, err)
			}
		}
		return true, ""
	}); err != nil {
		return false, err
	}
	if err := applyHub(ctx, hub); err != nil {
		return false, err
	}
	logf("Project and Rollout %s applied on the hub: rolling out (%s since start)\n", project, time.Since(start).Round(time.Second))

	return follow(ctx, env, hub, clusters, timeout, start, failRegion)
}

// installAgent installs the agent chart into a spoke as docs/install.md says.
func installAgent(ctx context.Context, env realnode.Env, hub, spoke *realnode.Cluster, name string) error {
	bootstrap, err := realnode.AgentKubeconfig(ctx, env.Magosctl, hub.Kubeconfig, name)
	if err != nil {
		return err
	}
	if err := realnode.BootstrapSecret(ctx, spoke, system, bootstrap); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// Each run binds a data volume; the clusters have no dynamic provisioner.
	if err := realnode.StaticVolumes(ctx, spoke, 8); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	logf("helm install magos-agent into %s", name)
	_, err = realnode.HelmInstall(ctx, spoke, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", system,
		realnode.AgentValues(env.Tag, name), false, nil)
	return err
}

// applySpoke creates a spoke's VariableSet and Workspace; unhealthy marks the region so that
// its plan fails.
func applySpoke(ctx context.Context, cl *realnode.Cluster, region, repoURL string, unhealthy bool) error {
	vs, ws := demoscenario.SpokeObjects(region, magosv1.Source{RepoURL: repoURL, TargetRevision: "main", Path: "."}, unhealthy)
	return demoscenario.Create(ctx, cl.Client, "in "+region, vs, ws)
}

func applyHub(ctx context.Context, hub *realnode.Cluster) error {
	p, ro := demoscenario.HubObjects(regionNames())
	return demoscenario.Create(ctx, hub.Client, "on the hub", p, ro)
}

// follow prints `magosctl rollout status` against the hub whenever it changes, until the
// Rollout is Applied or Failed, then the summary line. It returns whether every region applied
// or, with failRegion, whether the Rollout halted there before granting a later region.
func follow(ctx context.Context, env realnode.Env, hub *realnode.Cluster, clusters map[string]*realnode.Cluster, timeout time.Duration, start time.Time, failRegion string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := time.Now()
	var last string
	done := map[string]time.Duration{}
	var order []string
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		out, err := exec.CommandContext(ctx, env.Magosctl, "--kubeconfig", hub.Kubeconfig, "rollout", "status", project).CombinedOutput()
		if text := string(out); err == nil && text != last {
			fmt.Printf("[+%s]\n%s\n", time.Since(began).Round(time.Second), text)
			last = text
		}
		r := &magosv1.Rollout{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: project}, r); err == nil {
			for _, st := range r.Status.Steps {
				if _, seen := done[st.Name]; !seen && st.Phase == magosv1.StepCompleted {
					done[st.Name] = time.Since(began)
					order = append(order, st.Name)
				}
			}
			if r.Status.ObservedGeneration == r.Generation {
				switch r.Status.Phase {
				case magosv1.PhaseApplied:
					applied, jobs, err := appliedEverywhere(ctx, clusters)
					if err != nil {
						return false, err
					}
					var steps []string
					for _, s := range order {
						steps = append(steps, fmt.Sprintf("%s +%s", s, done[s].Round(time.Second)))
					}
					fmt.Printf("demo-real: Rollout %s Applied in %d/%d regions through %d runner Jobs, region by region (%s); rollout %s, whole demo %s\n",
						project, applied, len(regions), jobs, strings.Join(steps, " -> "), time.Since(began).Round(time.Second), time.Since(start).Round(time.Second))
					return applied == len(regions), nil
				case magosv1.PhaseFailed:
					fmt.Printf("demo-real: Rollout %s Failed at step %s (%s: %s) after %s\n",
						project, r.Status.CurrentStepName, r.Status.Reason, r.Status.Message, time.Since(began).Round(time.Second))
					if failRegion == "" || r.Status.CurrentStepName != failRegion || r.Status.Reason != magosv1.ReasonStepFailed {
						return false, nil
					}
					granted, err := grantedAfter(ctx, clusters, r.Status.CurrentStep)
					if err != nil {
						return false, err
					}
					fmt.Printf("demo-real: halted at %s as asked (--fail-region); later regions granted: %d\n", failRegion, len(granted))
					return len(granted) == 0, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			fmt.Printf("demo-real: Rollout %s did not finish within %s: %v\n", project, timeout, ctx.Err())
			return false, nil
		case <-tick.C:
		}
	}
}

// grantedAfter lists the regions after step whose Workspace holds a grant or ever ran, read
// from the spokes themselves.
func grantedAfter(ctx context.Context, clusters map[string]*realnode.Cluster, step int) ([]string, error) {
	var out []string
	for _, r := range regions[step+1:] {
		ws := &magosv1.Workspace{}
		if err := clusters[r.name].Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: workspace}, ws); err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		if grant.Of(ws).Allowed || ws.Status.Phase != magosv1.PhasePending {
			out = append(out, r.name)
		}
	}
	return out, nil
}

// appliedEverywhere counts the spokes whose Workspace is Applied and the runner Jobs that
// completed there, read from the spokes themselves.
func appliedEverywhere(ctx context.Context, clusters map[string]*realnode.Cluster) (applied, jobs int, err error) {
	for _, r := range regions {
		c := clusters[r.name].Client
		ws := &magosv1.Workspace{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: workspace}, ws); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", r.name, err)
		}
		if ws.Status.Phase == magosv1.PhaseApplied {
			applied++
		}
		list := &batchv1.JobList{}
		if err := c.List(ctx, list, client.InNamespace(corev1.NamespaceDefault)); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", r.name, err)
		}
		for _, j := range list.Items {
			if j.Status.Succeeded > 0 {
				jobs++
			}
		}
	}
	return applied, jobs, nil
}
