package runner_test

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// timeModule needs one provider of the runner image's mirror: hashicorp/time.
const timeModule = `
terraform {
  required_providers {
    time = {
      source = "hashicorp/time"
    }
  }
}

resource "time_static" "created" {}

output "created" {
  value = time_static.created.rfc3339
}
`

// absentModule needs a provider that no mirror of these tests has.
const absentModule = `
terraform {
  required_providers {
    null = {
      source = "hashicorp/null"
    }
  }
}

resource "null_resource" "this" {}
`

// kubeModule manages a ConfigMap with gavinbunney/kubectl, configured by the run's environment
// alone (provider "kubectl" {}), and takes a value from hashicorp/time.
const kubeModule = `
terraform {
  required_providers {
    time = {
      source = "hashicorp/time"
    }
    kubectl = {
      source = "gavinbunney/kubectl"
    }
  }
}

provider "kubectl" {}

resource "time_static" "created" {}

resource "kubectl_manifest" "settings" {
  yaml_body = <<-YAML
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: settings
      namespace: team-a
    data:
      color: blue
      created: "${time_static.created.rfc3339}"
  YAML
}
`

// limitsManifest is a second ConfigMap for kubeModule, in a file of its own.
const limitsManifest = `
resource "kubectl_manifest" "limits" {
  yaml_body = <<-YAML
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: limits
      namespace: team-a
    data:
      cpu: "1"
  YAML
}
`

// providerMirror returns the provider mirror the runner image carries (MAGOS_PROVIDERS, built
// by tools/provision-assets.sh), failing the test when it cannot be had.
func providerMirror(t testing.TB) string {
	t.Helper()
	p, err := localcluster.Providers()
	if err != nil || p == "" {
		t.Fatalf("provider mirror: %v (path %q)", err, p)
	}
	return p
}

// platform is this machine's platform as tofu names it (linux_amd64).
func platform() string { return runtime.GOOS + "_" + runtime.GOARCH }

// providerEnv is the environment of the provider tests' runs: this process's without what would
// steer them elsewhere (the machine's TF_CLI_CONFIG_FILE, proxies, kubeconfigs, provider
// settings), HOME a folder of the test's, and extra.
func providerEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch upper := strings.ToUpper(name); {
		case name == runner.EnvCLIConfigFile, name == "HOME", name == "KUBECONFIG",
			strings.HasPrefix(name, "KUBE_"), strings.HasPrefix(name, "MAGOS_PROVIDER"),
			strings.HasSuffix(upper, "_PROXY"), name == "SSL_CERT_FILE", name == "SSL_CERT_DIR":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+t.TempDir()), extra...)
}

// egress is an HTTP proxy that refuses every request and records where each was going. The
// runs of a test get it as HTTPS_PROXY and HTTP_PROXY: any request of the tool or a provider to
// a host that is not the loopback (which Go never proxies), a provider registry first of all,
// shows here instead of depending on the machine's network.
type egress struct {
	srv   *httptest.Server
	mu    sync.Mutex
	hosts []string
}

