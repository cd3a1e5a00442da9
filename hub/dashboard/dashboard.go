// Package dashboard is the hub's read-only HTTP API and web page: the Rollouts, each Rollout's
// grid of steps by clusters (rolloutgrid), the Workspaces of each cluster and their runs, as
// JSON and as server-sent events, and a page that shows them live. Callers authenticate with a
// Kubernetes token (TokenReview) and see only what RBAC lets them read (SubjectAccessReview):
// the hub reads on their behalf from its own cache, and asks the API server first. A run's
// plan text and log, kept in Secrets the hub may not read, are read with the caller's token.
package dashboard

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

//go:embed static
var static embed.FS

// Options configures a Server.
type Options struct {
	// BindAddress is where the dashboard listens ("127.0.0.1:8443", ":8443").
	BindAddress string
	// CertFile and KeyFile, when both set, serve HTTPS with that certificate (read again on
	// every handshake, so a renewed certificate needs no restart); unset: plain HTTP, for a
	// loopback address or behind a TLS-terminating proxy.
	CertFile, KeyFile string
	// RestConfig reaches the hub's API server, to review callers' tokens and access.
	RestConfig *rest.Config
	// Cache is the hub's cache: Rollouts, Clusters, the mirrors (indexed by
	// fleetview.ProjectIndex) and the Rollouts' Events (for their timelines). The dashboard
	// reads through it and watches it for changes.
	Cache cache.Cache
	// APIReader reads what the cache leaves out (the mirrors' run records).
	APIReader client.Reader
	// Logger logs the requests that fail.
	Logger logr.Logger
	// MinInterval is the least time between two events of one stream (default 200ms).
	MinInterval time.Duration
	// Keepalive is how often a stream with no change sends a comment, so that proxies keep it
	// open, and recomputes what depends on time alone (default 5s).
	Keepalive time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OIDC, when set, also signs people in with an OpenID Connect provider (GET /oidc/login),
	// beside the token sign-in.
	OIDC *OIDCOptions
}

// Server serves the dashboard. It is a controller-runtime Runnable that runs on every hub
// replica, leader or not: it only reads.
type Server struct {
	opts    Options
	access  *access
	changes *notifier
	// mapper maps the kinds the dashboard's actions write (with the caller's token) to their
	// resources; discovery reads with the hub's own credentials.
	mapper meta.RESTMapper
	// oidc is the OIDC sign-in and its sessions (nil without Options.OIDC).
	oidc    *oidcLogin
	handler http.Handler
	// addr holds, once Start listens, the address it listens on (see Addr).
	addr chan string
}

// New builds a Server.
func New(opts Options) (*Server, error) {
	if opts.RestConfig == nil || opts.Cache == nil || opts.APIReader == nil {
		return nil, errors.New("dashboard: Options.RestConfig, Cache and APIReader are required")
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("dashboard: a certificate file needs a key file, and a key file a certificate file")
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = 200 * time.Millisecond
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	a, err := newAccess(opts.RestConfig)
	if err != nil {
		return nil, err
	}
	httpClient, err := rest.HTTPClientFor(opts.RestConfig)
	if err != nil {
		return nil, fmt.Errorf("dashboard: a client of the hub's API server: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(opts.RestConfig, httpClient)
	if err != nil {
		return nil, fmt.Errorf("dashboard: the REST mapper: %w", err)
	}
	s := &Server{opts: opts, access: a, changes: newNotifier(), mapper: mapper, addr: make(chan string, 1)}
	if opts.OIDC != nil {
		if s.oidc, err = newOIDCLogin(s, *opts.OIDC); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is the dashboard's HTTP handler (Start serves it).
func (s *Server) Handler() http.Handler { return s.handler }

// NeedLeaderElection is false: every replica serves the dashboard.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr returns the address the server listens on, once it does.
func (s *Server) Addr(ctx context.Context) (string, error) {
	select {
	case a := <-s.addr:
		s.addr <- a
		return a, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Start watches the cache for changes and serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if err := s.changes.watch(ctx, s.opts.Cache); err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	ln, err := net.Listen("tcp", s.opts.BindAddress)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if s.opts.CertFile != "" {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(s.opts.CertFile, s.opts.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("dashboard: loading the certificate: %w", err)
			}
			return &c, nil
		}}
	}
	s.addr <- ln.Addr().String()
	s.opts.Logger.Info("serving the dashboard", "address", ln.Addr().String(), "tls", s.opts.CertFile != "")
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("dashboard: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	page, _ := fs.Sub(static, "static")
	mux.Handle("GET /", http.FileServerFS(page))
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.signOut)
	mux.HandleFunc("GET /api/v1/auth-methods", s.authMethods)
	if s.oidc != nil {
		mux.HandleFunc("GET /oidc/login", s.oidc.login)
		mux.HandleFunc("GET /oidc/callback", s.oidc.callback)
	}
	mux.HandleFunc("GET /api/v1/whoami", s.authenticated(s.whoami))
	mux.HandleFunc("GET /api/v1/rollouts", s.authenticated(s.json(s.rollouts)))
	mux.HandleFunc("GET /api/v1/watch/rollouts", s.authenticated(s.stream(s.rollouts)))
	mux.HandleFunc("GET /api/v1/namespaces/{namespace}/rollouts/{name}", s.authenticated(s.json(s.grid)))
	mux.HandleFunc("GET /api/v1/watch/namespaces/{namespace}/rollouts/{name}", s.authenticated(s.stream(s.grid)))
	mux.HandleFunc("GET /api/v1/namespaces/{namespace}/rollouts/{name}/timeline", s.authenticated(s.json(s.timeline)))
	mux.HandleFunc("GET /api/v1/watch/namespaces/{namespace}/rollouts/{name}/timeline", s.authenticated(s.stream(s.timeline)))
	mux.HandleFunc("GET /api/v1/fleet", s.authenticated(s.json(s.fleet)))
	mux.HandleFunc("GET /api/v1/watch/fleet", s.authenticated(s.stream(s.fleet)))
	mux.HandleFunc("GET /api/v1/clusters", s.authenticated(s.json(s.clusters)))
	mux.HandleFunc("GET /api/v1/clusters/{cluster}/workspaces", s.authenticated(s.json(s.clusterWorkspaces)))
	mux.HandleFunc("GET /api/v1/clusters/{cluster}/namespaces/{namespace}/workspaces/{name}/runs", s.authenticated(s.json(s.runs)))
	mux.HandleFunc("GET /api/v1/clusters/{cluster}/namespaces/{namespace}/workspaces/{name}/runs/{run}/{operation}", s.authenticated(s.json(s.runOutput)))
	s.actionRoutes(mux)
	if s.oidc != nil {
		return securityHeaders(s.oidc.withSession(mux))
	}
	return securityHeaders(mux)
}

// securityHeaders keeps the page from being framed or sniffed, and its scripts to its own.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
