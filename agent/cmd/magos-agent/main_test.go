package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/hubtoken"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestMandatoryPoliciesConfigFile: mandatoryPolicies in the config file is a comma-separated
// list; a bad name, or a YAML list, is refused at load with the key named.
func TestMandatoryPoliciesConfigFile(t *testing.T) {
	for _, tt := range []struct {
		name, value, want, wantErr string
	}{
		{name: "names", value: `"org-audit, org-deny-data"`, want: "org-audit|org-deny-data"},
		{name: "bad name", value: `"org-audit, Org Tags"`, wantErr: `mandatoryPolicies: "Org Tags" is not a ValidatingPolicy name`},
		{name: "a YAML list", value: `[org-audit]`, wantErr: "'mandatoryPolicies' expected type 'string'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(file, []byte("runner: {image: x}\nmandatoryPolicies: "+tt.value+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig([]string{"--config=" + file})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cfg.mandatoryPolicies(), "|"); got != tt.want {
				t.Errorf("mandatory policies %q, want %q", got, tt.want)
			}
		})
	}
}

// TestConfig parses the controller's real flags (and MAGOS_* variables) into its configuration.
func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(*Config) string
		wantErr string
	}{
		{
			name:    "job mode needs an image",
			wantErr: "runner.image: is required in job mode",
		},
		{
			name: "image from the environment",
			env:  map[string]string{"MAGOS_RUNNER_IMAGE": "registry.example/magos-agent:1.0"},
			check: func(c *Config) string {
				if c.Runner.Image != "registry.example/magos-agent:1.0" || c.Runner.Mode != "job" || c.ReconcileInterval != 3*time.Minute {
					return "defaults or environment not applied"
				}
				if c.Runner.ImagePullPolicy != "IfNotPresent" || c.secretNamespaces() != nil {
					return "default pull policy or Secret namespaces wrong"
				}
				return ""
			},
		},
		{
			name: "flags win over the environment",
			env:  map[string]string{"MAGOS_RUNNER_MODE": "job"},
			args: []string{"--runner-mode=local", "--runner-data-dir=/tmp/runs", "--reconcile-interval=5m", "--log-level=debug"},
			check: func(c *Config) string {
				if c.Runner.Mode != "local" || c.Runner.DataDir != "/tmp/runs" || c.ReconcileInterval != 5*time.Minute || c.Log.Level != "debug" {
					return "flags not applied"
				}
				return ""
			},
		},
		{
			name:    "unknown mode",
			args:    []string{"--runner-mode=kubelet"},
			wantErr: `runner.mode: "kubelet": want job or local`,
		},
		{
			name: "runner resources and pull policy",
			args: []string{"--runner-image=x", "--runner-image-pull-policy=Always", "--runner-cpu-request=250m",
				"--runner-memory-request=512Mi", "--runner-cpu-limit=2", "--runner-memory-limit=2Gi"},
			check: func(c *Config) string {
				want := corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				}
				opts := c.runnerOptions()
				if !reflect.DeepEqual(opts.Resources, want) {
					return "resources " + opts.Resources.String()
				}
				if opts.ImagePullPolicy != corev1.PullAlways {
					return "pull policy not applied"
				}
				return ""
			},
		},
		{
			name: "runner storage class",
			args: []string{"--runner-image=x", "--runner-storage-class=local-path"},
			check: func(c *Config) string {
				if got := c.runnerOptions().StorageClass; got != "local-path" {
					return "storage class " + got
				}
				return ""
			},
		},
		{
			name: "an empty flag removes a default limit",
			args: []string{"--runner-image=x", "--runner-memory-limit="},
			check: func(c *Config) string {
				if _, ok := c.resources().Limits[corev1.ResourceMemory]; ok {
					return "the default memory limit stayed"
				}
				return ""
			},
		},
		{
			name:    "bad quantity",
			args:    []string{"--runner-image=x", "--runner-memory-limit=lots"},
			wantErr: `runner.memoryLimit: "lots" is not a quantity`,
		},
		{
			name:    "bad CPU request",
			args:    []string{"--runner-image=x", "--runner-cpu-request=fast"},
			wantErr: `runner.cpuRequest: "fast" is not a quantity`,
		},
		{
			name:    "negative limit",
			args:    []string{"--runner-image=x", "--runner-cpu-limit=-1"},
			wantErr: `runner.cpuLimit: "-1" is negative`,
		},
		{
			name:    "request above its limit",
			args:    []string{"--runner-image=x", "--runner-memory-request=2Gi", "--runner-memory-limit=1Gi"},
			wantErr: "runner.memoryRequest: 2Gi is more than runner.memoryLimit 1Gi",
		},
		{
			name:    "unknown pull policy",
			args:    []string{"--runner-image=x", "--runner-image-pull-policy=Sometimes"},
			wantErr: `runner.imagePullPolicy: "Sometimes": want Always, IfNotPresent or Never`,
		},
		{
			name: "provider mirrors: a network mirror and a volume",
			args: []string{"--runner-image=x", "--runner-provider-network-mirror=https://mirror.example/providers/",
				`--runner-provider-volume={"persistentVolumeClaim":{"claimName":"providers"}}`},
			check: func(c *Config) string {
				opts := c.runnerOptions()
				if opts.ProviderNetworkMirror != "https://mirror.example/providers/" {
					return "network mirror " + opts.ProviderNetworkMirror
				}
				if v := opts.ProviderVolume; v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "providers" {
					return fmt.Sprintf("provider volume %+v", v)
				}
				return ""
			},
		},
		{
			name: "provider mirrors from the environment",
			env: map[string]string{"MAGOS_RUNNER_PROVIDER_NETWORK_MIRROR": "https://mirror.example/",
				"MAGOS_RUNNER_PROVIDER_VOLUME": `{"image":{"reference":"registry.example/providers:1"}}`},
			args: []string{"--runner-image=x"},
			check: func(c *Config) string {
				opts := c.runnerOptions()
				if opts.ProviderNetworkMirror != "https://mirror.example/" || opts.ProviderVolume == nil || opts.ProviderVolume.Image == nil {
					return fmt.Sprintf("network mirror %q, volume %+v", opts.ProviderNetworkMirror, opts.ProviderVolume)
				}
				return ""
			},
		},
		{
			name:    "a network mirror over http",
			args:    []string{"--runner-image=x", "--runner-provider-network-mirror=http://mirror.example/"},
			wantErr: `runner.providerNetworkMirror: "http://mirror.example/": want an https:// URL with a host`,
		},
		{
			name:    "a network mirror that is not a URL",
			args:    []string{"--runner-image=x", "--runner-provider-network-mirror=mirror.example"},
			wantErr: `runner.providerNetworkMirror: "mirror.example": want an https:// URL with a host`,
		},
		{
			name:    "a provider volume of two sources",
			args:    []string{"--runner-image=x", `--runner-provider-volume={"emptyDir":{},"hostPath":{"path":"/p"}}`},
			wantErr: "runner.providerVolume: 2 volume sources set (emptyDir, hostPath): want exactly one",
		},
		{
			name:    "a provider volume that is not JSON",
			args:    []string{"--runner-image=x", "--runner-provider-volume=providers"},
			wantErr: "runner.providerVolume: not a volume source",
		},
		{
			name:    "a provider volume in local mode",
			args:    []string{"--runner-mode=local", `--runner-provider-volume={"emptyDir":{}}`},
			wantErr: "runner.providerVolume: is mounted into run Jobs only: local runs read MAGOS_PROVIDER_MIRROR from the agent's environment",
		},
		{
			name: "Secret namespaces",
			args: []string{"--runner-image=x", "--secret-namespaces=payments, cdn"},
			check: func(c *Config) string {
				if got := c.secretNamespaces(); !reflect.DeepEqual(got, []string{"payments", "cdn"}) {
					return "Secret namespaces " + strings.Join(got, "|")
				}
				return ""
			},
		},
		{
			name:    "bad Secret namespace",
			args:    []string{"--runner-image=x", "--secret-namespaces=Payments"},
			wantErr: `secretNamespaces: "Payments" is not a namespace name`,
		},
		{
			name: "hub token renewal defaults",
			env:  map[string]string{"POD_NAMESPACE": "magos-system"},
			args: []string{"--runner-image=x", "--hub-kubeconfig=/etc/magos/hub/kubeconfig", "--cluster-name=eu-west-1"},
			check: func(c *Config) string {
				if c.HubTokenExpiry != time.Hour {
					return "hub token expiry " + c.HubTokenExpiry.String()
				}
				if got := c.hubTokenSecret().String(); got != "magos-system/magos-agent-hub-token" {
					return "hub token Secret " + got
				}
				return ""
			},
		},
		{
			name: "a direct cluster's grants come from the hub: --hub-grants",
			args: []string{"--runner-image=x", "--hub-grants"},
			check: func(c *Config) string {
				if !c.HubGrants {
					return "hubGrants false"
				}
				return ""
			},
		},
		{
			name: "a standalone agent by default",
			args: []string{"--runner-image=x"},
			check: func(c *Config) string {
				if c.HubGrants {
					return "hubGrants true"
				}
				return ""
			},
		},
		{
			name: "hub token Secret namespace flag, renewal off",
			env:  map[string]string{"POD_NAMESPACE": ""},
			args: []string{"--runner-image=x", "--hub-kubeconfig=/k", "--cluster-name=eu-west-1", "--hub-token-expiry=0",
				"--hub-token-secret=kept", "--hub-token-secret-namespace=agents"},
			check: func(c *Config) string {
				if c.HubTokenExpiry != 0 || c.hubTokenSecret().String() != "agents/kept" {
					return "expiry " + c.HubTokenExpiry.String() + ", Secret " + c.hubTokenSecret().String()
				}
				return ""
			},
		},
		{
			name: "no namespace for the hub token Secret: not kept",
			env:  map[string]string{"POD_NAMESPACE": ""},
			args: []string{"--runner-image=x", "--hub-kubeconfig=/k", "--cluster-name=eu-west-1"},
			check: func(c *Config) string {
				if c.hubTokenSecret().Name != "" {
					return "hub token Secret " + c.hubTokenSecret().String()
				}
				return ""
			},
		},
		{
			name: "inputs key Secret default: in the Pod's namespace",
			env:  map[string]string{"POD_NAMESPACE": "magos-system"},
			args: []string{"--runner-image=x"},
			check: func(c *Config) string {
				if got := c.inputsKeySecret().String(); got != "magos-system/magos-agent-inputs-key" {
					return "inputs key Secret " + got
				}
				return ""
			},
		},
		{
			name: "inputs key Secret flags",
			env:  map[string]string{"POD_NAMESPACE": ""},
			args: []string{"--runner-image=x", "--inputs-key-secret=digest-key", "--inputs-key-secret-namespace=agents"},
			check: func(c *Config) string {
				if got := c.inputsKeySecret().String(); got != "agents/digest-key" {
					return "inputs key Secret " + got
				}
				return ""
			},
		},
		{
			name: "no namespace for the inputs key Secret: not kept",
			env:  map[string]string{"POD_NAMESPACE": ""},
			args: []string{"--runner-image=x"},
			check: func(c *Config) string {
				if c.inputsKeySecret().Name != "" {
					return "inputs key Secret " + c.inputsKeySecret().String()
				}
				return ""
			},
		},
		{
			name:    "bad inputs key Secret name",
			args:    []string{"--runner-image=x", "--inputs-key-secret=Key_Secret"},
			wantErr: `inputsKeySecret: "Key_Secret" is not a Secret name`,
		},
		{
			name:    "hub token expiry below the API server's minimum",
			args:    []string{"--runner-image=x", "--hub-kubeconfig=/k", "--cluster-name=eu-west-1", "--hub-token-expiry=5m"},
			wantErr: "hubTokenExpiry: 5m0s: must be 0 (no renewal) or at least 10m0s",
		},
		{
			name: "mandatory policies",
			env:  map[string]string{"MAGOS_MANDATORY_POLICIES": "ignored"},
			args: []string{"--runner-image=x", "--mandatory-policies=org-deny-public-buckets, org.require-tags"},
			check: func(c *Config) string {
				if got := c.mandatoryPolicies(); !reflect.DeepEqual(got, []string{"org-deny-public-buckets", "org.require-tags"}) {
					return "mandatory policies " + strings.Join(got, "|")
				}
				return ""
			},
		},
		{
			name: "mandatory policies from the environment",
			env:  map[string]string{"MAGOS_MANDATORY_POLICIES": "org-audit"},
			args: []string{"--runner-image=x"},
			check: func(c *Config) string {
				if got := c.mandatoryPolicies(); !reflect.DeepEqual(got, []string{"org-audit"}) {
					return "mandatory policies " + strings.Join(got, "|")
				}
				return ""
			},
		},
		{
			name:    "bad mandatory policy name",
			args:    []string{"--runner-image=x", "--mandatory-policies=org-audit,Org_Tags"},
			wantErr: `mandatoryPolicies: "Org_Tags" is not a ValidatingPolicy name`,
		},
		{
			name:    "mandatory policy listed twice",
			args:    []string{"--runner-image=x", "--mandatory-policies=org-audit,org-audit"},
			wantErr: `mandatoryPolicies: "org-audit" is listed twice`,
		},
		{
			name:    "non-positive interval",
			args:    []string{"--runner-image=x", "--reconcile-interval=0s"},
			wantErr: "reconcileInterval: must be positive",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := loadConfig(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(cfg); msg != "" {
				t.Errorf("%s: %+v", msg, cfg)
			}
		})
	}
}

