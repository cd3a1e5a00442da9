package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// SessionCookie holds the random ID of a dashboard session started by signing in with OIDC. The
// session itself (the person's ID token) stays on the hub replica that started it.
const SessionCookie = "magos-dashboard-session"

// oidcFlowCookie carries, between GET /oidc/login and GET /oidc/callback, the state, nonce and
// PKCE verifier of one sign-in. It is only ever sent to /oidc/ paths.
const oidcFlowCookie = "magos-dashboard-oidc"

// oidcFlowTTL bounds how long a person may take at the provider's login page.
const oidcFlowTTL = 10 * time.Minute

// DefaultSessionTTL is how long an OIDC session lasts at most when OIDCOptions.SessionTTL is
// not set (the ID token's expiry may end it sooner).
const DefaultSessionTTL = 8 * time.Hour

// OIDCOptions turns on signing in with an OpenID Connect provider (the authorization code flow
// with PKCE). The hub's API server must trust the same issuer and client ID (its --oidc-* flags
// or an AuthenticationConfiguration): the dashboard sends it the person's ID token as their
// bearer token, so TokenReview, SubjectAccessReview and Kubernetes RBAC decide as for any
// other token.
type OIDCOptions struct {
	// IssuerURL is the provider's issuer (https), as its discovery document and ID tokens name it.
	IssuerURL string
	// ClientID is the dashboard's client ID at the provider: the ID tokens' audience.
	ClientID string
	// ClientSecret returns the client's secret; it is called at every sign-in, so a rotated
	// Secret needs no restart.
	ClientSecret func(ctx context.Context) (string, error)
	// CAFile, when set, is a PEM bundle of the certificate authorities to trust for the issuer
	// (instead of the system's).
	CAFile string
	// RedirectURL is the dashboard's external URL followed by /oidc/callback, registered at the
	// provider.
	RedirectURL string
	// Scopes are asked of the provider (openid is always among them).
	Scopes []string
	// SessionTTL bounds a session (default DefaultSessionTTL); the ID token's expiry ends it
	// sooner when it comes first.
	SessionTTL time.Duration
	// DisplayName names the provider on the sign-in button (default: the issuer's host).
	DisplayName string
}

// oidcLogin is the dashboard's side of OIDC: the flow's endpoints and the sessions.
type oidcLogin struct {
	opts     OIDCOptions
	s        *Server
	client   *http.Client
	sessions *sessions

	mu       sync.Mutex
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
}

func newOIDCLogin(s *Server, opts OIDCOptions) (*oidcLogin, error) {
	if opts.IssuerURL == "" || opts.ClientID == "" || opts.RedirectURL == "" || opts.ClientSecret == nil {
		return nil, errors.New("dashboard: OIDC needs an issuer URL, a client ID, a client secret and a redirect URL")
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if !slices.Contains(opts.Scopes, oidc.ScopeOpenID) {
		opts.Scopes = append([]string{oidc.ScopeOpenID}, opts.Scopes...)
	}
	if opts.DisplayName == "" {
		if u, err := url.Parse(opts.IssuerURL); err == nil && u.Host != "" {
			opts.DisplayName = u.Host
		} else {
			opts.DisplayName = "OIDC"
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("dashboard: reading the OIDC issuer's CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("dashboard: the OIDC issuer's CA file %s holds no PEM certificate", opts.CAFile)
		}
		transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	return &oidcLogin{
		opts:     opts,
		s:        s,
		client:   &http.Client{Transport: transport, Timeout: 30 * time.Second},
		sessions: newSessions(),
	}, nil
}

// clientContext makes the OIDC and OAuth 2 libraries reach the provider with o.client.
func (o *oidcLogin) clientContext(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, o.client)
}

// discover returns the provider and the verifier of its ID tokens, reading its discovery
// document on first use (and again after a failure): a provider that is down when the hub
// starts does not keep the hub from starting. The verifier checks an ID token's signature
// (with the provider's keys, fetched and cached as needed), issuer, audience (the client ID)
// and expiry.
func (o *oidcLogin) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, o.verifier, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(o.clientContext(ctx), o.opts.IssuerURL)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the discovery document of %s: %w", o.opts.IssuerURL, err)
	}
	o.provider = p
	o.verifier = p.VerifierContext(o.clientContext(context.Background()), &oidc.Config{ClientID: o.opts.ClientID, Now: o.s.opts.Now})
	return o.provider, o.verifier, nil
}

