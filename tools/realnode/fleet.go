package realnode

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/scheme"
)

// Env is what `make test-real` and `make demo-real` hand the programs: the built images and
// tools, and the checkout.
type Env struct {
	// NodeImage is the node image (magos-node:dev).
	NodeImage string
	// ImagesDir holds pause.tar, magos-hub.tar, magos-agent.tar and magos-runner.tar.
	ImagesDir string
	// Magosctl is the magosctl binary, as users run it.
	Magosctl string
	// RepoRoot is the checkout: the charts and sample modules.
	RepoRoot string
	// Tag is the images' tag.
	Tag string
}

// EnvFromEnviron reads the Env from MAGOS_NODE_IMAGE, MAGOS_IMAGES_DIR, MAGOS_MAGOSCTL and
// MAGOS_IMAGE_TAG; repoRoot is the checkout.
func EnvFromEnviron(repoRoot string) (Env, error) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		return Env{}, err
	}
	e := Env{
		NodeImage: os.Getenv("MAGOS_NODE_IMAGE"),
		ImagesDir: os.Getenv("MAGOS_IMAGES_DIR"),
		Magosctl:  os.Getenv("MAGOS_MAGOSCTL"),
		Tag:       os.Getenv("MAGOS_IMAGE_TAG"),
		RepoRoot:  root,
	}
	if e.NodeImage == "" || e.ImagesDir == "" || e.Magosctl == "" || e.Tag == "" {
		return e, errors.New("MAGOS_NODE_IMAGE, MAGOS_IMAGES_DIR, MAGOS_MAGOSCTL and MAGOS_IMAGE_TAG must be set: run `make test-real` or `make demo-real`")
	}
	return e, nil
}

// Cluster is one node's cluster as a program reaches it.
type Cluster struct {
	// Node is the node the cluster runs on.
	Node *Node
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Client is an admin client of the cluster, with Magos' types.
	Client client.Client
}

