package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// fakeProvider is an OpenID provider for the callback's checks: it signs the ID tokens it hands
// out with its own key, and lets a test change their claims (a wrong nonce, audience, issuer,
// an expired token) to see the dashboard refuse them. Its token endpoint checks the client's
// secret and the PKCE verifier against the challenge of the authorization.
type fakeProvider struct {
	t      *testing.T
	srv    *httptest.Server
	key    *rsa.PrivateKey
	now    func() time.Time
	mu     sync.Mutex
	codes  map[string]authorization
	claims func(c map[string]any) // changes an ID token's claims before it is signed
	issued []string               // the ID tokens handed out
}

// authorization is what the provider remembers of an authorization request, by its code.
type authorization struct {
	nonce, challenge, redirect string
}

func newFakeProvider(t *testing.T, now func() time.Time) *fakeProvider {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeProvider{t: t, key: key, now: now, codes: map[string]authorization{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": p.srv.URL, "authorization_endpoint": p.srv.URL + "/authorize",
			"token_endpoint": p.srv.URL + "/token", "jwks_uri": p.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewTLSServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// caFile writes the provider's certificate as a PEM file.
func (p *fakeProvider) caFile() string {
	path := filepath.Join(p.t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// authorize does what the provider does once the person signed in: it takes the authorization
// request the dashboard sent the browser to, and returns the dashboard's callback URL with a
// code and the state.
func (p *fakeProvider) authorize(authURL string) string {
	u, err := url.Parse(authURL)
	if err != nil {
		p.t.Fatal(err)
	}
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		p.t.Fatalf("the authorization request %s lacks a state, a nonce or an S256 code challenge", authURL)
	}
	if q.Get("client_id") != "magos" || q.Get("response_type") != "code" || !strings.Contains(q.Get("scope"), "openid") {
		p.t.Fatalf("the authorization request %s: want client magos, response type code, scope openid", authURL)
	}
	code := randomString(16)
	p.mu.Lock()
	p.codes[code] = authorization{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri")}
	p.mu.Unlock()
	cb, _ := url.Parse(q.Get("redirect_uri"))
	cb.RawQuery = url.Values{"code": {code}, "state": {q.Get("state")}}.Encode()
	return cb.String()
}

func (p *fakeProvider) token(w http.ResponseWriter, r *http.Request) {
	if id, secret, ok := r.BasicAuth(); !ok || id != "magos" || secret != "s3cret" {
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	}
	_ = r.ParseForm()
	p.mu.Lock()
	a, ok := p.codes[r.PostForm.Get("code")]
	delete(p.codes, r.PostForm.Get("code"))
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != a.challenge || r.PostForm.Get("redirect_uri") != a.redirect {
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	}
	now := p.now()
	claims := map[string]any{"iss": p.srv.URL, "aud": "magos", "sub": "alice", "nonce": a.nonce,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if p.claims != nil {
		p.claims(claims)
	}
	payload, _ := json.Marshal(claims)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: p.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		p.t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		p.t.Fatal(err)
	}
	raw, _ := obj.CompactSerialize()
	p.mu.Lock()
	p.issued = append(p.issued, raw)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "access-" + randomString(8), "token_type": "Bearer", "id_token": raw, "expires_in": 3600})
}

// issuedToken reports whether the provider handed out the ID token.
func (p *fakeProvider) issuedToken(token string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.issued, token)
}

// apiServer stands for the hub's API server's authentication: it accepts the ID tokens the
// provider issued (as a real one accepts those of an issuer its --oidc-* flags trust), unless
// told to refuse them.
type apiServer struct {
	refuse bool
	known  func(token string) bool
}

func (a *apiServer) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	token, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if a.refuse || a.known == nil || !a.known(token) {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: "oidc:alice", Groups: []string{"system:authenticated"}}}, true, nil
}

// oidcFixture is a dashboard Server with OIDC sign-in against a fakeProvider, on a clock the
// test moves.
type oidcFixture struct {
	t    *testing.T
	s    *Server
	p    *fakeProvider
	api  *apiServer
	logs *bytes.Buffer
	mu   sync.Mutex
	now  time.Time
}

