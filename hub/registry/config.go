// Package registry keeps the hub's cluster registry: it reads the registered clusters from the
// hub's configuration file (hot-reloaded), reflects each as a Cluster object, prepares the hub
// namespace and credentials of every agent cluster, hands the set to the fleet provider, and
// keeps each Cluster's status (Engaged, Available, Ready) up to date.
package registry

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/decider"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/hub/notify"
	"github.com/magosfleet/magos/pkg/config"
)

// EnvPrefix prefixes the environment variables that override the hub's configuration.
const EnvPrefix = "MAGOS"

// MaxClusterNameLength bounds a cluster name so that its hub namespace (magos-cluster-<name>)
// stays a valid namespace name.
const MaxClusterNameLength = 40

// Config is the hub's configuration file. Only Clusters is hot-reloaded; the other keys are read
// at start-up.
type Config struct {
	// Clusters are the registered clusters.
	Clusters []ClusterConfig `mapstructure:"clusters"`
	// Bindings say which clusters may bring Workspaces into the Projects of which hub
	// namespaces. A cluster no binding names brings none into any.
	Bindings []BindingConfig `mapstructure:"bindings"`

	// LeaderElect runs one active hub among replicas.
	LeaderElect bool `mapstructure:"leaderElect"`
	// MetricsBindAddress is where Prometheus metrics are served ("0" turns them off).
	MetricsBindAddress string `mapstructure:"metricsBindAddress"`
	// HealthProbeBindAddress is where /healthz and /readyz are served ("0" turns them off).
	HealthProbeBindAddress string `mapstructure:"healthProbeBindAddress"`
	// PprofBindAddress is where Go's pprof profiles are served, under /debug/pprof/ ("0" or
	// empty turns them off, the default).
	PprofBindAddress string `mapstructure:"pprofBindAddress"`
	// Log configures logging.
	Log LogConfig `mapstructure:"log"`
	// Dashboard configures the read-only HTTP API and web page (off by default).
	Dashboard DashboardConfig `mapstructure:"dashboard"`
	// KubeAPIQPS and KubeAPIBurst bound the hub's requests to its API server, over every
	// controller: a sustained rate per second and a burst. Each granted run costs the hub
	// about 4 requests, so the QPS bounds how many runs a second the hub can grant.
	KubeAPIQPS   float32 `mapstructure:"kubeApiQps"`
	KubeAPIBurst int     `mapstructure:"kubeApiBurst"`
	// ProjectParallelGracePeriod is how long a new Project without a Rollout waits for one
	// before it runs its Workspaces in parallel.
	ProjectParallelGracePeriod time.Duration `mapstructure:"projectParallelGracePeriod"`
	// Notifications are the webhooks the hub tells what happens to Rollouts (package notify).
	Notifications notify.Config `mapstructure:"notifications"`
}

// LogConfig configures the hub's logger.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `mapstructure:"level"`
	// Development selects human-readable output.
	Development bool `mapstructure:"development"`
}

// ClusterConfig registers one cluster. Exactly one of Agent and Kubeconfig is set.
type ClusterConfig struct {
	// Name is the cluster's registered name: a DNS label of at most 40 characters.
	Name string `mapstructure:"name"`
	// Labels are the cluster's labels (Rollout steps select clusters by them).
	Labels map[string]string `mapstructure:"labels"`
	// Agent registers an agent (pull) cluster: an agent in the spoke connects to the hub.
	Agent *AgentConfig `mapstructure:"agent"`
	// Kubeconfig registers a direct cluster: the hub connects to the spoke with it.
	Kubeconfig *KubeconfigConfig `mapstructure:"kubeconfig"`

	// Namespaces are the hub namespaces the bindings give the cluster (sorted; "*" alone for
	// every namespace). Validate fills them in; they are not a key of the file.
	Namespaces []string `mapstructure:"-"`
}

// BindingConfig binds clusters, by name or by label, to hub namespaces: their Workspaces may
// join the Projects and Rollouts there. At least one of Clusters and ClusterSelector is set;
// a cluster either names is bound.
type BindingConfig struct {
	// Namespaces are hub namespace names, or "*" for every namespace.
	Namespaces []string `mapstructure:"namespaces"`
	// Clusters are registered cluster names.
	Clusters []string `mapstructure:"clusters"`
	// ClusterSelector selects registered clusters by their labels.
	ClusterSelector *metav1.LabelSelector `mapstructure:"clusterSelector"`
}

// AgentConfig is the (empty) configuration of an agent cluster.
type AgentConfig struct{}

