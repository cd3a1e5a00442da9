package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/release"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds magos-hub and magos-agent from this checkout (once per test run) and returns
// the folder that holds them.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "magos-charts-bin-"); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./hub/cmd/magos-hub", "./agent/cmd/magos-agent")
		cmd.Dir = root
		// This module is outside go.work; the binaries are built in it.
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the binaries: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// serviceAccountKubeconfig writes a kubeconfig that reaches the API server of admin as the
// ServiceAccount namespace/name (impersonated): what a Pod of that ServiceAccount may do.
func serviceAccountKubeconfig(t *testing.T, admin, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = "system:serviceaccount:" + namespace + ":" + name
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// releaseObjects decodes a Helm release's manifest and hooks, by "Kind/name".
func releaseObjects(t *testing.T, rel *release.Release) map[string]*unstructured.Unstructured {
	t.Helper()
	files := map[string]string{"manifest": rel.Manifest}
	for i, h := range rel.Hooks {
		files[fmt.Sprintf("hook-%d", i)] = h.Manifest
	}
	objs, err := decode(rel.Chart, files)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// localCommand turns a container of an installed Pod template into a command on this machine:
// the container's arguments (a --flag=value is replaced when replace has its --flag=), its
// environment (metadata.namespace and metadata.name from the downward API as namespace and
// pod), and KUBECONFIG as the Pod's ServiceAccount would be.
func localCommand(t *testing.T, c corev1.Container, pod, kubeconfig string, replace map[string]string) ([]string, []string) {
	t.Helper()
	var args []string
	for _, a := range c.Args {
		flag, _, _ := strings.Cut(a, "=")
		if v, ok := replace[flag+"="]; ok {
			a = flag + "=" + v
		}
		args = append(args, a)
	}
	env := []string{"KUBECONFIG=" + kubeconfig, "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+namespace)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+pod)
		default:
			t.Fatalf("container %s: environment variable %s: no local value", c.Name, e.Name)
		}
	}
	return args, env
}

// process is a controller running on this machine, its output in a file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startProcess(t *testing.T, name, path string, args, env []string) *process {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan error, 1)}
	go func() {
		p.done <- cmd.Wait()
		_ = f.Close()
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s, last lines of its output:\n%s", name, p.tail())
		}
	})
	return p
}

// stop ends the process with SIGTERM (SIGKILL after 30s) and fails the test if it had already
// stopped with an error.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	select {
	case err := <-p.done:
		t.Errorf("%s stopped before the test ended: %v\n%s", p.name, err, p.tail())
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case <-p.done:
	case <-deadline.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop on SIGTERM within 30s", p.name)
	}
}

// tail returns the last lines of the process's output.
func (p *process) tail() string {
	raw, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// forbidden returns the lines of the process's output where the API server refused a request.
func (p *process) forbidden() []string {
	raw, _ := os.ReadFile(p.log)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "forbidden") {
			out = append(out, line)
		}
	}
	return out
}