func newOIDCFixture(t *testing.T, ttl time.Duration) *oidcFixture {
	f := &oidcFixture{t: t, now: time.Now(), logs: &bytes.Buffer{}}
	f.p = newFakeProvider(t, f.clock)
	f.api = &apiServer{known: f.p.issuedToken}
	s := &Server{opts: Options{Logger: ctrlzap.New(ctrlzap.WriteTo(f.logs), ctrlzap.UseDevMode(true)), Now: f.clock},
		access: &access{authn: f.api}, changes: newNotifier(), addr: make(chan string, 1)}
	var err error
	s.oidc, err = newOIDCLogin(s, OIDCOptions{IssuerURL: f.p.srv.URL, ClientID: "magos", CAFile: f.p.caFile(),
		ClientSecret: func(context.Context) (string, error) { return "s3cret", nil },
		RedirectURL:  "https://magos.example.com/oidc/callback", SessionTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	s.handler = s.routes()
	f.s = s
	return f
}

func (f *oidcFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *oidcFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// do serves one request with the cookies and returns the answer.
func (f *oidcFixture) do(method, target string, cookies ...*http.Cookie) *http.Response {
	req := httptest.NewRequest(method, target, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	w := httptest.NewRecorder()
	f.s.Handler().ServeHTTP(w, req)
	return w.Result()
}

func cookie(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// signIn runs the flow up to the callback's answer: GET /oidc/login, the provider's
// authorization, GET /oidc/callback (with the state the provider returns, or state when set).
func (f *oidcFixture) signIn(state string) *http.Response {
	f.t.Helper()
	res := f.do(http.MethodGet, "/oidc/login")
	flow := cookie(res, oidcFlowCookie)
	if res.StatusCode != http.StatusFound || flow == nil || !flow.HttpOnly || flow.SameSite != http.SameSiteLaxMode {
		f.t.Fatalf("GET /oidc/login: %d, flow cookie %+v; want a redirect and an HttpOnly, SameSite=Lax cookie", res.StatusCode, flow)
	}
	cb, _ := url.Parse(f.p.authorize(res.Header.Get("Location")))
	if state != "" {
		q := cb.Query()
		q.Set("state", state)
		cb.RawQuery = q.Encode()
	}
	return f.do(http.MethodGet, cb.RequestURI(), flow)
}

// TestOIDCCallback: the callback starts a session only for an ID token that verifies (the
// provider's signature, issuer, audience, expiry) and carries the nonce of the sign-in it ends,
// for the browser that started it (state), and only when the hub's API server accepts the
// token. A session lasts until the earlier of the session TTL and the ID token's expiry, and
// sign-out ends it; its requests are served with the ID token, which the answers never carry.
func TestOIDCCallback(t *testing.T) {
	refused := map[string]struct {
		claims func(map[string]any)
		state  string
		status int
	}{
		"another nonce":                  {claims: func(c map[string]any) { c["nonce"] = "not-the-sign-ins" }, status: http.StatusUnauthorized},
		"no nonce":                       {claims: func(c map[string]any) { delete(c, "nonce") }, status: http.StatusUnauthorized},
		"another audience":               {claims: func(c map[string]any) { c["aud"] = "someone-else" }, status: http.StatusUnauthorized},
		"another issuer":                 {claims: func(c map[string]any) { c["iss"] = "https://login.example.com" }, status: http.StatusUnauthorized},
		"an expired token":               {claims: func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }, status: http.StatusUnauthorized},
		"another state":                  {state: "forged", status: http.StatusBadRequest},
		"a token the API server refuses": {status: http.StatusForbidden},
	}
	for name, tc := range refused {
		t.Run("refuses "+name, func(t *testing.T) {
			f := newOIDCFixture(t, time.Hour)
			f.p.claims = tc.claims
			f.api.refuse = name == "a token the API server refuses"
			res := f.signIn(tc.state)
			if res.StatusCode != tc.status || cookie(res, SessionCookie) != nil || f.s.oidc.sessions.len() != 0 {
				t.Fatalf("callback: %d, session cookie %v, %d sessions; want %d and no session", res.StatusCode, cookie(res, SessionCookie), f.s.oidc.sessions.len(), tc.status)
			}
		})
	}

	t.Run("refuses a callback without the flow cookie", func(t *testing.T) {
		f := newOIDCFixture(t, time.Hour)
		res := f.do(http.MethodGet, "/oidc/callback?code=x&state=y")
		if res.StatusCode != http.StatusBadRequest || f.s.oidc.sessions.len() != 0 {
			t.Fatalf("callback without the flow cookie: %d, %d sessions; want 400 and none", res.StatusCode, f.s.oidc.sessions.len())
		}
	})

	// signedIn signs in and returns the session cookie, checking it and that the session's
	// requests are served as the ID token's user.
	signedIn := func(t *testing.T, f *oidcFixture) *http.Cookie {
		t.Helper()
		res := f.signIn("")
		sess := cookie(res, SessionCookie)
		if res.StatusCode != http.StatusOK || sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/" {
			t.Fatalf("callback: %d, session cookie %+v; want 200 and an HttpOnly, SameSite=Strict cookie", res.StatusCode, sess)
		}
		if flow := cookie(res, oidcFlowCookie); flow == nil || flow.MaxAge >= 0 {
			t.Errorf("the callback kept the flow cookie: %+v", flow)
		}
		if got := f.whoami(sess); got != "oidc:alice" {
			t.Fatalf("whoami in the session: %q, want oidc:alice", got)
		}
		return sess
	}

	t.Run("a session ends at the ID token's expiry", func(t *testing.T) {
		f := newOIDCFixture(t, 8*time.Hour) // the ID tokens last an hour
		sess := signedIn(t, f)
		f.advance(59 * time.Minute)
		if got := f.whoami(sess); got != "oidc:alice" {
			t.Fatalf("whoami a minute before the ID token expires: %q", got)
		}
		f.advance(time.Minute)
		if got := f.whoami(sess); got != "" {
			t.Fatalf("whoami once the ID token expired: %q, want 401", got)
		}
	})

	t.Run("a session ends at its TTL", func(t *testing.T) {
		f := newOIDCFixture(t, 10*time.Minute)
		sess := signedIn(t, f)
		f.advance(9 * time.Minute)
		if got := f.whoami(sess); got != "oidc:alice" {
			t.Fatalf("whoami a minute before the TTL: %q", got)
		}
		f.advance(time.Minute)
		if got := f.whoami(sess); got != "" {
			t.Fatalf("whoami at the TTL: %q, want 401", got)
		}
		if n := f.s.oidc.sessions.len(); n != 0 {
			t.Errorf("%d sessions kept after the TTL, want none", n)
		}
	})

	t.Run("sign-out ends the session and its streams", func(t *testing.T) {
		f := newOIDCFixture(t, time.Hour)
		sess := signedIn(t, f)
		// A request of the session that runs until its context ends, as an event stream does.
		ended := make(chan struct{})
		started := make(chan struct{})
		h := f.s.oidc.withSession(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
			close(ended)
		}))
		go func() {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/watch/rollouts", nil)
			req.AddCookie(sess)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
		<-started
		res := f.do(http.MethodPost, "/logout", sess)
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("POST /logout: %d", res.StatusCode)
		}
		if c := cookie(res, SessionCookie); c == nil || c.MaxAge >= 0 {
			t.Errorf("POST /logout kept the session cookie: %+v", c)
		}
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("a request of the session still runs 10s after sign-out")
		}
		if got := f.whoami(sess); got != "" {
			t.Fatalf("whoami with the cookie of a session signed out: %q, want 401", got)
		}
	})

	t.Run("tokens stay out of the logs and the answers", func(t *testing.T) {
		f := newOIDCFixture(t, time.Hour)
		sess := signedIn(t, f)
		res := f.do(http.MethodGet, "/api/v1/whoami", sess)
		var body bytes.Buffer
		_, _ = body.ReadFrom(res.Body)
		f.do(http.MethodPost, "/logout", sess)
		if len(f.p.issued) == 0 {
			t.Fatal("no ID token was issued")
		}
		for _, tok := range f.p.issued {
			if strings.Contains(f.logs.String(), tok) || strings.Contains(body.String(), tok) {
				t.Errorf("an ID token appears in the logs or in whoami's answer")
			}
		}
		if strings.Contains(f.logs.String(), sess.Value) {
			t.Error("the session ID appears in the logs")
		}
		if !strings.Contains(f.logs.String(), "signed in with OIDC") || !strings.Contains(f.logs.String(), "oidc:alice") {
			t.Errorf("the sign-in is not logged with its user:\n%s", f.logs.String())
		}
	})
}