// KubeconfigConfig is where the hub reads a direct cluster's kubeconfig: a file, a key of a
// Secret on the hub, or (inCluster) none: the hub's own cluster with the hub's own identity.
type KubeconfigConfig struct {
	// Path of a kubeconfig file readable by the hub.
	Path string `mapstructure:"path"`
	// SecretRef names a Secret key holding the kubeconfig.
	SecretRef *SecretRefConfig `mapstructure:"secretRef"`
	// InCluster registers the hub's own cluster, reached with the hub's own ServiceAccount
	// (a single-cluster install).
	InCluster bool `mapstructure:"inCluster"`
}

// SecretRefConfig names a key of a Secret (the key defaults to "kubeconfig").
type SecretRefConfig = config.SecretKeyRef

// DashboardConfig configures the hub's dashboard (package dashboard).
type DashboardConfig struct {
	// BindAddress is where it listens (host:port); "0" or empty turns it off, the default.
	BindAddress string `mapstructure:"bindAddress"`
	// CertFile and KeyFile are a PEM certificate and key to serve HTTPS with (both or
	// neither; neither serves plain HTTP).
	CertFile string `mapstructure:"certFile"`
	KeyFile  string `mapstructure:"keyFile"`
	// OIDC, when set, also signs people in through an OpenID Connect provider, beside the
	// token sign-in.
	OIDC *OIDCConfig `mapstructure:"oidc"`
}

// OIDCConfig signs people in to the dashboard through an OpenID Connect provider (the
// authorization code flow with PKCE). The hub's API server must trust the same issuer and
// client ID (its --oidc-* flags): the dashboard reads with each person's ID token, so
// Kubernetes RBAC on the users and groups it names decides what they see.
type OIDCConfig struct {
	// IssuerURL is the provider's issuer, an https URL exactly as its ID tokens name it.
	IssuerURL string `mapstructure:"issuerURL"`
	// ClientID is the dashboard's client at the provider (the ID tokens' audience).
	ClientID string `mapstructure:"clientID"`
	// ClientSecretRef names the Secret key holding the client's secret (the key defaults to
	// DefaultOIDCClientSecretKey). The hub reads it at each sign-in.
	ClientSecretRef *config.SecretKeyRef `mapstructure:"clientSecretRef"`
	// CAFile is a PEM bundle of the certificate authorities to trust for the issuer (default:
	// the system's).
	CAFile string `mapstructure:"caFile"`
	// RedirectURL is the dashboard's external URL followed by /oidc/callback, as registered at
	// the provider.
	RedirectURL string `mapstructure:"redirectURL"`
	// Scopes are asked of the provider (default DefaultOIDCScopes; openid is required).
	Scopes []string `mapstructure:"scopes"`
	// SessionTTL bounds a session (default DefaultOIDCSessionTTL); the ID token's expiry ends
	// it sooner when it comes first.
	SessionTTL time.Duration `mapstructure:"sessionTTL"`
	// DisplayName names the provider on the sign-in button (default: the issuer's host).
	DisplayName string `mapstructure:"displayName"`
}

// Defaults of OIDCConfig.
const (
	// DefaultOIDCClientSecretKey is the Secret key clientSecretRef reads when it names none.
	DefaultOIDCClientSecretKey = "client-secret"
	// DefaultOIDCSessionTTL is the longest a dashboard session lasts by default.
	DefaultOIDCSessionTTL = 8 * time.Hour
)

// DefaultOIDCScopes are the scopes asked of the provider by default. Add groups (or what your
// provider calls it) for a groups claim that RBAC can bind.
var DefaultOIDCScopes = []string{"openid", "email", "profile"}

// validate checks the OIDC settings under key and fills in their defaults.
func (o *OIDCConfig) validate(key string, errs *config.Errors) {
	if u, err := url.Parse(o.IssuerURL); o.IssuerURL == "" || err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		errs.Add(key+".issuerURL", "must be the provider's issuer, an https URL without query or fragment (e.g. https://login.example.com), got %q", o.IssuerURL)
	}
	if o.ClientID == "" {
		errs.Add(key+".clientID", "must be set: the dashboard's client ID at the provider")
	}
	if o.ClientSecretRef == nil {
		errs.Add(key+".clientSecretRef", "must name the Secret key holding the client secret ({namespace, name, key})")
	} else {
		o.ClientSecretRef.Validate(key+".clientSecretRef", DefaultOIDCClientSecretKey, errs)
	}
	u, err := url.Parse(o.RedirectURL)
	switch {
	case o.RedirectURL == "" || err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		errs.Add(key+".redirectURL", "must be the dashboard's external URL followed by /oidc/callback (e.g. https://magos.example.com/oidc/callback), got %q", o.RedirectURL)
	case u.Path != "/oidc/callback":
		errs.Add(key+".redirectURL", "must end in /oidc/callback, the dashboard's path for it, got %q", o.RedirectURL)
	case u.Scheme == "http" && !loopback(u.Hostname()):
		errs.Add(key+".redirectURL", "must be https (http only on a loopback address), got %q", o.RedirectURL)
	}
	if len(o.Scopes) == 0 {
		o.Scopes = slices.Clone(DefaultOIDCScopes)
	} else if !slices.Contains(o.Scopes, "openid") {
		errs.Add(key+".scopes", "must include openid, got %v", o.Scopes)
	}
	switch {
	case o.SessionTTL == 0:
		o.SessionTTL = DefaultOIDCSessionTTL
	case o.SessionTTL < 0:
		errs.Add(key+".sessionTTL", "must be a positive duration (e.g. 8h), got %s", o.SessionTTL)
	}
}

