package runner_test

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// envInClusterHelper makes the test binary run the runner entrypoint instead of the tests (see
// TestInClusterRunnerHelperProcess).
const envInClusterHelper = "MAGOS_TEST_INCLUSTER_RUNNER"

// inPod runs its arguments where a Pod's containers find their ServiceAccount: a private mount
// namespace with an empty /var/run holding the folder given as the ServiceAccount's (token,
// ca.crt, namespace), so that nothing of this machine changes.
const inPod = `set -e
sa=$1; shift
mount --make-rprivate /
mount -t tmpfs tmpfs /var/run
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
cp -R "$sa"/. /var/run/secrets/kubernetes.io/serviceaccount/
exec "$@"`

// TestRunKubectlProviderInCluster runs a plan and an apply of a module with provider "kubectl"
// {} through the runner entrypoint as a run Job's Pod would: no kubeconfig anywhere, the
// ServiceAccount's token where Kubernetes mounts it, KUBERNETES_SERVICE_HOST and _PORT, and
// KUBE_LOAD_CONFIG_FILE=false as the agent's Jobs set it (TestJobProviderMirror in
// agent/execution). The state is in the kubernetes backend with in_cluster_config, as a Job's.
// The provider acts as the ServiceAccount: one that may not manage ConfigMaps (only the
// state's Secrets and Leases, the chart's rules) is refused by the API server, named; one
// allowed to applies the ConfigMap. Needs Linux, root and unshare (mount namespaces); it is skipped otherwise,
// but fails under CI.
func TestRunKubectlProviderInCluster(t *testing.T) {
	unshare := mountNamespace(t, "put a ServiceAccount token where a Pod has it", inPod, t.TempDir())
	mirror := providerMirror(t)
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"spoke"}})
	spoke := fleet.Spokes["spoke"]
	ctx := context.Background()
	const ns = "team-a"
	// The chart's rules for run Jobs (templates/job-rbac.yaml), and ConfigMaps: what an
	// operator adds for modules that manage them (docs/providers.md).
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "magos-job"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "state-only"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runs"}, Rules: rules},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "state"}, Rules: rules[:2]},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runs"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "runs"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "magos-job"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "state"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "state"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "state-only"}}},
	} {
		if err := spoke.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	server, err := url.Parse(spoke.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(server.Host)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, map[string]string{"main.tf": kubeModule})

	// run runs op through the runner entrypoint in a Pod's place, as the ServiceAccount sa.
	run := func(sa string, op runner.Operation) runner.Result {
		t.Helper()
		tr, err := kubernetes.NewForConfigOrDie(spoke.Config).CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a token of %s: %v", sa, err)
		}
		saDir := t.TempDir()
		for name, content := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": spoke.Config.CAData, "namespace": []byte(ns)} {
			if err := os.WriteFile(filepath.Join(saDir, name), content, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		spec := f.spec(op)
		spec.Backend = runner.Backend{Kubernetes: &runner.KubernetesBackend{Namespace: ns, SecretSuffix: "settings"}}
		resultFile := filepath.Join(t.TempDir(), "termination-log")
		home := t.TempDir()
		cmd := exec.Command(unshare, "--mount", "sh", "-c", inPod, "sh", saDir,
			os.Args[0], "-test.run=^TestInClusterRunnerHelperProcess$", "-test.v")
		cmd.Env = []string{
			envInClusterHelper + "=1",
			"PATH=" + os.Getenv("PATH"),
			"HOME=" + home, "TMPDIR=" + home,
			"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
			runner.EnvKubeLoadConfigFile + "=false",
			runner.EnvProviderMirror + "=" + mirror,
			runner.EnvSpec + "=" + mustJSON(spec),
			runner.EnvResultFile + "=" + resultFile,
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		raw, rerr := os.ReadFile(resultFile)
		if rerr != nil {
			t.Fatalf("%s as %s: no result (%v; exit %v):\n%s", op, sa, rerr, err, out.String())
		}
		res, rerr := runner.DecodeResult(raw)
		if rerr != nil {
			t.Fatalf("%s as %s: %v", op, sa, rerr)
		}
		t.Logf("%s as %s: %s: %s", op, sa, res.Outcome, res.Message)
		return res
	}

	if res := run("state-only", runner.OperationPlan); res.Outcome != runner.OutcomeSucceeded || res.Add != 2 {
		t.Fatalf("plan as state-only = %+v; want Succeeded, 2 to add (a plan of new objects reads none)", res)
	}
	if res := run("state-only", runner.OperationApply); res.Outcome != runner.OutcomeFailed ||
		!strings.Contains(res.Message, "system:serviceaccount:"+ns+":state-only") || !strings.Contains(res.Message, "configmaps") {
		t.Fatalf("apply as a ServiceAccount without rights on ConfigMaps = %+v; want Failed, refused by the API server by its name", res)
	}
	// The refused apply kept time_static in the state; the ConfigMap is still to add.
	if res := run("magos-job", runner.OperationPlan); res.Outcome != runner.OutcomeSucceeded || res.Add != 1 {
		t.Fatalf("plan as magos-job = %+v; want Succeeded, 1 to add (the ConfigMap)", res)
	}
	if res := run("magos-job", runner.OperationApply); res.Outcome != runner.OutcomeSucceeded {
		t.Fatalf("apply as magos-job = %+v; want Succeeded", res)
	}
	cm := &corev1.ConfigMap{}
	if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "settings"}, cm); err != nil || cm.Data["color"] != "blue" {
		t.Fatalf("the ConfigMap the run applied: %v %v; want color blue", cm.Data, err)
	}
	if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tfstate-default-settings"}, &corev1.Secret{}); err != nil {
		t.Fatalf("the state Secret of the in-cluster backend: %v", err)
	}
}

// TestInClusterRunnerHelperProcess is the runner entrypoint of TestRunKubectlProviderInCluster,
// run in its mount namespace; it does nothing in a normal test run.
func TestInClusterRunnerHelperProcess(t *testing.T) {
	if os.Getenv(envInClusterHelper) == "" {
		return
	}
	os.Exit(runner.Main(context.Background()))
}
