// Package hubtoken keeps the agent's credentials for the hub fresh (docs/architecture.md,
// "Agent credentials").
//
// An agent starts with the bootstrap kubeconfig `magosctl agent-kubeconfig` prints: the hub's
// server and CA, and a token for the agent's ServiceAccount in its cluster namespace on the hub.
// A Renewer then asks the hub, with the token in use, for a new short-lived token for that same
// ServiceAccount (the TokenRequest API, which the per-cluster Role allows for that ServiceAccount
// only) right away, and again at 75 to 85% of each token's lifetime. Every hub client the agent
// builds from Config sends the newest token with each request (client-go's token source
// transport), so a renewal needs no restart.
//
// Each renewed token is kept in a Secret in the agent's own namespace in the spoke. A starting
// agent uses the kept token when it was renewed for the same hub and namespace and has not
// expired, so an agent restarted after its bootstrap token expired (or was revoked) still
// connects. When the hub refuses the token in use (401: expired, revoked, its ServiceAccount
// recreated), the Renewer falls back to the bootstrap token, reading the bootstrap kubeconfig
// again (an operator may have replaced it).
//
// A renewal that fails is retried with backoff (1s doubling to 1m) and logged. When it fails
// within the last 10% of the token's lifetime, or the hub refuses both the token in use and the
// bootstrap token, the Renewer also records a Warning Event on the token Secret
// (HubTokenExpiring, HubTokenRefused). The metrics magos_agent_hub_token_expiry_timestamp_seconds
// and magos_agent_hub_token_renewals_total{result} show the same.
package hubtoken

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/keys"
)

// MinExpiry is the shortest lifetime the API server grants a TokenRequest.
const MinExpiry = 10 * time.Minute

// DefaultExpiry is the requested lifetime of renewed tokens when Options.Expiry is zero.
const DefaultExpiry = time.Hour

// Keys of the token Secret's data.
const (
	// SecretKeyToken is the token.
	SecretKeyToken = "token"
	// SecretKeyExpiration is when it expires (RFC 3339), as the hub said.
	SecretKeyExpiration = "expirationTimestamp"
	// SecretKeyIssued is when the agent requested it (RFC 3339).
	SecretKeyIssued = "issuedAt"
	// SecretKeyNamespace is the hub namespace of the ServiceAccount it is for.
	SecretKeyNamespace = "namespace"
	// SecretKeyServer is the hub API server it was issued by (the bootstrap kubeconfig's).
	SecretKeyServer = "server"
)

// Reasons of the Warning Events on the token Secret.
const (
	// ReasonExpiring: a renewal failed within the last 10% of the token's lifetime.
	ReasonExpiring = "HubTokenExpiring"
	// ReasonRefused: the hub refuses both the token in use and the bootstrap token; the agent
	// needs a new bootstrap kubeconfig.
	ReasonRefused = "HubTokenRefused"
)

// Where the token in use came from.
const (
	sourceBootstrap = "bootstrap"
	sourceKept      = "kept"
	sourceRenewed   = "renewed"
)

// Options configures a Renewer.
type Options struct {
	// Namespace is the agent cluster's namespace on the hub; ServiceAccount the agent's
	// ServiceAccount there (keys.AgentServiceAccount if empty).
	Namespace, ServiceAccount string
	// Bootstrap is the bootstrap kubeconfig's configuration: the hub's server and CA (kept for
	// every token) and the bootstrap token. Required.
	Bootstrap *rest.Config
	// BootstrapFile is the file Bootstrap was read from, read again for a new bootstrap token
	// when the hub refuses the token in use. Empty: Bootstrap's token only.
	BootstrapFile string
	// Expiry is the requested lifetime of renewed tokens (the API server may shorten it).
	// Default DefaultExpiry; at least MinExpiry.
	Expiry time.Duration
	// Secret is the Secret in the spoke that keeps the last renewed token. Empty Name: not kept.
	Secret types.NamespacedName
	// Spoke reads and writes Secret; it must not be a cached client. Required with Secret.
	Spoke client.Client
	// Recorder records Warning Events on Secret (nil: none).
	Recorder events.EventRecorder
	// Logger logs renewals and failures (default: the context's logger).
	Logger *logr.Logger
	// Clock schedules renewals (default: the real clock).
	Clock clock.Clock

	// requestFault, when set, is asked before each TokenRequest; an error fails the request as
	// the hub would. A test fault (export_test.go): nothing else sets it.
	requestFault func() error
}