// loopback reports whether host is localhost or a loopback IP address.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Enabled reports whether the dashboard is to be served.
func (d DashboardConfig) Enabled() bool { return d.BindAddress != "" && d.BindAddress != "0" }

// DefaultKubeAPIQPS and DefaultKubeAPIBurst are the defaults of KubeAPIQPS and KubeAPIBurst.
const (
	DefaultKubeAPIQPS   = 100
	DefaultKubeAPIBurst = 200
)

// DefaultConfig returns a Config holding the defaults.
func DefaultConfig() Config {
	return Config{MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081", Log: LogConfig{Level: "info"},
		KubeAPIQPS: DefaultKubeAPIQPS, KubeAPIBurst: DefaultKubeAPIBurst,
		ProjectParallelGracePeriod: decider.DefaultParallelGracePeriod}
}

// LoadConfig reads the configuration file (and MAGOS_* variables and set flags) over the
// defaults and validates it. The error names the offending key.
func LoadConfig(file string, flags *pflag.FlagSet) (Config, error) {
	cfg := DefaultConfig()
	if err := config.Load(config.Options{File: file, EnvPrefix: EnvPrefix, Flags: flags}, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate checks the configuration and fills in defaults (the Secret key).
func (c *Config) Validate() error {
	var errs config.Errors
	if c.ProjectParallelGracePeriod <= 0 {
		errs.Add("projectParallelGracePeriod", "must be a positive duration (e.g. 30s), got %s", c.ProjectParallelGracePeriod)
	}
	if c.KubeAPIQPS <= 0 {
		errs.Add("kubeApiQps", "must be a positive number of requests per second, got %g", c.KubeAPIQPS)
	}
	if c.KubeAPIBurst < 1 || float32(c.KubeAPIBurst) < c.KubeAPIQPS {
		errs.Add("kubeApiBurst", "must be a whole number of requests at least kubeApiQps (%g), got %d", c.KubeAPIQPS, c.KubeAPIBurst)
	}
	if d := c.Dashboard; d.Enabled() {
		if _, port, err := net.SplitHostPort(d.BindAddress); err != nil || port == "" {
			errs.Add("dashboard.bindAddress", "must be host:port (e.g. :8443 or 127.0.0.1:8443), or 0 to turn the dashboard off, got %q", d.BindAddress)
		}
	}
	if (c.Dashboard.CertFile == "") != (c.Dashboard.KeyFile == "") {
		errs.Add("dashboard.certFile", "and dashboard.keyFile must be set together (HTTPS) or both left empty (HTTP)")
	}
	if c.Dashboard.OIDC != nil {
		c.Dashboard.OIDC.validate("dashboard.oidc", &errs)
	}
	c.Notifications.Validate("notifications", &errs)
	seen := map[string]int{}
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		key := fmt.Sprintf("clusters[%d]", i)
		switch msgs := validation.IsDNS1123Label(cl.Name); {
		case cl.Name == "":
			errs.Add(key+".name", "must be set: a DNS label (lower-case letters, digits and '-') of at most %d characters", MaxClusterNameLength)
		case len(msgs) > 0 || len(cl.Name) > MaxClusterNameLength:
			errs.Add(key+".name", "must be a DNS label of at most %d characters (lower-case letters, digits and '-', starting and ending with a letter or digit), got %q", MaxClusterNameLength, cl.Name)
		default:
			if j, dup := seen[cl.Name]; dup {
				errs.Add(key+".name", "duplicate cluster name %q (also clusters[%d])", cl.Name, j)
			} else {
				seen[cl.Name] = i
			}
		}
		for k, v := range cl.Labels {
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				errs.Add(fmt.Sprintf("%s.labels[%s]", key, k), "must be a label key: %s", strings.Join(msgs, "; "))
			}
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				errs.Add(fmt.Sprintf("%s.labels[%s]", key, k), "must be a label value, got %q: %s", v, strings.Join(msgs, "; "))
			}
		}
		switch {
		case cl.Agent != nil && cl.Kubeconfig != nil:
			errs.Add(key, "set exactly one of agent (an agent connects to the hub) and kubeconfig (the hub connects to the cluster), not both")
		case cl.Agent == nil && cl.Kubeconfig == nil:
			errs.Add(key, "set exactly one of agent: {} (an agent connects to the hub) and kubeconfig (the hub connects to the cluster)")
		case cl.Kubeconfig != nil:
			kc := cl.Kubeconfig
			set := 0
			for _, isSet := range []bool{kc.Path != "", kc.SecretRef != nil, kc.InCluster} {
				if isSet {
					set++
				}
			}
			switch {
			case set > 1:
				errs.Add(key+".kubeconfig", "set exactly one of path, secretRef and inCluster: true, not several")
			case set == 0:
				errs.Add(key+".kubeconfig", "set exactly one of path (a kubeconfig file), secretRef (a Secret key) and inCluster: true (the hub's own cluster, with the hub's own identity)")
			case kc.SecretRef != nil:
				kc.SecretRef.Validate(key+".kubeconfig.secretRef", "kubeconfig", &errs)
			}
		}
	}
	c.bind(&errs, seen)
	return errs.Err()
}

