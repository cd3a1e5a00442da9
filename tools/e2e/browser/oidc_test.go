package browser

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/dashboard"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/oidcprovider"
)

// OIDC sign-in test fixture: one person at the provider, the dashboard's client, and how long a
// session lasts (short, so that the test sees one end).
const (
	oidcUser       = "alice"
	oidcPassword   = "correct-horse-battery"
	oidcClientID   = "magos-dashboard"
	oidcSessionTTL = 40 * time.Second
)

// TestOIDCSignInInABrowser: a person signs in to the dashboard in a real headless Chromium
// through a real OpenID provider (zitadel/oidc's example provider, built from the Go module
// proxy, over HTTPS with its own login page), and the hub's API server, started with --oidc-*
// flags that trust that provider, decides what they see with Kubernetes RBAC on the ID token's
// user and groups: they list the Rollouts of the namespaces RoleBindings let them read, one
// bound to the user and one to a group of the ID token's groups claim, and not the other's. Signing out shows the sign-in again and the old session cookie is refused; a session
// ends at its TTL, and the open page then asks to sign in again without being reloaded. No
// token the provider issued appears in a URL the browser requested or navigated to, in the
// hub's log, or in what the page's script can read. Screenshots of the provider's login page
// and of the signed-in dashboard go to the test artifacts (MAGOS_ARTIFACTS_DIR).
func TestOIDCSignInInABrowser(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	dashAddr := testenv.FreeAddress(t)
	dashURL := "https://" + dashAddr

	// The provider, then the hub's API server trusting it.
	clientSecret := "s3cret-" + randomHex(t)
	provider, err := oidcprovider.Start(oidcprovider.Options{Dir: dir, ClientID: oidcClientID, ClientSecret: clientSecret,
		RedirectURIs: []string{dashURL + "/oidc/callback"},
		Users:        []oidcprovider.User{{ID: oidcUser, Username: oidcUser, Password: oidcPassword, Email: "alice@example.com", Groups: []string{"sre"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := provider.Stop(); err != nil {
			t.Errorf("stopping the OIDC provider: %v", err)
		}
	})
	start := time.Now()
	env := testenv.Start(t, localcluster.Options{APIServerFlags: map[string]string{
		"oidc-issuer-url":      provider.Issuer,
		"oidc-client-id":       oidcClientID,
		"oidc-ca-file":         provider.CAFile,
		"oidc-username-claim":  "sub",
		"oidc-username-prefix": "oidc:",
		"oidc-groups-claim":    "groups",
		"oidc-groups-prefix":   "oidc:",
	}})
	t.Logf("the hub's API server, trusting %s, started in %s", provider.Issuer, time.Since(start).Round(time.Millisecond))
	admin := env.Hub.Client
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "magos-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-c"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "magos-system", Name: "magos-dashboard-oidc"},
			StringData: map[string]string{registry.DefaultOIDCClientSecretKey: clientSecret}},
		hubtest.Rollout("team-a", "web", []string{"all"}, map[string]string{"tier": "web"}),
		hubtest.Rollout("team-b", "db", []string{"all"}, map[string]string{"tier": "db"}),
		hubtest.Rollout("team-c", "api", []string{"all"}, map[string]string{"tier": "api"}),
		// The person may read Rollouts in team-a only.
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rollout-viewer"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{magosv1.GroupVersion.Group}, Resources: []string{"rollouts"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice-views-rollouts"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rollout-viewer"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "oidc:" + oidcUser}}},
		// ... and in team-c through a group the ID token names.
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: "sre-views-rollouts"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rollout-viewer"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "oidc:sre"}}},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}

	// The hub, its dashboard on HTTPS, every log line it writes (debug and up, klog's too) kept.
	certFile, keyFile := dashboardCertificate(t, dir)
	config := filepath.Join(dir, "hub.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `clusters: []
dashboard:
  bindAddress: %s
  certFile: %s
  keyFile: %s
  oidc:
    issuerURL: %s
    clientID: %s
    clientSecretRef: {namespace: magos-system, name: magos-dashboard-oidc}
    caFile: %s
    redirectURL: %s/oidc/callback
    sessionTTL: %s
    displayName: the test provider
`, dashAddr, certFile, keyFile, provider.Issuer, oidcClientID, provider.CAFile, dashURL, oidcSessionTTL), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.LoadConfig(config, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	var hubLog testenv.Buffer
	log := ctrlzap.New(ctrlzap.WriteTo(&hubLog), ctrlzap.Level(zapcore.Level(-10)))
	ctrl.SetLogger(log)
	klog.SetLogger(log.WithName("klog"))
	t.Cleanup(klog.ClearLogger)
	hub, err := app.New(app.Options{RestConfig: env.Hub.Config, Config: cfg, ConfigFile: config, Logger: log,
		SkipNameValidation: true, WithoutDecisionControllers: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.Background(t, ctx, "the hub", hub.Manager.Start))
	if _, err := hub.Dashboard.Addr(ctx); err != nil {
		t.Fatal(err)
	}

	// Chromium, recording every URL it requests and every URL a frame navigates to.
	var (
		urlsMu sync.Mutex
		urls   []string
	)
	record := func(ev any) {
		urlsMu.Lock()
		defer urlsMu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			urls = append(urls, e.Request.URL+e.Request.URLFragment)
		case *page.EventFrameNavigated:
			urls = append(urls, e.Frame.URL+e.Frame.URLFragment)
		}
	}
	browser := newBrowser(t, ctx, browserOptions{Height: 720,
		// The provider's and the dashboard's certificates are the test's own.
		Allocator: []chromedp.ExecAllocatorOption{chromedp.Flag("ignore-certificate-errors", true)},
		Context:   []chromedp.ContextOption{chromedp.WithListener(record)}})

	// Sign in: the dashboard's button, the provider's own login page, back on the dashboard.
	signIn := func(screenshot bool) (submitted time.Time) {
		t.Helper()
		steps(t, browser, "opening the dashboard", chromedp.Navigate(dashURL), chromedp.WaitVisible(chromedp.CSS("#oidc-login")))
		if screenshot {
			shot, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
			if err != nil {
				t.Fatal(err)
			}
			saveArtifact(t, "dashboard-oidc-sign-in.png", shot)
		}
		steps(t, browser, "clicking the OIDC sign-in",
			chromedp.Click(chromedp.CSS("#oidc-login")),
			chromedp.WaitVisible(chromedp.CSS("input#username")))
		if loc, err := chromedp.Run(browser, chromedp.Location()); err != nil || !strings.HasPrefix(loc, provider.Issuer) {
			t.Fatalf("the login page is at %q (%v), want the provider's %s", loc, err, provider.Issuer)
		}
		steps(t, browser, "typing the username and password",
			chromedp.SendKeys(chromedp.CSS("input#username"), oidcUser),
			chromedp.SendKeys(chromedp.CSS("input#password"), oidcPassword))
		if screenshot {
			shot, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
			if err != nil {
				t.Fatal(err)
			}
			saveArtifact(t, "dashboard-oidc-provider-login.png", shot)
		}
		submitted = time.Now()
		steps(t, browser, "submitting the provider's login form and returning to the dashboard",
			chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#rollouts")))
		return submitted
	}
	pageText := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(browser, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("reading the page (%s): %v", js, err)
		}
		return v
	}
	sessionCookie := func() string {
		t.Helper()
		cookies, err := chromedp.Run(browser, chromedp.Action[[]*network.Cookie](func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
			res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{dashURL + "/"}})
			return res.Cookies, err
		}))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cookies {
			if c.Name == dashboard.SessionCookie {
				if !c.HTTPOnly || !c.Secure || c.SameSite != network.CookieSameSiteStrict {
					t.Errorf("the session cookie is httpOnly=%v secure=%v sameSite=%v, want HttpOnly, Secure and SameSite=Strict", c.HTTPOnly, c.Secure, c.SameSite)
				}
				return c.Value
			}
		}
		t.Fatalf("no %s cookie after signing in (cookies: %d)", dashboard.SessionCookie, len(cookies))
		return ""
	}
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own certificate
	whoami := func(cookie string) (int, dashboard.Whoami) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dashURL+"/api/v1/whoami", nil)
		req.AddCookie(&http.Cookie{Name: dashboard.SessionCookie, Value: cookie})
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var me dashboard.Whoami
		_ = json.NewDecoder(res.Body).Decode(&me)
		return res.StatusCode, me
	}

	signIn(true)
	testenv.Eventually(t, 30*time.Second, func() error {
		if who := pageText(`document.getElementById('whoami').textContent`); who != "oidc:"+oidcUser {
			return fmt.Errorf("the page shows %q as the signed-in user, want oidc:%s", who, oidcUser)
		}
		return nil
	})
	// RBAC decides on the ID token's user and groups: team-a's Rollout (the user's binding) and
	// team-c's (the group's), not team-b's.
	steps(t, browser, "waiting for the Rollouts the person may list",
		chromedp.WaitVisible(chromedp.CSS(`#rollout-rows tr[data-rollout="team-a/web"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#rollout-rows tr[data-rollout="team-c/api"]`)))
	if rows := pageText(`JSON.stringify([...document.querySelectorAll('#rollout-rows tr')].map(r => r.dataset.rollout))`); rows != `["team-a/web","team-c/api"]` {
		t.Errorf("the page lists the Rollouts %s, want team-a/web and team-c/api (RBAC lets oidc:%s read team-a, and the group oidc:sre team-c)", rows, oidcUser)
	}
	shot, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	saveArtifact(t, "dashboard-oidc-signed-in.png", shot)
	// The page's script sees no cookie of the session, nor any token.
	if c := pageText(`document.cookie`); c != "" {
		t.Errorf("the page's script can read the cookies %q", c)
	}
	first := sessionCookie()
	if status, me := whoami(first); status != http.StatusOK || me.User != "oidc:"+oidcUser || !slices.Contains(me.Groups, "oidc:sre") {
		t.Fatalf("whoami with the session cookie: %d %+v, want 200 oidc:%s in the group oidc:sre", status, me, oidcUser)
	}

	// Sign out: the page asks to sign in again, and the old cookie is refused.
	steps(t, browser, "signing out",
		chromedp.Click(chromedp.CSS("#logout")),
		chromedp.WaitVisible(chromedp.CSS("#oidc-login")))
	if status, _ := whoami(first); status != http.StatusUnauthorized {
		t.Errorf("whoami with the cookie of the session signed out: %d, want 401", status)
	}

	// A session ends at its TTL: sign in again and leave the page open on the Rollouts.
	submitted := signIn(false)
	second := sessionCookie()
	if second == first {
		t.Error("the second sign-in got the first session's ID")
	}
	var ended time.Time
	testenv.Eventually(t, oidcSessionTTL+time.Minute, func() error {
		status, _ := whoami(second)
		if status == http.StatusOK {
			return fmt.Errorf("the session still serves %s after it started", time.Since(submitted).Round(time.Second))
		}
		ended = time.Now()
		if status != http.StatusUnauthorized {
			t.Fatalf("whoami in the session: %d, want 200 and then 401", status)
		}
		return nil
	})
	lasted := ended.Sub(submitted)
	t.Logf("the session ended %s after the login form was submitted (sessionTTL %s)", lasted.Round(100*time.Millisecond), oidcSessionTTL)
	if lasted < oidcSessionTTL {
		t.Errorf("the session ended %s after the sign-in, before its TTL %s", lasted, oidcSessionTTL)
	}
	// The open page notices (its live stream ends with the session) and asks to sign in again.
	steps(t, browser, "waiting for the open page to ask to sign in again", chromedp.WaitVisible(chromedp.CSS("#oidc-login")))
	t.Logf("the open page showed the sign-in again %s after the session ended", time.Since(ended).Round(100*time.Millisecond))

	// No token issued by the provider in a URL the browser asked for, nor in the hub's log.
	issued := provider.Issued()
	if len(issued) < 2 {
		t.Fatalf("the provider issued %d tokens, want an ID and an access token per sign-in", len(issued))
	}
	urlsMu.Lock()
	visited := slices.Clone(urls)
	urlsMu.Unlock()
	callbacks := map[string]bool{}
	for _, u := range visited {
		if strings.HasPrefix(u, dashURL+"/oidc/callback?") {
			callbacks[u] = true
		}
		for _, tok := range issued {
			if strings.Contains(u, tok) {
				t.Errorf("a token the provider issued is in the URL %.120s...", u)
			}
		}
		if strings.Contains(u, "id_token=") || strings.Contains(u, "access_token=") {
			t.Errorf("the URL %.120s... carries a token parameter", u)
		}
	}
	if len(callbacks) != 2 || len(visited) < 10 {
		t.Errorf("recorded %d URLs with %d callbacks, want every request of two sign-ins", len(visited), len(callbacks))
	}
	logged := hubLog.String()
	for _, tok := range append(issued, first, second) {
		if strings.Contains(logged, tok) {
			t.Errorf("the hub logged a token or a session ID")
		}
	}
	if !strings.Contains(logged, "signed in with OIDC") || !strings.Contains(logged, "oidc:"+oidcUser) {
		t.Errorf("the hub's log does not record the sign-in of oidc:%s (%d bytes of log)", oidcUser, len(logged))
	}
	t.Logf("looked for %d tokens in %d URLs requested or navigated to and in %d lines of hub log",
		len(issued), len(visited), strings.Count(logged, "\n"))
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// dashboardCertificate writes a self-signed certificate and key for 127.0.0.1 into dir, for the
// dashboard to serve HTTPS with.
func dashboardCertificate(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "magos dashboard"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "dashboard.crt"), filepath.Join(dir, "dashboard.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
