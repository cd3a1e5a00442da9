// Package oidcprovider serves a real OpenID Provider on this machine, for the dashboard's OIDC
// sign-in test: the example provider of github.com/zitadel/oidc (imported, not copied), with its
// own HTML login page and users read from a file, over HTTPS on loopback with a self-signed
// certificate made at start. Its issuer is https://127.0.0.1:PORT/.
package oidcprovider

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Options configures a Provider.
type Options struct {
	// Dir holds the provider's files: its certificate (CAFile) and its users file.
	Dir string
	// Users are the people who may sign in.
	Users []User
	// ClientID, ClientSecret and RedirectURIs register one web client (the dashboard).
	ClientID, ClientSecret string
	RedirectURIs           []string
}

// User is a person who may sign in, with a username and password on the provider's login page.
// The ID tokens name them by ID (the sub claim) and list their Groups (the groups claim).
type User struct {
	ID, Username, Password, Email string
	Groups                        []string
}

// withGroups is the example provider's storage with a groups claim in the ID tokens of the
// users that have groups (the example storage has none).
type withGroups struct {
	*storage.Storage
	groups map[string][]string // by user ID
}

// SetUserinfoFromRequest fills the claims of an ID token: the example storage's, and groups.
func (s withGroups) SetUserinfoFromRequest(ctx context.Context, userinfo *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, userinfo, token, scopes); err != nil {
		return err
	}
	if g := s.groups[token.GetSubject()]; len(g) > 0 {
		userinfo.AppendClaims("groups", g)
	}
	return nil
}

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is its issuer URL: https://127.0.0.1:PORT/.
	Issuer string
	// CAFile is its certificate (self-signed, for 127.0.0.1), to trust it with.
	CAFile string

	srv    *http.Server
	done   chan error
	mu     sync.Mutex
	issued []string
}

// tokenPath is where the example provider serves its token endpoint.
const tokenPath = "/oauth/token"

// Start starts a Provider on a free loopback port; Stop stops it.
func Start(opts Options) (*Provider, error) {
	if opts.ClientID == "" || len(opts.RedirectURIs) == 0 || len(opts.Users) == 0 {
		return nil, errors.New("oidcprovider: a client ID, a redirect URI and a user are required")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("oidcprovider: %w", err)
	}
	p := &Provider{Issuer: "https://" + ln.Addr().String() + "/", CAFile: filepath.Join(opts.Dir, "oidc-ca.pem"), done: make(chan error, 1)}
	cert, err := selfSigned(p.CAFile)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	users := map[string]map[string]any{}
	for _, u := range opts.Users {
		users[u.ID] = map[string]any{"ID": u.ID, "Username": u.Username, "Password": u.Password, "FirstName": u.Username,
			"LastName": "", "Email": u.Email, "EmailVerified": true, "PreferredLanguage": "en"}
	}
	usersFile := filepath.Join(opts.Dir, "oidc-users.json")
	raw, _ := json.Marshal(users)
	if err := os.WriteFile(usersFile, raw, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("oidcprovider: %w", err)
	}
	store, err := storage.StoreFromFile(usersFile)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("oidcprovider: reading the users file: %w", err)
	}
	clients := map[string]*storage.Client{opts.ClientID: storage.WebClient(opts.ClientID, opts.ClientSecret, opts.RedirectURIs...)}
	groups := map[string][]string{}
	for _, u := range opts.Users {
		groups[u.ID] = u.Groups
	}
	router := exampleop.SetupServer(p.Issuer, withGroups{Storage: storage.NewStorageWithClients(store, clients), groups: groups}, nil, false)
	p.srv = &http.Server{
		Handler:           p.recordTokens(router),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
	}
	go func() { p.done <- p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// Stop stops the provider.
func (p *Provider) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if served := <-p.done; !errors.Is(served, http.ErrServerClosed) {
		err = errors.Join(err, served)
	}
	return err
}

// Issued returns every token the provider's token endpoint handed out so far (ID, access and
// refresh tokens), for a test to look for where they must not be.
func (p *Provider) Issued() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.issued...)
}

// recordTokens keeps the tokens of each answer of the token endpoint.
func (p *Provider) recordTokens(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tokenPath {
			h.ServeHTTP(w, r)
			return
		}
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		var body map[string]any
		if json.Unmarshal(rec.body.Bytes(), &body) != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, k := range []string{"id_token", "access_token", "refresh_token"} {
			if v, ok := body[k].(string); ok && strings.TrimSpace(v) != "" {
				p.issued = append(p.issued, v)
			}
		}
	})
}

// recorder copies what a handler writes.
type recorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// selfSigned makes a self-signed certificate for 127.0.0.1 (its own CA) and writes it to
// caFile.
func selfSigned(caFile string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("oidcprovider: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("oidcprovider: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "magos test OIDC provider"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("oidcprovider: %w", err)
	}
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("oidcprovider: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