// config is the OAuth 2 configuration of the dashboard's client.
func (o *oidcLogin) config(ctx context.Context, p *oidc.Provider) (*oauth2.Config, error) {
	secret, err := o.opts.ClientSecret(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the OIDC client secret: %w", err)
	}
	return &oauth2.Config{ClientID: o.opts.ClientID, ClientSecret: secret, Endpoint: p.Endpoint(),
		RedirectURL: o.opts.RedirectURL, Scopes: o.opts.Scopes}, nil
}

// AuthMethods is the answer of GET /api/v1/auth-methods: how one may sign in. It needs no
// credentials and tells nothing secret.
type AuthMethods struct {
	// Token is true: a token of the hub's API server is always accepted (POST /login).
	Token bool `json:"token"`
	// OIDC is set when signing in with an OIDC provider is configured.
	OIDC *OIDCMethod `json:"oidc,omitempty"`
}

// OIDCMethod is the OIDC sign-in the page offers.
type OIDCMethod struct {
	// Name names the provider on the button.
	Name string `json:"name"`
	// LoginURL starts the sign-in (GET).
	LoginURL string `json:"loginURL"`
}

func (s *Server) authMethods(w http.ResponseWriter, _ *http.Request) {
	m := AuthMethods{Token: true}
	if s.oidc != nil {
		m.OIDC = &OIDCMethod{Name: s.oidc.opts.DisplayName, LoginURL: "/oidc/login"}
	}
	writeJSON(w, http.StatusOK, m)
}