// credential is a token the Renewer may use.
type credential struct {
	token  string
	source string
	// issued and expiry bound the token's lifetime (zero: unknown, the bootstrap token).
	issued, expiry time.Time
	// adopted is when it became the token in use (the real clock, as client-go's transport
	// reports refusals with it).
	adopted time.Time
	// kept: nothing to write to the Secret (it is there, or it is the bootstrap token).
	kept bool
}

// Renewer keeps the agent's hub token fresh and is the token source of its hub clients. It is
// an oauth2.TokenSource and a transport.ResettableTokenSource: a request the hub refuses with
// the token in use wakes the Renewer to renew (or fall back to the bootstrap token) at once.
type Renewer struct {
	opts   Options
	cfg    *rest.Config
	tokens corev1client.ServiceAccountInterface
	server string
	// nudge wakes the renewal loop when a hub request was refused with the token in use.
	nudge chan struct{}

	// Load's outcome, for Start: whether it renewed, and when to renew next.
	renewed bool
	renewAt time.Time

	mu  sync.RWMutex
	cur credential
}

var (
	_ oauth2.TokenSource              = (*Renewer)(nil)
	_ transport.ResettableTokenSource = (*Renewer)(nil)
)

// New returns a Renewer that starts with the bootstrap token. Call Load, then Start.
func New(opts Options) (*Renewer, error) {
	if opts.Bootstrap == nil {
		return nil, errors.New("hubtoken: the bootstrap kubeconfig is required")
	}
	if opts.Namespace == "" {
		return nil, errors.New("hubtoken: the agent cluster's hub namespace is required")
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = keys.AgentServiceAccount
	}
	if opts.Expiry == 0 {
		opts.Expiry = DefaultExpiry
	}
	if opts.Expiry < MinExpiry {
		return nil, fmt.Errorf("hubtoken: token expiry %s: the API server grants no token shorter than %s", opts.Expiry, MinExpiry)
	}
	if opts.Secret.Name != "" && (opts.Secret.Namespace == "" || opts.Spoke == nil) {
		return nil, fmt.Errorf("hubtoken: keeping the token in Secret %q needs its namespace and a spoke client", opts.Secret.Name)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	token, err := bootstrapToken(opts.Bootstrap)
	if err != nil {
		return nil, err
	}
	registerMetrics()
	r := &Renewer{opts: opts, server: opts.Bootstrap.Host, nudge: make(chan struct{}, 1)}
	r.cur = credential{token: token, source: sourceBootstrap, adopted: time.Now(), kept: true}
	expiryTimestamp.Set(0)

	// The bootstrap kubeconfig's server, CA and TLS settings; the token comes from the Renewer
	// with each request.
	cfg := rest.CopyConfig(opts.Bootstrap)
	cfg.BearerToken, cfg.BearerTokenFile = "", ""
	cfg.Wrap(transport.ResettableTokenSourceWrapTransport(r))
	r.cfg = cfg
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hubtoken: hub client: %w", err)
	}
	r.tokens = cs.CoreV1().ServiceAccounts(opts.Namespace)
	return r, nil
}

// bootstrapToken returns the bearer token of a bootstrap kubeconfig's configuration.
func bootstrapToken(cfg *rest.Config) (string, error) {
	if cfg.BearerToken != "" {
		return cfg.BearerToken, nil
	}
	if cfg.BearerTokenFile != "" {
		raw, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("hubtoken: reading the bootstrap token: %w", err)
		}
		if t := strings.TrimSpace(string(raw)); t != "" {
			return t, nil
		}
	}
	return "", errors.New("hubtoken: the bootstrap kubeconfig has no token (print one with `magosctl agent-kubeconfig`)")
}

// Config returns the hub configuration every hub client of the agent should use: the bootstrap
// kubeconfig's server and CA, with the Renewer's token in use sent with each request.
func (r *Renewer) Config() *rest.Config {
	return rest.CopyConfig(r.cfg)
}

// Token returns the token in use (oauth2.TokenSource).
func (r *Renewer) Token() (*oauth2.Token, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return &oauth2.Token{AccessToken: r.cur.token, TokenType: "Bearer"}, nil
}

// minNudgeInterval is how long a token is in use before a refused request may wake the renewal
// loop: refusals cannot make the agent request tokens in a tight loop.
const minNudgeInterval = 10 * time.Second