// whoami returns the user GET /api/v1/whoami answers with in the session, or "" when refused.
func (f *oidcFixture) whoami(sess *http.Cookie) string {
	f.t.Helper()
	res := f.do(http.MethodGet, "/api/v1/whoami", sess)
	if res.StatusCode == http.StatusUnauthorized {
		return ""
	}
	var me Whoami
	if err := json.NewDecoder(res.Body).Decode(&me); err != nil || res.StatusCode != http.StatusOK {
		f.t.Fatalf("whoami: %d %v", res.StatusCode, err)
	}
	return me.User
}

// TestAuthMethods: the page learns, without signing in, whether OIDC sign-in is offered and
// under which name.
func TestAuthMethods(t *testing.T) {
	f := newOIDCFixture(t, time.Hour)
	res := f.do(http.MethodGet, "/api/v1/auth-methods")
	var m AuthMethods
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("auth-methods: %d %v", res.StatusCode, err)
	}
	host := strings.TrimPrefix(f.p.srv.URL, "https://")
	if !m.Token || m.OIDC == nil || m.OIDC.Name != host || m.OIDC.LoginURL != "/oidc/login" {
		t.Errorf("auth-methods %+v, want token and OIDC named %s", m, host)
	}
	s := &Server{opts: Options{Now: time.Now}, access: &access{authn: &apiServer{}}, changes: newNotifier()}
	s.handler = s.routes()
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/auth-methods", nil))
	if got := w.Body.String(); strings.Contains(got, "oidc") {
		t.Errorf("auth-methods without OIDC: %s", got)
	}
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/oidc/login", nil))
	if w.Code == http.StatusFound {
		t.Error("GET /oidc/login redirects without OIDC configured")
	}
}