// randomString is n random bytes, base64url without padding.
func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// login starts a sign-in: it keeps a new state, nonce and PKCE verifier in the flow cookie and
// sends the browser to the provider's authorization endpoint with the state, the nonce and the
// verifier's S256 challenge.
func (o *oidcLogin) login(w http.ResponseWriter, r *http.Request) {
	p, _, err := o.discover(r.Context())
	if err != nil {
		o.s.opts.Logger.Error(err, "OIDC sign-in unavailable")
		o.fail(w, http.StatusServiceUnavailable, "The sign-in provider cannot be reached right now.")
		return
	}
	cfg, err := o.config(r.Context(), p)
	if err != nil {
		o.s.opts.Logger.Error(err, "OIDC sign-in unavailable")
		o.fail(w, http.StatusServiceUnavailable, "The dashboard's sign-in is not set up correctly (its client secret cannot be read).")
		return
	}
	state, nonce, verifier := randomString(32), randomString(32), oauth2.GenerateVerifier()
	http.SetCookie(w, &http.Cookie{Name: oidcFlowCookie, Value: state + "." + nonce + "." + verifier, Path: "/oidc/",
		MaxAge: int(oidcFlowTTL / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, cfg.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// callback ends a sign-in: it checks the state against the flow cookie, exchanges the code
// (with the PKCE verifier) for tokens, verifies the ID token (signature, issuer, audience,
// expiry, and the nonce), checks that the hub's API server accepts it, and starts a session.
func (o *oidcLogin) callback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The flow cookie serves one callback only.
	http.SetCookie(w, &http.Cookie{Name: oidcFlowCookie, Value: "", Path: "/oidc/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
	c, err := r.Cookie(oidcFlowCookie)
	if err != nil {
		o.fail(w, http.StatusBadRequest, "This sign-in was not started here, or took too long.")
		return
	}
	parts := strings.Split(c.Value, ".")
	q := r.URL.Query()
	if len(parts) != 3 || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(q.Get("state"))) != 1 {
		o.fail(w, http.StatusBadRequest, "This sign-in's state does not match the one it was started with.")
		return
	}
	nonce, pkceVerifier := parts[1], parts[2]
	if e := q.Get("error"); e != "" {
		o.s.opts.Logger.Info("the OIDC provider refused a sign-in", "error", e, "description", q.Get("error_description"))
		o.fail(w, http.StatusUnauthorized, "The sign-in provider refused the sign-in: "+e+" "+q.Get("error_description"))
		return
	}
	p, verifier, err := o.discover(ctx)
	if err != nil {
		o.s.opts.Logger.Error(err, "OIDC sign-in failed")
		o.fail(w, http.StatusServiceUnavailable, "The sign-in provider cannot be reached right now.")
		return
	}
	cfg, err := o.config(ctx, p)
	if err != nil {
		o.s.opts.Logger.Error(err, "OIDC sign-in failed")
		o.fail(w, http.StatusServiceUnavailable, "The dashboard's sign-in is not set up correctly (its client secret cannot be read).")
		return
	}
	tok, err := cfg.Exchange(o.clientContext(ctx), q.Get("code"), oauth2.VerifierOption(pkceVerifier))
	if err != nil {
		o.s.opts.Logger.Error(exchangeError(err), "OIDC sign-in failed: exchanging the authorization code")
		o.fail(w, http.StatusBadGateway, "The sign-in provider did not exchange the authorization code.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		o.s.opts.Logger.Error(errors.New("the token response holds no id_token"), "OIDC sign-in failed")
		o.fail(w, http.StatusBadGateway, "The sign-in provider returned no ID token (is the openid scope allowed?).")
		return
	}
	idToken, err := verifier.Verify(ctx, raw)
	if err != nil {
		o.s.opts.Logger.Error(err, "OIDC sign-in failed: the ID token does not verify")
		o.fail(w, http.StatusUnauthorized, "The ID token does not verify.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(idToken.Nonce), []byte(nonce)) != 1 {
		o.s.opts.Logger.Error(errors.New("the ID token's nonce is not the sign-in's"), "OIDC sign-in failed")
		o.fail(w, http.StatusUnauthorized, "The ID token was not issued for this sign-in (nonce).")
		return
	}
	check := r.Clone(ctx)
	check.Header.Set("Authorization", "Bearer "+raw)
	u := o.s.access.authenticate(check)
	if u == nil {
		o.s.opts.Logger.Info("the hub's API server refused an ID token of the OIDC provider: its --oidc-* flags (or AuthenticationConfiguration) must trust the issuer and client ID",
			"issuer", o.opts.IssuerURL, "clientID", o.opts.ClientID, "subject", idToken.Subject)
		o.fail(w, http.StatusForbidden, "You signed in, but the hub's API server does not accept the ID tokens of this provider: it must trust the issuer and client ID (docs/security.md).")
		return
	}
	now := o.s.opts.Now()
	expires := now.Add(o.opts.SessionTTL)
	if idToken.Expiry.Before(expires) {
		expires = idToken.Expiry
	}
	id := o.sessions.start(raw, u.GetName(), expires, now)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", Expires: expires, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	o.s.opts.Logger.Info("signed in with OIDC", "user", u.GetName(), "expires", expires.UTC().Format(time.RFC3339))
	// The provider's redirect is a cross-site navigation: a Strict cookie set now is not sent
	// with a redirect that continues it, so the page is reached with a same-site navigation.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = signedInPage.Execute(w, nil)
}

// exchangeError is what to log of a failed code exchange: the provider's error code and
// description, never the response body.
func exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return fmt.Errorf("the provider answered %d: %s %s", re.Response.StatusCode, re.ErrorCode, re.ErrorDescription)
	}
	return err
}

// signedInPage sends the browser on to the dashboard (a same-site navigation, with the session
// cookie): a meta refresh, as the page's policy allows no inline script.
var signedInPage = template.Must(template.New("signed-in").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/"><title>Signed in</title></head>
<body><p>Signed in. <a href="/">Continue to the dashboard</a>.</p></body></html>
`))

var failPage = template.Must(template.New("sign-in-failed").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign-in failed</title><link rel="stylesheet" href="/style.css"></head>
<body><main><h1>Sign-in failed</h1><p id="sign-in-failed">{{.}}</p><p><a href="/">Back to the dashboard</a></p></main></body></html>
`))

// fail answers a browser's sign-in step with a page that says what went wrong.
func (o *oidcLogin) fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = failPage.Execute(w, msg)
}

// withSession serves a request that carries the cookie of a live session with that session's
// ID token as its bearer token (unless it brings an Authorization header of its own), so that
// authentication, authorization and the reads made with the caller's token work as for any
// token. The request's context ends with the session (at its expiry, or at sign-out), which
// ends an event stream opened in it. A dead session's cookie is cleared; its requests carry no
// token and are refused as such.
func (o *oidcLogin) withSession(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(SessionCookie)
		if err != nil || r.Header.Get("Authorization") != "" {
			h.ServeHTTP(w, r)
			return
		}
		sess := o.sessions.get(c.Value, o.s.opts.Now())
		if sess == nil {
			http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
				Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithDeadline(r.Context(), sess.expires)
		defer cancel()
		stop := context.AfterFunc(sess.ctx, cancel)
		defer stop()
		r = r.Clone(ctx)
		r.Header.Set("Authorization", "Bearer "+sess.idToken)
		h.ServeHTTP(w, r)
	})
}

// signOut ends the request's session on this replica and forgets its cookie, then does what
// signing out of a token does.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if s.oidc != nil {
		if c, err := r.Cookie(SessionCookie); err == nil {
			if user := s.oidc.sessions.end(c.Value); user != "" {
				s.opts.Logger.Info("signed out", "user", user)
			}
		}
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	s.logout(w, r)
}