// ResetTokenOlderThan is called by client-go's transport when the hub refused a request sent at
// t or later: when the token in use was already in use then (for at least minNudgeInterval), it
// wakes the renewal loop.
func (r *Renewer) ResetTokenOlderThan(t time.Time) {
	r.mu.RLock()
	adopted := r.cur.adopted
	r.mu.RUnlock()
	if adopted.Before(t) && time.Since(adopted) >= minNudgeInterval {
		select {
		case r.nudge <- struct{}{}:
		default:
		}
	}
}

func (r *Renewer) current() credential {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cur
}

func (r *Renewer) use(c credential) {
	c.adopted = time.Now()
	r.mu.Lock()
	r.cur = c
	r.mu.Unlock()
	if c.expiry.IsZero() {
		expiryTimestamp.Set(0)
	} else {
		expiryTimestamp.Set(float64(c.expiry.Unix()))
	}
}

func (r *Renewer) logger(ctx context.Context) logr.Logger {
	if r.opts.Logger != nil {
		return *r.opts.Logger
	}
	return ctrl.LoggerFrom(ctx).WithName("hubtoken")
}

// Kept is a token an agent renewed and kept in its spoke Secret.
type Kept struct {
	// Token is the token.
	Token string
	// Issued and Expiry bound its lifetime.
	Issued, Expiry time.Time
	// Namespace and Server are the hub namespace and API server it is for.
	Namespace, Server string
}

// ReadKept reads the token kept in the Secret key. ok is false when there is none (no Secret,
// or an empty one such as the magos-agent chart installs).
func ReadKept(ctx context.Context, c client.Reader, key types.NamespacedName) (k Kept, ok bool, err error) {
	s := &corev1.Secret{}
	if err := c.Get(ctx, key, s); apierrors.IsNotFound(err) {
		return Kept{}, false, nil
	} else if err != nil {
		return Kept{}, false, fmt.Errorf("reading the hub token Secret %s: %w", key, err)
	}
	k = Kept{Token: string(s.Data[SecretKeyToken]), Namespace: string(s.Data[SecretKeyNamespace]), Server: string(s.Data[SecretKeyServer])}
	if k.Token == "" {
		return Kept{}, false, nil
	}
	if k.Expiry, err = time.Parse(time.RFC3339, string(s.Data[SecretKeyExpiration])); err != nil {
		return Kept{}, false, fmt.Errorf("the hub token Secret %s: %s: %w", key, SecretKeyExpiration, err)
	}
	if k.Issued, err = time.Parse(time.RFC3339, string(s.Data[SecretKeyIssued])); err != nil {
		return Kept{}, false, fmt.Errorf("the hub token Secret %s: %s: %w", key, SecretKeyIssued, err)
	}
	return k, true, nil
}

// Usable reports whether the kept token is for the hub namespace and server and still valid
// at now (with a minute to spare).
func (k Kept) Usable(namespace, server string, now time.Time) bool {
	return k.Namespace == namespace && k.Server == server && now.Add(time.Minute).Before(k.Expiry)
}

// Load chooses the first token and renews it once: the token kept in the Secret when it is
// Usable, else the bootstrap token (a Secret that cannot be read is logged, and the bootstrap
// token is used). The renewal falls back to the bootstrap token when the hub refuses the kept
// one. Call it before any hub client makes a request (controller-runtime asks the hub for its
// API groups as soon as a hub cluster is created). A failed renewal is reported, and Start
// retries it at once.
func (r *Renewer) Load(ctx context.Context) {
	log := r.logger(ctx).WithValues("namespace", r.opts.Namespace, "serviceAccount", r.opts.ServiceAccount)
	r.loadKept(ctx, log)
	if err := r.renew(ctx, log); err != nil {
		r.failed(ctx, log, err, 0)
		return
	}
	r.renewed = true
	r.renewAt = r.nextRenewal()
}

// loadKept makes the token kept in the Secret the token in use when it is Usable.
func (r *Renewer) loadKept(ctx context.Context, log logr.Logger) {
	if r.opts.Secret.Name == "" {
		log.Info("the renewed hub token is not kept: no Secret configured; a restart after the bootstrap token expired will not connect")
		return
	}
	k, ok, err := ReadKept(ctx, r.opts.Spoke, r.opts.Secret)
	switch {
	case err != nil:
		log.Error(err, "starting with the bootstrap token")
		return
	case !ok:
		log.Info("no kept hub token yet: starting with the bootstrap token", "secret", r.opts.Secret.String())
		return
	case !k.Usable(r.opts.Namespace, r.server, r.opts.Clock.Now()):
		log.Info("the kept hub token is expired or for another hub: starting with the bootstrap token",
			"secret", r.opts.Secret.String(), "expired", k.Expiry.UTC().Format(time.RFC3339))
		return
	}
	r.use(credential{token: k.Token, source: sourceKept, issued: k.Issued, expiry: k.Expiry, kept: true})
	log.Info("starting with the kept hub token", "secret", r.opts.Secret.String(), "expires", k.Expiry.UTC().Format(time.RFC3339))
}

