package realnode

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"

	"github.com/magosfleet/magos/pkg/scheme"
)

// bedEnv is what `make test-real` hands the test: the built images and tools.
type bedEnv struct {
	nodeImage string // magos-node:dev
	imagesDir string // pause.tar, magos-hub.tar, magos-agent.tar, magos-runner.tar
	magosctl  string // the magosctl binary, as users run it
	repoRoot  string // the checkout: charts and sample modules
	tag       string // the images' tag
}

func requireEnv(t *testing.T) bedEnv {
	t.Helper()
	e := bedEnv{
		nodeImage: os.Getenv("MAGOS_NODE_IMAGE"),
		imagesDir: os.Getenv("MAGOS_IMAGES_DIR"),
		magosctl:  os.Getenv("MAGOS_MAGOSCTL"),
		tag:       os.Getenv("MAGOS_IMAGE_TAG"),
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	e.repoRoot = root
	if e.nodeImage == "" || e.imagesDir == "" || e.magosctl == "" || e.tag == "" {
		t.Fatal("MAGOS_NODE_IMAGE, MAGOS_IMAGES_DIR, MAGOS_MAGOSCTL and MAGOS_IMAGE_TAG must be set: run `make test-real`")
	}
	return e
}

// cluster is one node's cluster as the test reaches it.
type cluster struct {
	node       *Node
	kubeconfig string // path of the admin kubeconfig
	c          client.Client
}

func newCluster(t *testing.T, n *Node, dir string) *cluster {
	t.Helper()
	path, err := n.WriteKubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := n.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{node: n, kubeconfig: path, c: c}
}

// gitServer serves the repositories under root over git's smart HTTP protocol (git
// http-backend behind net/http/cgi) on addr, for the runner Pods to clone.
func gitServer(t *testing.T, addr, root string) string {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed to serve the test repository: ", err)
	}
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	h := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// gitRepo makes a repository under root/name holding the given files, committed on main, and
// returns a function that commits changes to it.
func gitRepo(t *testing.T, root, name string, files map[string]string) func(files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, name)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	commit := func(files map[string]string) {
		t.Helper()
		for p, content := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		run("add", "-A")
		run("commit", "-q", "-m", "change")
		run("update-server-info")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run("init", "-q", "-b", "main")
	commit(files)
	return commit
}

// helmConfig is Helm's SDK configuration for a namespace of the cluster. Helm's progress lines
// go to the test log, but for its wait's "not ready" lines.
func helmConfig(t *testing.T, cl *cluster, namespace string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &cl.kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) {
		if line := fmt.Sprintf(format, v...); !strings.Contains(line, "is not ready") {
			t.Log("helm: " + line)
		}
	}
	if err := cfg.Init(flags, namespace, "secret", logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// helmTest runs a release's `helm test` hooks and fails the test, with their logs, if one fails.
func helmTest(t *testing.T, ctx context.Context, cl *cluster, name, namespace string) {
	t.Helper()
	cfg := helmConfig(t, cl, namespace)
	rt := action.NewReleaseTesting(cfg)
	rt.Namespace, rt.Timeout = namespace, 3*time.Minute
	rel, err := rt.Run(name)
	if err != nil {
		t.Fatalf("helm test %s: %v\n%s", name, err, describePods(ctx, cl, namespace))
	}
	for _, h := range rel.Hooks {
		for _, e := range h.Events {
			if e == release.HookTest {
				t.Logf("helm test %s: %s %s", name, h.Name, h.LastRun.Phase)
				if h.LastRun.Phase != release.HookPhaseSucceeded {
					t.Fatalf("helm test %s: %s %s", name, h.Name, h.LastRun.Phase)
				}
			}
		}
	}
}

// helmInstall installs (or, with upgrade, upgrades) a chart of the checkout into the cluster,
// as `helm install --wait` does, through Helm's SDK.
func helmInstall(t *testing.T, ctx context.Context, cl *cluster, chartDir, name, namespace string, values map[string]any, upgrade bool) *release.Release {
	t.Helper()
	cfg := helmConfig(t, cl, namespace)
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
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
		t.Fatalf("helm install %s into %s: %v\n%s", name, cl.node.Name, err, describePods(ctx, cl, namespace))
	}
	return rel
}

// describePods says where each Pod of a namespace stands, for failure messages.
func describePods(ctx context.Context, cl *cluster, namespace string) string {
	pods := &corev1.PodList{}
	if err := cl.c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
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
	if err := cl.c.List(ctx, ev, client.InNamespace(namespace)); err == nil {
		for _, e := range ev.Items {
			if e.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

// staticVolumes provisions n hostPath PersistentVolumes of no storage class in the node, as an
// administrator of a cluster without a dynamic provisioner would: the runs' data volumes bind
// to them. Their folders are writable by the runner's non-root user.
func staticVolumes(t *testing.T, ctx context.Context, cl *cluster, n int) {
	t.Helper()
	for i := range n {
		dir := fmt.Sprintf("/var/lib/magos-volumes/pv%d", i)
		if _, err := cl.node.Exec(ctx, "sh", "-c", "mkdir -p "+dir+" && chmod 1777 "+dir); err != nil {
			t.Fatal(err)
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
		if err := cl.c.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// poll waits for cond with a deadline, failing the test with what last went wrong.
func poll(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %s", what, timeout, last)
	}
}

func gunzipBytes(b []byte) (string, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	out, err := io.ReadAll(r)
	return string(out), err
}