// runCommand runs a command to its end and returns its output.
func runCommand(ctx context.Context, path string, args, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func deploymentContainer(t *testing.T, objs map[string]*unstructured.Unstructured, name string) corev1.Container {
	t.Helper()
	return as[appsv1.Deployment](t, objs["Deployment/"+name]).Spec.Template.Spec.Containers[0]
}

func testPodContainer(t *testing.T, objs map[string]*unstructured.Unstructured, name string) corev1.Container {
	t.Helper()
	return as[corev1.Pod](t, objs["Pod/"+name+"-test"]).Spec.Containers[0]
}

// runInstalled runs the installed hub and agent on this machine with their Deployments'
// arguments, as their ServiceAccounts (so under the charts' RBAC, narrowed Secrets included):
// the hub engages the cluster through the kubeconfig Secret it may read, the agent starts a run
// that needs the repository credentials and a Secret variable of its Workspace's namespace, and
// the charts' helm test commands pass. Neither is refused anything by the API server.
func runInstalled(ctx context.Context, t *testing.T, adminKubeconfig string, kube client.Client, hubObjs, agentObjs map[string]*unstructured.Unstructured) {
	bin := binaries(t)
	hubKubeconfig := serviceAccountKubeconfig(t, adminKubeconfig, "magos-hub")
	agentKubeconfig := serviceAccountKubeconfig(t, adminKubeconfig, "magos-agent")

	// The hub's own cluster, registered as a direct cluster reached with the hub's own
	// identity (kubeconfig.inCluster): the hub runs as its ServiceAccount, so every grant it
	// writes passes the API server's RBAC and the magos-workspace-requests admission policy as
	// the installed hub's would.
	config := filepath.Join(t.TempDir(), "config.yaml")
	cm := as[corev1.ConfigMap](t, hubObjs["ConfigMap/magos-hub-config"])
	if err := os.WriteFile(config, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	off := map[string]string{"--metrics-bind-address=": "0", "--health-probe-bind-address=": "0", "--config=": config}
	// The Deployments run their images' entrypoints: /usr/local/bin/magos-hub and magos-agent.
	args, env := localCommand(t, deploymentContainer(t, hubObjs, "magos-hub"), "magos-hub-0", hubKubeconfig, off)
	hub := startProcess(t, "magos-hub", filepath.Join(bin, "magos-hub"), args, env)
	args, env = localCommand(t, deploymentContainer(t, agentObjs, "magos-agent"), "magos-agent-0", agentKubeconfig, off)
	// In a Pod the agent finds its namespace in the ServiceAccount's files; here it is told.
	agent := startProcess(t, "magos-agent", filepath.Join(bin, "magos-agent"), append(args, "--leader-election-namespace="+namespace), env)

	testenv.Eventually(t, 2*time.Minute, func() error {
		cl := &magosv1.Cluster{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "local"}, cl); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, magosv1.ConditionEngaged) {
			return fmt.Errorf("cluster local not engaged: %v", cl.Status.Conditions)
		}
		return nil
	})

	// A Workspace whose run needs both kinds of Secret the agent reads, in a Project the hub
	// runs at once.
	repo := gitrepotest.New(t)
	repo.Commit(t, "module", map[string]string{"main.tf": "variable \"token\" {}\n"})
	for _, o := range []client.Object{
		&magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "cdn",
			Annotations: map[string]string{keys.Orchestration: "parallel"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "git-credentials",
			Labels: map[string]string{"magosproject.io/secret-type": "repository"}},
			StringData: map[string]string{"repoURL": repo.URL(), "username": "bot", "password": "hunter2"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "cdn-variables"}, StringData: map[string]string{"token": "s3cr3t"}},
		&magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "cdn"}, Spec: magosv1.VariableSetSpec{
			Variables: []magosv1.Variable{{Name: "token", ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "cdn-variables", Key: "token"}}}}}},
		&magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "cdn-run"}, Spec: magosv1.WorkspaceSpec{
			ProjectRef:      magosv1.ProjectReference{Name: "cdn"},
			Source:          magosv1.Source{RepoURL: repo.URL(), TargetRevision: "main", Path: "."},
			Terraform:       magosv1.TerraformSpec{Binary: magosv1.BinaryOpenTofu, Version: "1.10.6"},
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: "cdn"}},
		}},
	} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		var jobs batchv1.JobList
		if err := kube.List(ctx, &jobs, client.InNamespace("payments"), client.MatchingLabels{keys.Workspace: "cdn-run"}); err != nil {
			return err
		}
		if len(jobs.Items) == 0 {
			ws := &magosv1.Workspace{}
			_ = kube.Get(ctx, client.ObjectKey{Namespace: "payments", Name: "cdn-run"}, ws)
			return fmt.Errorf("no run Job yet; Workspace status %+v", ws.Status.Conditions)
		}
		env := fmt.Sprint(jobs.Items[0].Spec.Template.Spec.Containers[0].Env)
		if !strings.Contains(env, "cdn-variables") || !strings.Contains(env, "git-credentials") {
			return fmt.Errorf("the run Job's environment lacks the Secrets: %s", env)
		}
		return nil
	})

	// helm test, as the test Pods would run it.
	for _, tc := range []struct {
		release string
		objs    map[string]*unstructured.Unstructured
		kc      string
		want    string
	}{
		{"magos-hub", hubObjs, hubKubeconfig, "hub leader: magos-hub-0\nregistered clusters: 1\n  local (direct) Ready="},
		{"magos-agent", agentObjs, agentKubeconfig, "agent leader: "},
	} {
		c := testPodContainer(t, tc.objs, tc.release)
		args, env := localCommand(t, c, tc.release+"-test", tc.kc, off)
		path := filepath.Join(bin, filepath.Base(c.Command[0])) // TestHelmTestPods: a binary of the image
		out, err := runCommand(ctx, path, args, env)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("helm test %s: %s %v: %v\n%s", tc.release, filepath.Base(path), args, err, out)
		}
	}

	// A second hub on the same API server, as the installed hub's ServiceAccount (the chart's
	// RBAC lets it list every namespace's leader Lease) with its Lease in another namespace,
	// refuses to start and exits 1, naming the running hub's Lease and leader (hub/hubclaim).
	args, env = localCommand(t, deploymentContainer(t, hubObjs, "magos-hub"), "other-hub-0", hubKubeconfig, off)
	second, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := runCommand(second, filepath.Join(bin, "magos-hub"), append(args, "--leader-election-namespace=other-hub"), env)
	cancel()
	want := "another magos hub runs on this API server: its leader Lease " + namespace + "/" + keys.HubLeaderLease + " is held by magos-hub-0 (version "
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, want) {
		t.Errorf("a second magos-hub on the API server: %v, want exit status 1 and %q in its output:\n%s", err, want, out)
	}

	for _, p := range []*process{hub, agent} {
		p.stop(t)
		if lines := p.forbidden(); len(lines) > 0 {
			t.Errorf("the API server refused %s:\n%s", p.name, strings.Join(lines, "\n"))
		}
	}
}