// Start renews the token at 75 to 85% of each token's lifetime (at once when Load did not
// renew it), until ctx ends; failures are retried with backoff and reported (see the package
// documentation). It keeps each renewed token in the Secret, retrying with backoff when that
// fails. It never returns an error: a hub that does not answer must not stop the agent.
func (r *Renewer) Start(ctx context.Context) error {
	log := r.logger(ctx).WithValues("namespace", r.opts.Namespace, "serviceAccount", r.opts.ServiceAccount)
	renewBackoff, keepBackoff := backoff(), backoff()
	renewAt, renewed := r.renewAt, r.renewed // zero renewAt: now
	var keepAt time.Time
	for {
		now := r.opts.Clock.Now()
		if !now.Before(renewAt) {
			if err := r.renew(ctx, log); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				renewed = false
				wait := renewBackoff.Step()
				renewAt = now.Add(wait)
				r.failed(ctx, log, err, wait)
			} else {
				renewed = true
				renewBackoff = backoff()
				renewAt = r.nextRenewal()
			}
		}
		next := renewAt
		if cur := r.current(); !cur.kept && r.opts.Secret.Name != "" {
			if !now.Before(keepAt) {
				if err := r.keep(ctx, cur); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					wait := keepBackoff.Step()
					keepAt = now.Add(wait)
					log.Error(err, "keeping the renewed hub token in the spoke failed; retrying (until it is kept, a restart after the bootstrap token expired will not connect)",
						"secret", r.opts.Secret.String(), "retryIn", wait.String())
				} else {
					keepBackoff = backoff()
				}
			}
			if !r.current().kept && keepAt.Before(next) {
				next = keepAt
			}
		}
		// A refused request wakes the loop, unless a renewal is already failing (its backoff
		// stands).
		nudge := r.nudge
		if !renewed {
			nudge = nil
		}
		timer := r.opts.Clock.NewTimer(next.Sub(r.opts.Clock.Now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		case <-nudge:
			timer.Stop()
			log.Info("the hub refused a request with the token in use: renewing now")
			renewAt = time.Time{}
		}
	}
}

// backoff is the retry schedule of failed renewals and writes: 1s doubling to 1m, jittered.
func backoff() *wait.Backoff {
	return &wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: time.Minute}
}

// nextRenewal is when to renew the token in use: at 75 to 85% of its lifetime.
func (r *Renewer) nextRenewal() time.Time {
	cur := r.current()
	life := cur.expiry.Sub(cur.issued)
	return cur.issued.Add(time.Duration(float64(life) * (0.75 + 0.1*rand.Float64())))
}

// renew requests a new token with the token in use; when the hub refuses that token, it falls
// back to the bootstrap token and tries again.
func (r *Renewer) renew(ctx context.Context, log logr.Logger) error {
	err := r.request(ctx, log)
	if apierrors.IsUnauthorized(err) && r.fallBack(log) {
		err = r.request(ctx, log)
	}
	return err
}

// request asks the hub for a new token for the ServiceAccount and makes it the token in use.
func (r *Renewer) request(ctx context.Context, log logr.Logger) error {
	prev := r.current()
	issued := r.opts.Clock.Now()
	secs := int64(r.opts.Expiry / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	var err error
	if r.opts.requestFault != nil {
		err = r.opts.requestFault()
	}
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tr, err = r.tokens.CreateToken(rctx, r.opts.ServiceAccount, tr, metav1.CreateOptions{})
		cancel()
	}
	if err != nil {
		renewalsTotal.WithLabelValues("failure").Inc()
		return fmt.Errorf("requesting a token for %s/%s from the hub with the %s token: %w", r.opts.Namespace, r.opts.ServiceAccount, prev.source, err)
	}
	expiry := tr.Status.ExpirationTimestamp.Time
	r.use(credential{token: tr.Status.Token, source: sourceRenewed, issued: issued, expiry: expiry})
	renewalsTotal.WithLabelValues("success").Inc()
	log.Info("hub token renewed", "with", prev.source, "expires", expiry.UTC().Format(time.RFC3339))
	return nil
}