func newEgress(t *testing.T) *egress {
	e := &egress{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.hosts = append(e.hosts, r.Method+" "+r.Host)
		e.mu.Unlock()
		http.Error(w, "this test has no network", http.StatusForbidden)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// env points a run's HTTP clients at the proxy.
func (e *egress) env() []string {
	return []string{"HTTPS_PROXY=" + e.srv.URL, "HTTP_PROXY=" + e.srv.URL}
}

// take returns the requests seen since the last call.
func (e *egress) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	hosts := e.hosts
	e.hosts = nil
	return hosts
}

// lockFile returns the dependency lock file tofu writes for main.tf with the packages of
// mirror, for this platform (`tofu providers lock -fs-mirror`): what a user commits.
func lockFile(t *testing.T, tofu, mirror, mainTF string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(mainTF), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyConfig := filepath.Join(t.TempDir(), "cli.tfrc")
	if err := os.WriteFile(emptyConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tofu, "providers", "lock", "-fs-mirror="+mirror, "-platform="+platform())
	cmd.Dir = dir
	cmd.Env = providerEnv(t, runner.EnvCLIConfigFile+"="+emptyConfig, "TF_DATA_DIR="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tofu providers lock: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, runner.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestRunProvidersFromTheMirror: a module using hashicorp/time and gavinbunney/kubectl plans and
// applies with its providers from the runner's mirror (MAGOS_PROVIDER_MIRROR), the kubectl
// provider reaching a real API server through KUBE_CONFIG_PATH alone (what the local launcher
// sets; provider "kubectl" {} in the module), and nothing reaching the network. The ConfigMap it
// manages, changed behind tofu's back, makes the next plan a change: the provider sees drift,
// and the plan counts the change as reverting it (DriftReverts); a commit adding another
// ConfigMap then plans 1 to add (its own) and 1 to change (reverting the drift).
func TestRunProvidersFromTheMirror(t *testing.T) {
	mirror := providerMirror(t)
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"spoke"}})
	spoke := fleet.Spokes["spoke"]
	ctx := context.Background()
	if err := spoke.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	net := newEgress(t)
	f := newFixture(t, map[string]string{"main.tf": kubeModule})
	env := providerEnv(t, append(net.env(), runner.EnvProviderMirror+"="+mirror, runner.EnvKubeConfigPath+"="+spoke.Kubeconfig)...)
	run := func(op runner.Operation, want runner.Outcome) runner.Result {
		t.Helper()
		res := runner.Run(testContext(t), f.spec(op), runner.Options{Stdout: f.out, Stderr: f.out, Env: env})
		if res.Outcome != want {
			t.Fatalf("%s: outcome %s (%s); want %s", op, res.Outcome, res.Message, want)
		}
		return res
	}

	if plan := run(runner.OperationPlan, runner.OutcomeSucceeded); plan.Add != 2 {
		t.Fatalf("first plan = %+v; want 2 to add (time_static, kubectl_manifest)", plan)
	}
	run(runner.OperationApply, runner.OutcomeSucceeded)
	key := client.ObjectKey{Namespace: "team-a", Name: "settings"}
	cm := &corev1.ConfigMap{}
	if err := spoke.Client.Get(ctx, key, cm); err != nil {
		t.Fatalf("the applied ConfigMap: %v", err)
	}
	if cm.Data["color"] != "blue" || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT`).MatchString(cm.Data["created"]) {
		t.Fatalf("ConfigMap data %v; want color blue and created a time from time_static", cm.Data)
	}
	if plan := run(runner.OperationPlan, runner.OutcomeSucceeded); plan.HasChanges {
		t.Fatalf("plan after the apply = %+v; want no changes", plan)
	}

	cm.Data["color"] = "red"
	if err := spoke.Client.Update(ctx, cm); err != nil {
		t.Fatalf("changing the ConfigMap behind tofu's back: %v", err)
	}
	if drift := run(runner.OperationPlan, runner.OutcomeSucceeded); !drift.HasChanges || drift.Change != 1 || drift.Add+drift.Destroy != 0 || drift.DriftReverts != 1 {
		t.Fatalf("plan after the ConfigMap changed = %+v; want 1 to change, reverting drift (the provider sees the drift)", drift)
	}
	// A new commit adds a ConfigMap over the hand-edited one: of the plan's two changes, one
	// puts back what drifted, the other is the commit's own.
	f.sha = f.repo.Commit(t, "another ConfigMap", map[string]string{"limits.tf": limitsManifest})
	if plan := run(runner.OperationPlan, runner.OutcomeSucceeded); plan.Add != 1 || plan.Change != 1 || plan.Destroy != 0 || plan.DriftReverts != 1 {
		t.Fatalf("plan of the changed module over the drifted ConfigMap = %+v; want 1 to add, 1 to change, 1 reverting drift", plan)
	}
	if hosts := net.take(); len(hosts) > 0 {
		t.Errorf("the runs reached for the network: %v; want providers from the mirror only", hosts)
	}
}

// TestRunProviderLockFile: the module's dependency lock file is honoured. A lock file made
// against the mirror (`tofu providers lock -fs-mirror`, as a user makes one) lets the run
// install the mirror's package; one whose checksum is another package's fails the run before
// any plan, with a message naming the checksums and the lock file.
func TestRunProviderLockFile(t *testing.T) {
	mirror := providerMirror(t)
	good := lockFile(t, tofu(t), mirror, timeModule)
	h1 := regexp.MustCompile(`"h1:[A-Za-z0-9+/=]+"`)
	if n := len(h1.FindAllString(good, -1)); n != 1 {
		t.Fatalf("lock file with %d h1 checksums; want 1:\n%s", n, good)
	}
	sum := sha256.Sum256([]byte("another package"))
	bad := h1.ReplaceAllString(good, `"h1:`+base64.StdEncoding.EncodeToString(sum[:])+`"`)
	for _, tt := range []struct {
		name, lock string
		outcome    runner.Outcome
		message    []string
	}{
		{name: "checksum of the mirror's package", lock: good, outcome: runner.OutcomeSucceeded, message: []string{"Plan: 1 to add"}},
		{name: "checksum of another package", lock: bad, outcome: runner.OutcomeFailed,
			message: []string{"does not match the checksums in the module's dependency lock file (" + runner.LockFile + ")", "checksums"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"main.tf": timeModule, runner.LockFile: tt.lock})
			spec := f.spec(runner.OperationPlan)
			res := runner.Run(testContext(t), spec, runner.Options{Stdout: f.out, Stderr: f.out,
				Env: providerEnv(t, runner.EnvProviderMirror+"="+mirror)})
			if res.Outcome != tt.outcome {
				t.Fatalf("plan: %s (%s); want %s", res.Outcome, res.Message, tt.outcome)
			}
			for _, m := range tt.message {
				if !strings.Contains(res.Message, m) {
					t.Errorf("message %q; want it to contain %q", res.Message, m)
				}
			}
			if len(res.Message) > 2*runner.MaxMessageBytes {
				t.Errorf("message of %d bytes; want it short", len(res.Message))
			}
			if tt.outcome != runner.OutcomeSucceeded && fileExists(spec.PlanFile) {
				t.Errorf("plan file %s left by a run that failed its lock file", spec.PlanFile)
			}
		})
	}
}

// networkMirror serves the time provider of mirror over https with OpenTofu's provider network
// mirror protocol, at <URL>/providers/. It returns the mirror's base URL, the file of its
// certificate (the runs' SSL_CERT_FILE), and a function returning the paths it served.
func networkMirror(t *testing.T, mirror string) (string, string, func() []string) {
	t.Helper()
	versions, err := filepath.Glob(filepath.Join(mirror, "registry.opentofu.org", "hashicorp", "time", "*", platform(), "terraform-provider-time_*"))
	if err != nil || len(versions) != 1 {
		t.Fatalf("the time provider in %s: %v %v; want one", mirror, versions, err)
	}
	binary := versions[0]
	version := filepath.Base(filepath.Dir(filepath.Dir(binary)))
	archive := filepath.Join(t.TempDir(), "time.zip")
	zf, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	hdr := &zip.FileHeader{Name: filepath.Base(binary), Method: zip.Store}
	hdr.SetMode(0o755)
	w, err := zw.CreateHeader(hdr)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := io.Copy(w, bin); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	base := "/providers/registry.opentofu.org/hashicorp/time/"
	var mu sync.Mutex
	var served []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case base + "index.json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"versions": {%q: {}}}`, version)
		case base + version + ".json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"archives": {%q: {"url": "time.zip"}}}`, platform())
		case base + "time.zip":
			http.ServeFile(w, r, archive)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cert := filepath.Join(t.TempDir(), "mirror.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL + "/providers", cert, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), served...)
	}
}

