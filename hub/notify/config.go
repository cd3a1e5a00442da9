package notify

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/magosfleet/magos/pkg/config"
)

// Formats of a webhook's requests.
const (
	// FormatCloudEvents posts one CloudEvents 1.0 event in structured mode
	// (application/cloudevents+json), its data the Notification.
	FormatCloudEvents = "cloudevents"
	// FormatSlack posts {"text": "..."}, the body Slack's incoming webhooks (and Mattermost's,
	// and most chat tools') accept.
	FormatSlack = "slack"
)

// Defaults of a webhook.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultRetryFor = time.Hour
	// DefaultURLKey is the Secret key urlSecretRef reads when it names none.
	DefaultURLKey = "url"
	// DefaultAuthorizationKey is the Secret key authorizationSecretRef reads when it names none.
	DefaultAuthorizationKey = "authorization"
)

// Config is the notifications section of the hub's config file, read at start-up.
type Config struct {
	// DashboardURL is where people open the hub's dashboard (https://magos.example.com): each
	// notification links to its Rollout's page there. Empty: no links.
	DashboardURL string `mapstructure:"dashboardUrl"`
	// Webhooks are where the hub sends notifications.
	Webhooks []Webhook `mapstructure:"webhooks"`
}

// Webhook is one receiver of notifications.
type Webhook struct {
	// Name names the webhook in metrics, logs, Events and the annotation that records a
	// delivery: a DNS label.
	Name string `mapstructure:"name"`
	// Format is cloudevents (the default) or slack.
	Format string `mapstructure:"format"`
	// URLSecretRef is the Secret key holding the webhook's URL (a URL often holds its token, so
	// it never appears in the config file, a log or an Event). Its key defaults to "url".
	URLSecretRef SecretKeyRef `mapstructure:"urlSecretRef"`
	// AuthorizationSecretRef, when set, is the Secret key holding the value of the requests'
	// Authorization header (e.g. "Bearer <token>"). Its key defaults to "authorization".
	AuthorizationSecretRef *SecretKeyRef `mapstructure:"authorizationSecretRef"`
	// Projects keeps the notifications of these Projects only, each "namespace/project" or
	// "namespace/*"; empty keeps every Project's.
	Projects []string `mapstructure:"projects"`
	// Events keeps these notification types only (StepStarted, ...); empty keeps every type.
	Events []string `mapstructure:"events"`
	// Timeout bounds one request (default 10s).
	Timeout time.Duration `mapstructure:"timeout"`
	// RetryFor is how long a notification that cannot be delivered is retried, with backoff,
	// before it is dropped (default 1h).
	RetryFor time.Duration `mapstructure:"retryFor"`
}

// SecretKeyRef names a key of a Secret on the hub.
type SecretKeyRef = config.SecretKeyRef

// Enabled reports whether any webhook is configured.
func (c Config) Enabled() bool { return len(c.Webhooks) > 0 }

// Validate checks the section, adding an error per bad key (prefixed with prefix, e.g.
// "notifications") to errs, and fills in the defaults.
func (c *Config) Validate(prefix string, errs *config.Errors) {
	if c.DashboardURL != "" {
		if u, err := url.Parse(c.DashboardURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs.Add(prefix+".dashboardUrl", "must be an http or https URL (https://magos.example.com), got %q", c.DashboardURL)
		}
		c.DashboardURL = strings.TrimRight(c.DashboardURL, "/")
	}
	seen := map[string]int{}
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		key := fmt.Sprintf("%s.webhooks[%d]", prefix, i)
		switch {
		case len(validation.IsDNS1123Label(w.Name)) > 0:
			errs.Add(key+".name", "must be a DNS label (lower-case letters, digits and '-'), got %q", w.Name)
		default:
			if j, dup := seen[w.Name]; dup {
				errs.Add(key+".name", "duplicate webhook name %q (also %s.webhooks[%d])", w.Name, prefix, j)
			}
			seen[w.Name] = i
		}
		switch w.Format {
		case "":
			w.Format = FormatCloudEvents
		case FormatCloudEvents, FormatSlack:
		default:
			errs.Add(key+".format", "must be %s or %s, got %q", FormatCloudEvents, FormatSlack, w.Format)
		}
		w.URLSecretRef.Validate(key+".urlSecretRef", DefaultURLKey, errs)
		if w.AuthorizationSecretRef != nil {
			w.AuthorizationSecretRef.Validate(key+".authorizationSecretRef", DefaultAuthorizationKey, errs)
		}
		for j, p := range w.Projects {
			ns, name, ok := strings.Cut(p, "/")
			if !ok || len(validation.IsDNS1123Label(ns)) > 0 || name != "*" && len(validation.IsDNS1123Subdomain(name)) > 0 {
				errs.Add(fmt.Sprintf("%s.projects[%d]", key, j), "must be namespace/project or namespace/*, got %q", p)
			}
		}
		for j, e := range w.Events {
			if !slices.Contains(Types, e) {
				errs.Add(fmt.Sprintf("%s.events[%d]", key, j), "must be one of %s, got %q", strings.Join(Types, ", "), e)
			}
		}
		switch {
		case w.Timeout == 0:
			w.Timeout = DefaultTimeout
		case w.Timeout < 0:
			errs.Add(key+".timeout", "must be a positive duration (e.g. 10s), got %s", w.Timeout)
		}
		switch {
		case w.RetryFor == 0:
			w.RetryFor = DefaultRetryFor
		case w.RetryFor < 0:
			errs.Add(key+".retryFor", "must be a positive duration (e.g. 1h), got %s", w.RetryFor)
		}
	}
}

// keeps reports whether the webhook's filters keep notification n.
func (w *Webhook) keeps(n Notification) bool {
	if len(w.Events) > 0 && !slices.Contains(w.Events, n.Type) {
		return false
	}
	if len(w.Projects) == 0 {
		return true
	}
	return slices.ContainsFunc(w.Projects, func(p string) bool {
		ns, name, _ := strings.Cut(p, "/")
		return ns == n.Namespace && (name == "*" || name == n.Project)
	})
}
