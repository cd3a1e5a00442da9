package gitrepo

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

func newKey(t *testing.T) (ed25519.PrivateKey, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return priv, sshPub
}

func TestAuthMethod(t *testing.T) {
	clientKey, _ := newKey(t)
	block, err := ssh.MarshalPrivateKey(clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(block)
	_, hostKey := newKey(t)
	_, otherKey := newKey(t)
	knownHosts := knownhosts.Line([]string{"git.example.com"}, hostKey) + "\n"
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 22}

	t.Run("anonymous for local files", func(t *testing.T) {
		m, err := Auth{Username: "u", Password: "p", SSHPrivateKey: keyPEM}.method("/srv/repo")
		if err != nil || m != nil {
			t.Fatalf("method = %v, %v; want nil, nil", m, err)
		}
	})
	t.Run("basic auth for https", func(t *testing.T) {
		m, err := Auth{Username: "u", Password: "p"}.method("https://git.example.com/r.git")
		if b, ok := m.(*githttp.BasicAuth); err != nil || !ok || b.Username != "u" || b.Password != "p" {
			t.Fatalf("method = %#v, %v; want basic auth u/p", m, err)
		}
	})
	t.Run("token without user name", func(t *testing.T) {
		m, err := Auth{Password: "token"}.method("https://git.example.com/r.git")
		if b, ok := m.(*githttp.BasicAuth); err != nil || !ok || b.Username != "git" || b.Password != "token" {
			t.Fatalf("method = %#v, %v; want basic auth git/token", m, err)
		}
	})
	t.Run("anonymous https without credentials", func(t *testing.T) {
		m, err := Auth{SSHPrivateKey: keyPEM}.method("https://git.example.com/r.git")
		if err != nil || m != nil {
			t.Fatalf("method = %v, %v; want nil, nil", m, err)
		}
	})
	t.Run("ssh without known hosts accepts any host key", func(t *testing.T) {
		m, err := Auth{SSHPrivateKey: keyPEM}.method("git@git.example.com:org/r.git")
		keys, ok := m.(*gitssh.PublicKeys)
		if err != nil || !ok || keys.User != "git" {
			t.Fatalf("method = %#v, %v; want public keys for user git", m, err)
		}
		if err := keys.HostKeyCallback("git.example.com:22", addr, otherKey); err != nil {
			t.Fatalf("host key rejected without known hosts: %v", err)
		}
	})
	t.Run("ssh with known hosts verifies the host key", func(t *testing.T) {
		m, err := Auth{SSHPrivateKey: keyPEM, SSHKnownHosts: []byte(knownHosts)}.method("ssh://git@git.example.com/org/r.git")
		keys, ok := m.(*gitssh.PublicKeys)
		if err != nil || !ok {
			t.Fatalf("method = %#v, %v; want public keys", m, err)
		}
		if err := keys.HostKeyCallback("git.example.com:22", addr, hostKey); err != nil {
			t.Fatalf("known host key rejected: %v", err)
		}
		if err := keys.HostKeyCallback("git.example.com:22", addr, otherKey); err == nil {
			t.Fatal("unknown host key accepted; want it rejected")
		}
		if len(keys.HostKeyAlgorithms) == 0 || keys.HostKeyAlgorithms[0] != ssh.KeyAlgoED25519 {
			t.Fatalf("HostKeyAlgorithms = %v; want the known host's key type first", keys.HostKeyAlgorithms)
		}
	})
	t.Run("bad private key", func(t *testing.T) {
		_, err := Auth{SSHPrivateKey: []byte("not a key")}.method("ssh://git@git.example.com/r.git")
		if err == nil || !strings.Contains(err.Error(), "reading the SSH private key") {
			t.Fatalf("method error = %v; want a private key error", err)
		}
	})
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:secret@git.example.com/r.git": "https://u:***@git.example.com/r.git",
		"https://git.example.com/r.git":          "https://git.example.com/r.git",
		"/srv/repo":                              "/srv/repo",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q; want %q", in, got, want)
		}
	}
}