// bind checks the bindings and fills in each cluster's Namespaces.
func (c *Config) bind(errs *config.Errors, registered map[string]int) {
	bound := make([]map[string]bool, len(c.Clusters))
	for i, b := range c.Bindings {
		key := fmt.Sprintf("bindings[%d]", i)
		if len(b.Namespaces) == 0 {
			errs.Add(key+".namespaces", "must name at least one hub namespace (or \"*\" for every namespace)")
		}
		for j, ns := range b.Namespaces {
			if msgs := validation.IsDNS1123Label(ns); ns != magosv1.AllNamespaces && len(msgs) > 0 {
				errs.Add(fmt.Sprintf("%s.namespaces[%d]", key, j), "must be a namespace name or \"*\", got %q", ns)
			}
		}
		if len(b.Clusters) == 0 && b.ClusterSelector == nil {
			errs.Add(key, "set clusters (registered cluster names), clusterSelector (cluster labels) or both")
		}
		var sel labels.Selector
		if b.ClusterSelector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(b.ClusterSelector); err != nil {
				errs.Add(key+".clusterSelector", "%v", err)
				sel = labels.Nothing()
			}
		}
		named := map[string]bool{}
		for j, name := range b.Clusters {
			if _, ok := registered[name]; !ok {
				errs.Add(fmt.Sprintf("%s.clusters[%d]", key, j), "no registered cluster is named %q", name)
			}
			named[name] = true
		}
		for k := range c.Clusters {
			cl := &c.Clusters[k]
			if !named[cl.Name] && (sel == nil || !sel.Matches(labels.Set(cl.Labels))) {
				continue
			}
			if bound[k] == nil {
				bound[k] = map[string]bool{}
			}
			for _, ns := range b.Namespaces {
				bound[k][ns] = true
			}
		}
	}
	for k := range c.Clusters {
		c.Clusters[k].Namespaces = nil
		switch {
		case bound[k][magosv1.AllNamespaces]:
			c.Clusters[k].Namespaces = []string{magosv1.AllNamespaces}
		case len(bound[k]) > 0:
			c.Clusters[k].Namespaces = slices.Sorted(maps.Keys(bound[k]))
		}
	}
}

// Spec is the Cluster object's spec for a registered cluster.
func (c ClusterConfig) Spec() magosv1.ClusterSpec {
	return magosv1.ClusterSpec{Transport: c.Transport(), Kubeconfig: c.KubeconfigSource(), Namespaces: c.Namespaces}
}

// Transport is the transport of a registered cluster: agent or direct.
func (c ClusterConfig) Transport() string {
	if c.Kubeconfig != nil {
		return magosv1.TransportDirect
	}
	return magosv1.TransportAgent
}

// KubeconfigSource is the Cluster object's spec.kubeconfig for a direct cluster, or nil.
func (c ClusterConfig) KubeconfigSource() *magosv1.KubeconfigSource {
	if c.Kubeconfig == nil {
		return nil
	}
	src := &magosv1.KubeconfigSource{Path: c.Kubeconfig.Path, InCluster: c.Kubeconfig.InCluster}
	if ref := c.Kubeconfig.SecretRef; ref != nil {
		src.SecretRef = &magosv1.SecretKeySelector{Namespace: ref.Namespace, Name: ref.Name, Key: ref.Key}
	}
	return src
}

// FleetSpecs turns the registered clusters into the fleet provider's desired set.
func (c Config) FleetSpecs() []fleet.Spec {
	out := make([]fleet.Spec, 0, len(c.Clusters))
	for _, cl := range c.Clusters {
		out = append(out, fleet.Spec{
			Name:       cl.Name,
			Transport:  cl.Transport(),
			Labels:     cl.Labels,
			Kubeconfig: cl.KubeconfigSource(),
		})
	}
	return out
}
