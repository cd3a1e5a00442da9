// Package gitrepo reads git repositories for Workspaces: it resolves a ref (branch, tag, SHA or
// HEAD) to a commit SHA with one ls-remote, and checks out exactly one commit into a folder.
// It uses go-git; the file transport (file:// URLs and plain local paths) runs the machine's
// git-upload-pack, every other transport (https, ssh) is pure Go.
package gitrepo

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

// Environment variables that carry git credentials (upstream names them the same).
const (
	EnvUsername      = "GIT_USERNAME"
	EnvPassword      = "GIT_PASSWORD"
	EnvSSHPrivateKey = "GIT_SSH_PRIVATE_KEY"
	EnvSSHKnownHosts = "GIT_SSH_KNOWN_HOSTS"
)

// sshUser is the user of every SSH connection, as on every git hosting service.
const sshUser = "git"

// Auth holds the credentials for a repository. The zero value is anonymous access.
//
// SSH URLs use SSHPrivateKey (user "git"). When SSHKnownHosts (known_hosts lines) is given the
// server's host key must match it; when it is empty any host key is accepted, as upstream does,
// which leaves the connection open to a man in the middle: give known hosts in production.
// HTTP(S) URLs use Username and Password (a token goes in Password; without a Username the
// user name is "git") as basic auth. Other URLs (local files) use no credentials.
type Auth struct {
	Username      string
	Password      string
	SSHPrivateKey []byte
	SSHKnownHosts []byte
}

// AuthFromEnv reads Auth from GIT_USERNAME, GIT_PASSWORD, GIT_SSH_PRIVATE_KEY and
// GIT_SSH_KNOWN_HOSTS.
func AuthFromEnv() Auth {
	return Auth{
		Username:      os.Getenv(EnvUsername),
		Password:      os.Getenv(EnvPassword),
		SSHPrivateKey: []byte(os.Getenv(EnvSSHPrivateKey)),
		SSHKnownHosts: []byte(os.Getenv(EnvSSHKnownHosts)),
	}
}

// method returns the go-git auth method for url (nil for anonymous access and local files).
func (a Auth) method(url string) (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return nil, fmt.Errorf("parsing repository URL %q: %w", url, err)
	}
	switch ep.Protocol {
	case "ssh":
		if len(a.SSHPrivateKey) == 0 {
			return nil, nil
		}
		keys, err := gitssh.NewPublicKeys(sshUser, a.SSHPrivateKey, "")
		if err != nil {
			return nil, fmt.Errorf("reading the SSH private key: %w", err)
		}
		if len(a.SSHKnownHosts) == 0 {
			keys.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // upstream-compatible default, documented on Auth
			return keys, nil
		}
		db, err := knownHostsDB(a.SSHKnownHosts)
		if err != nil {
			return nil, err
		}
		port := ep.Port
		if port == 0 {
			port = 22
		}
		keys.HostKeyCallback = db.HostKeyCallback()
		// Offer only the key types known for this host, so the server cannot pick another
		// type and fail the check although a good key is known.
		keys.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, strconv.Itoa(port)))
		return keys, nil
	case "http", "https":
		if a.Username == "" && a.Password == "" {
			return nil, nil
		}
		username := a.Username
		if username == "" {
			// A token alone: hosting services want some user name with it.
			username = sshUser
		}
		return &githttp.BasicAuth{Username: username, Password: a.Password}, nil
	default:
		return nil, nil
	}
}

// knownHostsDB parses known_hosts lines. The parsers read files only, so the lines go through
// a private temporary file that is removed at once.
func knownHostsDB(lines []byte) (*knownhosts.HostKeyDB, error) {
	dir, err := os.MkdirTemp("", "magos-known-hosts-")
	if err != nil {
		return nil, fmt.Errorf("writing known hosts: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(path, lines, 0o600); err != nil {
		return nil, fmt.Errorf("writing known hosts: %w", err)
	}
	db, err := gitssh.NewKnownHostsDb(path)
	if err != nil {
		return nil, fmt.Errorf("parsing known hosts: %w", err)
	}
	return db, nil
}

// redactURL removes a password from a URL for messages.
func redactURL(url string) string {
	ep, err := transport.NewEndpoint(url)
	if err != nil || ep.Password == "" {
		return url
	}
	return strings.Replace(url, ":"+ep.Password+"@", ":***@", 1)
}