// session is one signed-in person on this replica.
type session struct {
	idToken string
	user    string
	expires time.Time
	// ctx ends when the session does: at sign-out, or at its expiry.
	ctx    context.Context
	cancel context.CancelFunc
}

// sessions are the OIDC sessions of this replica, by the SHA-256 of their IDs (the cookie's
// value is not kept).
type sessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*session
}

func newSessions() *sessions { return &sessions{m: map[[sha256.Size]byte]*session{}} }

func sessionKey(id string) [sha256.Size]byte { return sha256.Sum256([]byte(id)) }

// start keeps a new session until expires and returns its ID. It forgets the sessions that
// expired by now.
func (ss *sessions) start(idToken, user string, expires, now time.Time) string {
	id := randomString(32)
	ctx, cancel := context.WithDeadline(context.Background(), expires)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.m {
		if !now.Before(s.expires) {
			s.cancel()
			delete(ss.m, k)
		}
	}
	ss.m[sessionKey(id)] = &session{idToken: idToken, user: user, expires: expires, ctx: ctx, cancel: cancel}
	return id
}

// get returns the live session of the ID, or nil (and forgets it when it expired).
func (ss *sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := sessionKey(id)
	s := ss.m[k]
	if s == nil {
		return nil
	}
	if !now.Before(s.expires) {
		s.cancel()
		delete(ss.m, k)
		return nil
	}
	return s
}

// end ends the session of the ID and returns its user ("" when there was none).
func (ss *sessions) end(id string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := sessionKey(id)
	s := ss.m[k]
	if s == nil {
		return ""
	}
	s.cancel()
	delete(ss.m, k)
	return s.user
}

// len is the number of sessions kept.
func (ss *sessions) len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}
