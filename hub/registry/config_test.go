package registry_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/registry"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigParsesBothTransports(t *testing.T) {
	cfg, err := registry.LoadConfig(writeConfig(t, `
clusters:
  - name: us-east-1
    labels: {region: us-east-1, env: prod}
    agent: {}
  - name: lab
    kubeconfig: {secretRef: {namespace: magos-system, name: lab-kubeconfig}}
  - name: local
    kubeconfig: {path: /etc/magos/hub.kubeconfig}
  - name: self
    kubeconfig: {inCluster: true}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Clusters) != 4 {
		t.Fatalf("clusters = %d, want 4", len(cfg.Clusters))
	}
	specs := cfg.FleetSpecs()
	if specs[0].Transport != magosv1.TransportAgent || specs[0].Labels["region"] != "us-east-1" {
		t.Errorf("us-east-1 = %+v", specs[0])
	}
	if specs[1].Transport != magosv1.TransportDirect || specs[1].Kubeconfig.SecretRef.Key != "kubeconfig" {
		t.Errorf("lab = %+v (secretRef key must default to kubeconfig)", specs[1].Kubeconfig.SecretRef)
	}
	if specs[2].Kubeconfig.Path != "/etc/magos/hub.kubeconfig" {
		t.Errorf("local = %+v", specs[2].Kubeconfig)
	}
	if specs[3].Transport != magosv1.TransportDirect || !specs[3].Kubeconfig.InCluster {
		t.Errorf("self = %+v, want a direct cluster reached in-cluster", specs[3].Kubeconfig)
	}
}

// TestLoadConfigBindings: bindings by name and by label resolve into each cluster's bound
// namespaces, "*" wins, and a cluster no binding names is bound to none.
func TestLoadConfigBindings(t *testing.T) {
	cfg, err := registry.LoadConfig(writeConfig(t, `
clusters:
  - {name: eu-1, labels: {team: payments}, agent: {}}
  - {name: eu-2, labels: {team: payments, env: prod}, agent: {}}
  - {name: us-1, labels: {team: search}, agent: {}}
  - {name: lab, agent: {}}
  - {name: local, kubeconfig: {path: /etc/magos/hub.kubeconfig}}
bindings:
  - namespaces: [payments, payments-staging]
    clusterSelector: {matchLabels: {team: payments}}
  - namespaces: [search]
    clusters: [us-1, eu-2]
  - namespaces: [payments]
    clusterSelector: {matchExpressions: [{key: env, operator: In, values: [prod]}]}
  - namespaces: ["*"]
    clusters: [local]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"eu-1":  {"payments", "payments-staging"},
		"eu-2":  {"payments", "payments-staging", "search"},
		"us-1":  {"search"},
		"lab":   nil,
		"local": {"*"},
	}
	for _, cl := range cfg.Clusters {
		if got := cl.Spec().Namespaces; !slices.Equal(got, want[cl.Name]) {
			t.Errorf("%s bound to %v, want %v", cl.Name, got, want[cl.Name])
		}
	}
}