// fallBack makes the bootstrap token the token in use after the hub refused the one in use,
// reading the bootstrap kubeconfig again when it came from a file. It reports whether the token
// in use changed.
func (r *Renewer) fallBack(log logr.Logger) bool {
	token, err := bootstrapToken(r.opts.Bootstrap)
	if r.opts.BootstrapFile != "" {
		var cfg *rest.Config
		if cfg, err = clientcmd.BuildConfigFromFlags("", r.opts.BootstrapFile); err == nil {
			token, err = bootstrapToken(cfg)
		}
	}
	if err != nil {
		log.Error(err, "reading the bootstrap kubeconfig again", "file", r.opts.BootstrapFile)
		return false
	}
	cur := r.current()
	if token == cur.token {
		return false
	}
	log.Info("the hub refused the token in use: trying the bootstrap token", "refused", cur.source)
	r.use(credential{token: token, source: sourceBootstrap, kept: true})
	return true
}

// failed reports a failed renewal: always in the log; with a Warning Event when the token in
// use is within the last 10% of its lifetime or the hub refuses it.
func (r *Renewer) failed(ctx context.Context, log logr.Logger, err error, retryIn time.Duration) {
	cur := r.current()
	now := r.opts.Clock.Now()
	kv := []any{"token", cur.source}
	if retryIn > 0 {
		kv = append(kv, "retryIn", retryIn.String())
	}
	if !cur.expiry.IsZero() {
		kv = append(kv, "expires", cur.expiry.UTC().Format(time.RFC3339))
	}
	switch {
	case apierrors.IsUnauthorized(err):
		log.Error(err, "the hub refuses the agent's token and its bootstrap token: the agent cannot reach the hub until it has a new bootstrap kubeconfig (magosctl agent-kubeconfig)", kv...)
		r.event(ctx, log, ReasonRefused, "the hub refuses the agent's token and its bootstrap token; give the agent a new bootstrap kubeconfig (magosctl agent-kubeconfig): %s", err)
	case !cur.expiry.IsZero() && cur.expiry.Sub(now) <= cur.expiry.Sub(cur.issued)/10:
		log.Error(err, "the hub token expires soon and cannot be renewed: the agent loses the hub when it does", kv...)
		r.event(ctx, log, ReasonExpiring, "the hub token expires at %s and cannot be renewed: %s", cur.expiry.UTC().Format(time.RFC3339), err)
	default:
		log.Error(err, "renewing the hub token failed; retrying", kv...)
	}
}

// event records a Warning Event on the token Secret.
func (r *Renewer) event(ctx context.Context, log logr.Logger, reason, note string, args ...any) {
	if r.opts.Recorder == nil || r.opts.Secret.Name == "" {
		return
	}
	s := &corev1.Secret{}
	if err := r.opts.Spoke.Get(ctx, r.opts.Secret, s); err != nil {
		log.Error(err, "reading the hub token Secret to record an Event on it", "reason", reason)
		return
	}
	r.opts.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "RenewHubToken", note, args...)
}

// keep writes the token c to the Secret (creating it when it does not exist, which the magos-agent
// chart's RBAC does not allow: the chart creates it).
func (r *Renewer) keep(ctx context.Context, c credential) error {
	data := map[string][]byte{
		SecretKeyToken:      []byte(c.token),
		SecretKeyExpiration: []byte(c.expiry.UTC().Format(time.RFC3339)),
		SecretKeyIssued:     []byte(c.issued.UTC().Format(time.RFC3339)),
		SecretKeyNamespace:  []byte(r.opts.Namespace),
		SecretKeyServer:     []byte(r.server),
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		err := r.opts.Spoke.Get(ctx, r.opts.Secret, s)
		if apierrors.IsNotFound(err) {
			s = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Secret.Namespace, Name: r.opts.Secret.Name},
				Type:       corev1.SecretTypeOpaque,
				Data:       data,
			}
			return r.opts.Spoke.Create(ctx, s)
		}
		if err != nil {
			return err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range data {
			s.Data[k] = v
		}
		return r.opts.Spoke.Update(ctx, s)
	})
	if err != nil {
		return fmt.Errorf("writing the hub token Secret %s: %w", r.opts.Secret, err)
	}
	r.mu.Lock()
	if r.cur.token == c.token {
		r.cur.kept = true
	}
	r.mu.Unlock()
	return nil
}