// NewCluster writes the node's admin kubeconfig into dir and makes a client of its cluster.
func NewCluster(n *Node, dir string) (*Cluster, error) {
	path, err := n.WriteKubeconfig(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := n.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	return &Cluster{Node: n, Kubeconfig: path, Client: c}, nil
}

// StartAll starts the nodes side by side and waits for all of them to be Ready. On failure it
// removes the nodes that did start.
func StartAll(ctx context.Context, opts []Options) (map[string]*Node, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	nodes := map[string]*Node{}
	var errs []error
	for _, o := range opts {
		wg.Go(func() {
			n, err := Start(ctx, o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", o.Name, err))
				return
			}
			nodes[o.Name] = n
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range nodes {
			_ = n.Remove(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return nodes, nil
}

// GitServer serves the repositories under root over git's smart HTTP protocol (git
// http-backend behind net/http/cgi) on addr, for the runner Pods to clone. It returns the
// server's base URL and a function that stops it.
func GitServer(addr, root string) (url string, stop func(), err error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return "", nil, fmt.Errorf("git is needed to serve the module's repository: %w", err)
	}
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		return "", nil, err
	}
	h := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// GitRepo makes a repository under root/name holding the given files, committed on main, and
// returns a function that commits changes to it.
func GitRepo(root, name string, files map[string]string) (commit func(files map[string]string) error, err error) {
	dir := filepath.Join(root, name)
	run := func(args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %w\n%s", args, err, out)
		}
		return nil
	}
	commit = func(files map[string]string) error {
		for p, content := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
				return err
			}
		}
		for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "change"}, {"update-server-info"}} {
			if err := run(args...); err != nil {
				return err
			}
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := run("init", "-q", "-b", "main"); err != nil {
		return nil, err
	}
	return commit, commit(files)
}

// helmConfig is Helm's SDK configuration for a namespace of the cluster. Helm's progress lines
// go to logf, but for its wait's "not ready" lines.
func helmConfig(cl *Cluster, namespace string, logf func(format string, v ...any)) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &cl.Kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	hlog := func(format string, v ...any) {
		if line := fmt.Sprintf(format, v...); logf != nil && !strings.Contains(line, "is not ready") {
			logf("helm: %s", line)
		}
	}
	if err := cfg.Init(flags, namespace, "secret", hlog); err != nil {
		return nil, err
	}
	return cfg, nil
}

// HelmTest runs a release's `helm test` hooks and returns an error, with the namespace's Pods,
// if one fails. Each hook's outcome goes to logf (nil for none).
func HelmTest(ctx context.Context, cl *Cluster, name, namespace string, logf func(format string, v ...any)) error {
	cfg, err := helmConfig(cl, namespace, logf)
	if err != nil {
		return err
	}
	rt := action.NewReleaseTesting(cfg)
	rt.Namespace, rt.Timeout = namespace, 3*time.Minute
	rel, err := rt.Run(name)
	if err != nil {
		return fmt.Errorf("helm test %s: %w\n%s", name, err, DescribePods(ctx, cl, namespace))
	}
	for _, h := range rel.Hooks {
		for _, e := range h.Events {
			if e == release.HookTest {
				if logf != nil {
					logf("helm test %s: %s %s", name, h.Name, h.LastRun.Phase)
				}
				if h.LastRun.Phase != release.HookPhaseSucceeded {
					return fmt.Errorf("helm test %s: %s %s", name, h.Name, h.LastRun.Phase)
				}
			}
		}
	}
	return nil
}

// HelmInstall installs (or, with upgrade, upgrades) a chart of the checkout into the cluster,
// as `helm install --wait` does, through Helm's SDK. Helm's progress goes to logf (nil for
// none).
func HelmInstall(ctx context.Context, cl *Cluster, chartDir, name, namespace string, values map[string]any, upgrade bool, logf func(format string, v ...any)) (*release.Release, error) {
	cfg, err := helmConfig(cl, namespace, logf)
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	var rel *release.Release
	if upgrade {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Wait, up.Timeout = namespace, true, 4*time.Minute
		rel, err = up.RunWithContext(ctx, name, ch, values)
	} else {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace, in.Wait, in.Timeout = name, namespace, true, true, 4*time.Minute
		rel, err = in.RunWithContext(ctx, ch, values)
	}
	if err != nil {
		return nil, fmt.Errorf("helm install %s into %s: %w\n%s", name, cl.Node.Name, err, DescribePods(ctx, cl, namespace))
	}
	return rel, nil
}

// Namespace is the namespace of the Projects, Rollouts and Workspaces of the real-node runs:
// the hub binds every registered cluster to it, and to no other.
const Namespace = "default"

// HubValues are the magos-hub chart's values for one replica of the images of tag, registering
// the clusters named, each with its labels, and binding them to Namespace.
func HubValues(tag string, clusters map[string]map[string]any) map[string]any {
	var list, names []any
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		list = append(list, map[string]any{"name": name, "labels": clusters[name], "agent": map[string]any{}})
		names = append(names, name)
	}
	cfg := map[string]any{"clusters": list}
	if len(names) > 0 {
		cfg["bindings"] = []any{map[string]any{"namespaces": []any{Namespace}, "clusters": names}}
	}
	return map[string]any{
		"image":        map[string]any{"repository": "magos-hub", "tag": tag, "pullPolicy": "Never"},
		"replicaCount": 1,
		"config":       cfg,
		// The dashboard on a NodePort, which the tests reach on the hub's node.
		"dashboard": map[string]any{"enabled": true, "service": map[string]any{"type": "NodePort"}},
	}
}

// AgentValues are the magos-agent chart's values for one replica of the images of tag in the
// cluster named, reaching the hub through the kubeconfig in the Secret magos-hub-kubeconfig.
func AgentValues(tag, clusterName string) map[string]any {
	return map[string]any{
		"clusterName":  clusterName,
		"replicaCount": 1,
		"hub":          map[string]any{"kubeconfigSecret": map[string]any{"name": "magos-hub-kubeconfig"}},
		"image":        map[string]any{"repository": "magos-agent", "tag": tag, "pullPolicy": "Never"},
		"runner": map[string]any{
			"image":     map[string]any{"repository": "magos-runner", "tag": tag, "pullPolicy": "Never"},
			"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"}, "limits": map[string]any{"memory": "512Mi"}},
		},
	}
}