func TestLoadConfigErrorsNameTheKey(t *testing.T) {
	long := strings.Repeat("a", 41)
	cases := map[string]struct {
		body string
		want string
	}{
		"bad yaml":         {"clusters: [\n", "config"},
		"unknown key":      {"clusters:\n  - name: a\n    agent: {}\n    regoin: x\n", "regoin"},
		"missing name":     {"clusters:\n  - agent: {}\n", "clusters[0].name: must be set"},
		"name not a label": {"clusters:\n  - name: US_East\n    agent: {}\n", "clusters[0].name: must be a DNS label of at most 40"},
		"name too long":    {"clusters:\n  - name: " + long + "\n    agent: {}\n", "clusters[0].name: must be a DNS label of at most 40"},
		"duplicate": {"clusters:\n  - name: a\n    agent: {}\n  - name: b\n    agent: {}\n  - name: a\n    agent: {}\n",
			`clusters[2].name: duplicate cluster name "a" (also clusters[0])`},
		"both transports": {"clusters:\n  - name: a\n    agent: {}\n    kubeconfig: {path: /x}\n", "clusters[0]: set exactly one of agent"},
		"no transport":    {"clusters:\n  - name: a\n", "clusters[0]: set exactly one of agent: {}"},
		"kubeconfig both": {"clusters:\n  - name: a\n    kubeconfig: {path: /x, secretRef: {namespace: n, name: s}}\n",
			"clusters[0].kubeconfig: set exactly one of path, secretRef and inCluster: true, not several"},
		"kubeconfig inCluster and path": {"clusters:\n  - name: a\n    kubeconfig: {path: /x, inCluster: true}\n",
			"clusters[0].kubeconfig: set exactly one of path, secretRef and inCluster: true, not several"},
		"kubeconfig empty":      {"clusters:\n  - name: a\n    kubeconfig: {}\n", "clusters[0].kubeconfig: set exactly one of path"},
		"secret no name":        {"clusters:\n  - name: a\n    kubeconfig: {secretRef: {namespace: n}}\n", "clusters[0].kubeconfig.secretRef.name"},
		"bad label value":       {"clusters:\n  - name: a\n    agent: {}\n    labels: {env: 'not ok!'}\n", "clusters[0].labels[env]: must be a label value"},
		"bad label key":         {"clusters:\n  - name: a\n    agent: {}\n    labels: {'-x': y}\n", "clusters[0].labels[-x]: must be a label key"},
		"second entry only":     {"clusters:\n  - name: ok\n    agent: {}\n  - name: Bad\n    agent: {}\n", "clusters[1].name"},
		"grace not a duration":  {"projectParallelGracePeriod: soon\nclusters: []\n", "projectParallelGracePeriod"},
		"grace zero":            {"projectParallelGracePeriod: 0s\nclusters: []\n", "projectParallelGracePeriod: must be a positive duration"},
		"qps zero":              {"kubeApiQps: 0\nclusters: []\n", "kubeApiQps: must be a positive number"},
		"qps not a number":      {"kubeApiQps: fast\nclusters: []\n", "kubeApiQps"},
		"burst under qps":       {"kubeApiQps: 300\nkubeApiBurst: 100\nclusters: []\n", "kubeApiBurst: must be a whole number of requests at least kubeApiQps (300)"},
		"binding no namespaces": {"clusters:\n  - name: a\n    agent: {}\nbindings:\n  - clusters: [a]\n", "bindings[0].namespaces: must name at least one"},
		"binding bad namespace": {"clusters:\n  - name: a\n    agent: {}\nbindings:\n  - namespaces: [Pay]\n    clusters: [a]\n", "bindings[0].namespaces[0]: must be a namespace name"},
		"binding no clusters":   {"clusters:\n  - name: a\n    agent: {}\nbindings:\n  - namespaces: [pay]\n", "bindings[0]: set clusters"},
		"binding unknown cluster": {"clusters:\n  - name: a\n    agent: {}\nbindings:\n  - namespaces: [pay]\n    clusters: [b]\n",
			`bindings[0].clusters[0]: no registered cluster is named "b"`},
		"binding bad selector": {"clusters:\n  - name: a\n    agent: {}\nbindings:\n  - namespaces: [pay]\n    clusterSelector: {matchExpressions: [{key: env, operator: Near}]}\n",
			"bindings[0].clusterSelector"},
		"dashboard no port":        {"dashboard: {bindAddress: localhost}\nclusters: []\n", `dashboard.bindAddress: must be host:port (e.g. :8443 or 127.0.0.1:8443), or 0 to turn the dashboard off, got "localhost"`},
		"dashboard cert alone":     {"dashboard: {bindAddress: ':8480', certFile: /tls.crt}\nclusters: []\n", "dashboard.certFile: and dashboard.keyFile must be set together"},
		"dashboard unknown key":    {"dashboard: {bindAdress: ':8480'}\nclusters: []\n", "invalid keys: bindadress"},
		"binding unknown key":      {"clusters:\n  - name: a\n    agent: {}\nbindings:\n  - namespaces: [pay]\n    cluster: [a]\n", "cluster"},
		"oidc http issuer":         {oidcConfig(`issuerURL: http://login.example.com`), `dashboard.oidc.issuerURL: must be the provider's issuer, an https URL`},
		"oidc no issuer":           {oidcConfig(`issuerURL: ""`), `dashboard.oidc.issuerURL: must be the provider's issuer`},
		"oidc no client":           {oidcConfig(`clientID: ""`), "dashboard.oidc.clientID: must be set"},
		"oidc no secret":           {oidcConfig(`clientSecretRef: null`), "dashboard.oidc.clientSecretRef: must name the Secret key"},
		"oidc secret no namespace": {oidcConfig(`clientSecretRef: {name: dex}`), "dashboard.oidc.clientSecretRef.namespace: must be a namespace name"},
		"oidc redirect path":       {oidcConfig(`redirectURL: https://magos.example.com/callback`), "dashboard.oidc.redirectURL: must end in /oidc/callback"},
		"oidc redirect http":       {oidcConfig(`redirectURL: http://magos.example.com/oidc/callback`), "dashboard.oidc.redirectURL: must be https (http only on a loopback address)"},
		"oidc redirect relative":   {oidcConfig(`redirectURL: /oidc/callback`), "dashboard.oidc.redirectURL: must be the dashboard's external URL"},
		"oidc scopes no openid":    {oidcConfig(`scopes: [email]`), "dashboard.oidc.scopes: must include openid"},
		"oidc negative ttl":        {oidcConfig(`sessionTTL: -1h`), "dashboard.oidc.sessionTTL: must be a positive duration"},
		"oidc ttl not a duration":  {oidcConfig(`sessionTTL: a day`), "sessionTTL"},
		"oidc unknown key":         {oidcConfig(`issuer: https://login.example.com`), "'dashboard.oidc' has invalid keys: issuer"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := registry.LoadConfig(writeConfig(t, tc.body), nil)
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// oidcConfig is a config whose dashboard.oidc is good but for override, a line of YAML that
// replaces or adds one of its keys.
func oidcConfig(override string) string {
	lines := map[string]string{
		"issuerURL":       "issuerURL: https://login.example.com",
		"clientID":        "clientID: magos",
		"clientSecretRef": "clientSecretRef: {namespace: magos-system, name: magos-dashboard-oidc}",
		"redirectURL":     "redirectURL: https://magos.example.com/oidc/callback",
	}
	key, _, _ := strings.Cut(override, ":")
	lines[key] = override
	body := "clusters: []\ndashboard:\n  bindAddress: ':8480'\n  oidc:\n"
	for _, k := range slices.Sorted(maps.Keys(lines)) {
		body += "    " + lines[k] + "\n"
	}
	return body
}

// TestLoadConfigDashboardOIDC: dashboard.oidc reads from YAML with its defaults (scopes,
// session TTL, the Secret key), and is off when absent.
func TestLoadConfigDashboardOIDC(t *testing.T) {
	cfg, err := registry.LoadConfig(writeConfig(t, oidcConfig("caFile: /etc/magos/oidc-ca.pem")), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Dashboard.OIDC
	if o == nil || o.IssuerURL != "https://login.example.com" || o.ClientID != "magos" || o.CAFile != "/etc/magos/oidc-ca.pem" ||
		o.RedirectURL != "https://magos.example.com/oidc/callback" {
		t.Fatalf("dashboard.oidc = %+v", o)
	}
	if o.ClientSecretRef.Namespace != "magos-system" || o.ClientSecretRef.Name != "magos-dashboard-oidc" || o.ClientSecretRef.Key != registry.DefaultOIDCClientSecretKey {
		t.Errorf("clientSecretRef = %s, want magos-system/magos-dashboard-oidc[%s]", o.ClientSecretRef, registry.DefaultOIDCClientSecretKey)
	}
	if !slices.Equal(o.Scopes, registry.DefaultOIDCScopes) || o.SessionTTL != registry.DefaultOIDCSessionTTL {
		t.Errorf("scopes %v and sessionTTL %s, want the defaults %v and %s", o.Scopes, o.SessionTTL, registry.DefaultOIDCScopes, registry.DefaultOIDCSessionTTL)
	}

	cfg, err = registry.LoadConfig(writeConfig(t, oidcConfig("sessionTTL: 30m")+"    scopes: [openid, groups]\n    displayName: Dex\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.Dashboard.OIDC; o.SessionTTL != 30*time.Minute || !slices.Equal(o.Scopes, []string{"openid", "groups"}) || o.DisplayName != "Dex" {
		t.Errorf("dashboard.oidc = %+v, want sessionTTL 30m, scopes [openid groups], displayName Dex", o)
	}
	// A loopback redirect may be plain HTTP (a dashboard reached through a port-forward).
	if _, err := registry.LoadConfig(writeConfig(t, oidcConfig("redirectURL: http://127.0.0.1:8480/oidc/callback")), nil); err != nil {
		t.Errorf("a loopback http redirectURL: %v", err)
	}

	cfg, err = registry.LoadConfig(writeConfig(t, "clusters: []\ndashboard: {bindAddress: ':8480'}\n"), nil)
	if err != nil || cfg.Dashboard.OIDC != nil {
		t.Errorf("without dashboard.oidc: %+v, %v; want no OIDC", cfg.Dashboard.OIDC, err)
	}
}

func TestLoadConfigEnvAndFlagsOverrideTheFile(t *testing.T) {
	file := writeConfig(t, "metricsBindAddress: ':9000'\nlog: {level: info}\nclusters: []\n")
	t.Setenv("MAGOS_LOG_LEVEL", "debug")
	t.Setenv("MAGOS_METRICS_BIND_ADDRESS", ":9100")
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.String("metrics-bind-address", "", "")
	flags.Bool("leader-elect", false, "")
	flags.Float32("kube-api-qps", 0, "")
	if err := flags.Parse([]string{"--metrics-bind-address=:9200", "--leader-elect", "--kube-api-qps=150"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.LoadConfig(file, flags)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log.Level != "debug" || cfg.MetricsBindAddress != ":9200" || !cfg.LeaderElect || cfg.HealthProbeBindAddress != ":8081" {
		t.Fatalf("precedence wrong: %+v", cfg)
	}
	if cfg.ProjectParallelGracePeriod != 30*time.Second {
		t.Fatalf("projectParallelGracePeriod %s, want the default 30s", cfg.ProjectParallelGracePeriod)
	}
	if cfg.KubeAPIQPS != 150 || cfg.KubeAPIBurst != registry.DefaultKubeAPIBurst {
		t.Fatalf("kubeApiQps %g and kubeApiBurst %d, want 150 from the flag and the default %d", cfg.KubeAPIQPS, cfg.KubeAPIBurst, registry.DefaultKubeAPIBurst)
	}
}

// TestLoadConfigNotifications: the notifications section reads from YAML with its defaults, and
// a bad webhook is refused at load with its key.
func TestLoadConfigNotifications(t *testing.T) {
	cfg, err := registry.LoadConfig(writeConfig(t, `
notifications:
  dashboardUrl: https://magos.example.com/
  webhooks:
  - name: oncall
    format: slack
    urlSecretRef: {namespace: magos-system, name: magos-webhooks, key: oncall}
    events: [StepAwaitingApproval, RolloutFailed]
    projects: ["payments/*"]
    retryFor: 30m
  - name: audit
    urlSecretRef: {namespace: magos-system, name: magos-webhooks}
    authorizationSecretRef: {namespace: magos-system, name: audit-token}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Notifications
	if n.DashboardURL != "https://magos.example.com" || len(n.Webhooks) != 2 {
		t.Fatalf("notifications = %+v", n)
	}
	oncall, audit := n.Webhooks[0], n.Webhooks[1]
	if oncall.Format != "slack" || oncall.RetryFor != 30*time.Minute || oncall.Timeout != 10*time.Second ||
		!slices.Equal(oncall.Events, []string{"StepAwaitingApproval", "RolloutFailed"}) || oncall.URLSecretRef.Key != "oncall" {
		t.Errorf("oncall = %+v", oncall)
	}
	if audit.Format != "cloudevents" || audit.URLSecretRef.Key != "url" || audit.AuthorizationSecretRef.Key != "authorization" || audit.RetryFor != time.Hour {
		t.Errorf("audit = %+v, want the defaults", audit)
	}

	_, err = registry.LoadConfig(writeConfig(t, `
notifications:
  webhooks:
  - name: oncall
    format: teams
    urlSecretRef: {name: magos-webhooks}
    events: [StepStart]
`), nil)
	for _, want := range []string{
		`notifications.webhooks[0].format: must be cloudevents or slack, got "teams"`,
		`notifications.webhooks[0].urlSecretRef.namespace: must be a namespace name`,
		`notifications.webhooks[0].events[0]: must be one of StepStarted`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}