// TestCheck runs `magos-agent check` (the chart's helm test) against a test spoke and hub: it
// fails, saying why, until an agent replica leads in the spoke and the agent's heartbeat Lease on
// the hub is live.
func TestCheck(t *testing.T) {
	env := testenv.Start(t, localcluster.Options{Spokes: []string{"spoke"}})
	spoke := env.Spokes["spoke"]
	ctx := context.Background()
	args := []string{"--kubeconfig", spoke.Kubeconfig, "--leader-elect", "--leader-election-namespace", "default",
		"--cluster-name", "spoke", "--hub-kubeconfig", env.Hub.Kubeconfig, "--timeout", "2s"}
	var out bytes.Buffer
	wantErr := func(want string) {
		t.Helper()
		out.Reset()
		if err := check(ctx, args, &out); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("check: %v, want %q", err, want)
		}
	}
	lease := func(c client.Client, ns, name string, renewed time.Time) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("agent-0"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: renewed},
		}}
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		return l
	}

	wantErr("no agent replica leads: no Lease default/" + app.LeaderElectionID + " yet")
	lease(spoke.Client, "default", app.LeaderElectionID, time.Now())
	wantErr("no live heartbeat on the hub: no Lease " + mirror.Namespace("spoke") + "/" + keys.AgentLease + " yet")
	if err := env.Hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace("spoke")}}); err != nil {
		t.Fatal(err)
	}
	heartbeat := lease(env.Hub.Client, mirror.Namespace("spoke"), keys.AgentLease, time.Now().Add(-time.Minute))
	wantErr("no live heartbeat on the hub: Lease " + mirror.Namespace("spoke") + "/" + keys.AgentLease + " held by agent-0 expired")

	heartbeat.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := env.Hub.Client.Update(ctx, heartbeat); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := check(ctx, args, &out); err != nil {
		t.Fatalf("check: %v", err)
	}
	if want := "agent leader: agent-0\nhub heartbeat: live, renewed by agent-0\n"; out.String() != want {
		t.Errorf("check printed %q, want %q", out.String(), want)
	}
	if code := run(append([]string{"check"}, args...)); code != 0 {
		t.Errorf("magos-agent check exited %d", code)
	}

	// Once the bootstrap token has expired, check reads the hub with the token the agent keeps.
	ns := mirror.Namespace("spoke")
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentServiceAccount}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentServiceAccount}, Rules: mirror.AgentRules()},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentServiceAccount},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: keys.AgentServiceAccount},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: keys.AgentServiceAccount}}},
	} {
		if err := env.Hub.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := kubernetes.NewForConfigOrDie(env.Hub.Config).CoreV1().ServiceAccounts(ns).CreateToken(ctx, keys.AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired := filepath.Join(t.TempDir(), "hub.kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"hub": {Server: env.Hub.Config.Host, CertificateAuthorityData: env.Hub.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"agent": {Token: "an-expired-bootstrap-token"}},
		Contexts:       map[string]*clientcmdapi.Context{"hub": {Cluster: "hub", AuthInfo: "agent", Namespace: ns}},
		CurrentContext: "hub",
	}, expired); err != nil {
		t.Fatal(err)
	}
	args = []string{"--kubeconfig", spoke.Kubeconfig, "--cluster-name", "spoke", "--hub-kubeconfig", expired, "--timeout", "2s",
		"--hub-token-secret", "hub-token", "--hub-token-secret-namespace", "default"}
	wantErr("the server has asked for the client to provide credentials")
	now := time.Now().UTC()
	if err := spoke.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hub-token"},
		StringData: map[string]string{
			hubtoken.SecretKeyToken: tr.Status.Token, hubtoken.SecretKeyNamespace: ns, hubtoken.SecretKeyServer: env.Hub.Config.Host,
			hubtoken.SecretKeyIssued: now.Format(time.RFC3339), hubtoken.SecretKeyExpiration: tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339),
		}}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := check(ctx, args, &out); err != nil {
		t.Fatalf("check with the kept token: %v", err)
	}
	if !strings.HasPrefix(out.String(), "using the hub token kept in default/hub-token") || !strings.Contains(out.String(), "hub heartbeat: live") {
		t.Errorf("check printed %q", out.String())
	}
}