// TestRunProviderSources: with MAGOS_PROVIDER_MIRROR or MAGOS_PROVIDER_NETWORK_MIRROR set, the
// tool installs providers from those only and never contacts a registry: a provider no mirror
// has fails the run, naming where it looked. Without either, the tool's defaults apply and it
// asks the registry: the proxy of the test sees that, so it would see a run that asked.
// TF_CLI_CONFIG_FILE naming a file wins over the runner's configuration; naming none, it is
// ignored.
func TestRunProviderSources(t *testing.T) {
	mirror := providerMirror(t)
	net := newEgress(t)
	empty := t.TempDir()
	ownConfig := filepath.Join(t.TempDir(), "own.tfrc")
	if err := os.WriteFile(ownConfig, []byte("provider_installation {\n  filesystem_mirror {\n    path = \""+empty+"\"\n  }\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mirrorURL, cert, served := networkMirror(t, mirror)
	for _, tt := range []struct {
		name     string
		module   string
		env      []string
		outcome  runner.Outcome
		message  []string
		registry bool // the run asks the registry (through the proxy)
	}{
		{name: "a provider in the mirror", module: timeModule,
			env: []string{runner.EnvProviderMirror + "=" + mirror}, outcome: runner.OutcomeSucceeded},
		{name: "a provider in no mirror", module: absentModule,
			env: []string{runner.EnvProviderMirror + "=" + mirror}, outcome: runner.OutcomeFailed,
			message: []string{"could not be installed from the run's provider sources (folder " + mirror + "; no registry is ever contacted)", "hashicorp/null"}},
		{name: "a missing mirror folder is skipped", module: timeModule,
			env: []string{runner.EnvProviderMirror + "=/nonexistent/providers:" + mirror}, outcome: runner.OutcomeSucceeded},
		{name: "only missing mirror folders", module: timeModule,
			env: []string{runner.EnvProviderMirror + "=/nonexistent/providers"}, outcome: runner.OutcomeFailed,
			message: []string{"folder /nonexistent/providers (missing, skipped); no registry is ever contacted"}},
		{name: "a relative mirror folder", module: timeModule,
			env: []string{runner.EnvProviderMirror + "=providers"}, outcome: runner.OutcomeFailed,
			message: []string{`MAGOS_PROVIDER_MIRROR: "providers" is not an absolute path`}},
		{name: "a network mirror", module: timeModule,
			env: []string{runner.EnvProviderNetworkMirror + "=" + mirrorURL, "SSL_CERT_FILE=" + cert}, outcome: runner.OutcomeSucceeded},
		{name: "a network mirror after the folders", module: absentModule,
			env:     []string{runner.EnvProviderMirror + "=" + mirror, runner.EnvProviderNetworkMirror + "=" + mirrorURL, "SSL_CERT_FILE=" + cert},
			outcome: runner.OutcomeFailed, message: []string{"(folder " + mirror + ", network mirror " + mirrorURL + "/; no registry is ever contacted)"}},
		{name: "a network mirror over http", module: timeModule,
			env: []string{runner.EnvProviderNetworkMirror + "=http://mirror.example/"}, outcome: runner.OutcomeFailed,
			message: []string{`MAGOS_PROVIDER_NETWORK_MIRROR: "http://mirror.example/": want an https:// URL`}},
		{name: "the operator's own CLI configuration wins", module: timeModule,
			env:     []string{runner.EnvProviderMirror + "=" + mirror, runner.EnvCLIConfigFile + "=" + ownConfig},
			outcome: runner.OutcomeFailed, message: []string{empty}},
		{name: "a CLI configuration that does not exist is ignored", module: timeModule,
			env:     []string{runner.EnvProviderMirror + "=" + mirror, runner.EnvCLIConfigFile + "=/nonexistent/cli.tfrc"},
			outcome: runner.OutcomeSucceeded},
		{name: "no provider source: the tool's defaults ask the registry", module: timeModule,
			outcome: runner.OutcomeFailed, registry: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"main.tf": tt.module})
			before := len(served())
			res := runner.Run(testContext(t), f.spec(runner.OperationPlan), runner.Options{Stdout: f.out, Stderr: f.out,
				Env: providerEnv(t, append(net.env(), tt.env...)...)})
			if res.Outcome != tt.outcome {
				t.Fatalf("plan: %s (%s); want %s", res.Outcome, res.Message, tt.outcome)
			}
			t.Logf("message: %s", res.Message)
			for _, m := range tt.message {
				if !strings.Contains(res.Message, m) {
					t.Errorf("message %q; want it to contain %q", res.Message, m)
				}
			}
			hosts := net.take()
			if asked := len(hosts) > 0; asked != tt.registry {
				t.Errorf("requests through the proxy: %v; want some: %v", hosts, tt.registry)
			}
			if tt.registry && !strings.Contains(strings.Join(hosts, " "), "registry.opentofu.org") {
				t.Errorf("requests through the proxy: %v; want the registry's", hosts)
			}
			usesNetworkMirror := slices.ContainsFunc(tt.env, func(kv string) bool { return strings.HasPrefix(kv, runner.EnvProviderNetworkMirror+"=https") })
			if got := len(served()) > before; got != usesNetworkMirror {
				t.Errorf("network mirror asked: %v (%v); want %v", got, served()[before:], usesNetworkMirror)
			}
		})
	}
}