// AgentKubeconfig runs `magosctl agent-kubeconfig` against the hub until it prints the
// bootstrap kubeconfig of the cluster named (the hub makes it once it has registered the
// cluster), as docs/install.md tells users to.
func AgentKubeconfig(ctx context.Context, magosctl, hubKubeconfig, clusterName string) ([]byte, error) {
	var out []byte
	err := Poll(ctx, 2*time.Minute, "magosctl agent-kubeconfig "+clusterName, func(ctx context.Context) (bool, string) {
		o, err := exec.CommandContext(ctx, magosctl, "--kubeconfig", hubKubeconfig, "agent-kubeconfig", clusterName).Output()
		if err != nil {
			return false, fmt.Sprint(err)
		}
		out = o
		return true, ""
	})
	return out, err
}

// BootstrapSecret creates the namespace and, in it, the Secret magos-hub-kubeconfig holding
// the agent's bootstrap kubeconfig, which AgentValues points the agent at.
func BootstrapSecret(ctx context.Context, cl *Cluster, namespace string, kubeconfig []byte) error {
	if err := cl.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	return cl.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "magos-hub-kubeconfig", Namespace: namespace},
		Data: map[string][]byte{"kubeconfig": kubeconfig}})
}

// DescribePods says where each Pod of a namespace stands, and its warning events, for failure
// messages.
func DescribePods(ctx context.Context, cl *Cluster, namespace string) string {
	pods := &corev1.PodList{}
	if err := cl.Client.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Waiting != nil:
				fmt.Fprintf(&b, " %s waiting %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Terminated != nil:
				fmt.Fprintf(&b, " %s terminated %s (%d) %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
			}
		}
		b.WriteString("\n")
	}
	ev := &corev1.EventList{}
	if err := cl.Client.List(ctx, ev, client.InNamespace(namespace)); err == nil {
		for _, e := range ev.Items {
			if e.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

// StaticVolumes provisions n hostPath PersistentVolumes of no storage class in the node, as an
// administrator of a cluster without a dynamic provisioner would: the runs' data volumes bind
// to them. Their folders are writable by the runner's non-root user.
func StaticVolumes(ctx context.Context, cl *Cluster, n int) error {
	for i := range n {
		dir := fmt.Sprintf("/var/lib/magos-volumes/pv%d", i)
		if _, err := cl.Node.Exec(ctx, "sh", "-c", "mkdir -p "+dir+" && chmod 1777 "+dir); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("magos-data-%d", i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: dir, Type: ptrTo(corev1.HostPathDirectory),
				}},
			},
		}
		if err := cl.Client.Create(ctx, pv); err != nil {
			return err
		}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// Poll waits for cond with a deadline; on timeout the error says what last went wrong.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		if ctx.Err() == nil || last == "" { // keep the reason seen before the deadline cut a call short
			last = why
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s: not within %s: %s", what, timeout, last)
	}
	return nil
}

// Gunzip decompresses b, as the tofu kubernetes backend's state Secrets hold it.
func Gunzip(b []byte) (string, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	out, err := io.ReadAll(r)
	return string(out), err
}

// WaitClustersReady waits until each named Cluster is Ready on the hub c, for at most timeout.
func WaitClustersReady(ctx context.Context, c client.Client, names []string, timeout time.Duration) error {
	return Poll(ctx, timeout, "the clusters Ready on the hub", func(ctx context.Context) (bool, string) {
		for _, name := range names {
			cl := &magosv1.Cluster{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, cl); err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(cl.Status.Conditions, magosv1.ConditionReady) {
				return false, fmt.Sprintf("cluster %s: %+v", name, cl.Status.Conditions)
			}
		}
		return true, ""
	})
}
