// Package credentials finds the git credentials of a repository: a Secret in the Workspace's
// namespace labelled magosproject.io/secret-type=repository whose repoURL key equals the
// Workspace's spec.source.repoURL exactly, as upstream Magos defines them.
package credentials

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runner"
)

// SecretTypeLabel marks Secrets that hold git credentials (value SecretTypeRepository).
const SecretTypeLabel = keys.Prefix + "secret-type"

// SecretTypeRepository is the value of SecretTypeLabel on repository credentials.
const SecretTypeRepository = "repository"

// Keys of a repository credentials Secret.
const (
	KeyRepoURL       = "repoURL"
	KeyUsername      = "username"
	KeyPassword      = "password"
	KeySSHPrivateKey = "sshPrivateKey"
	KeySSHKnownHosts = "sshKnownHosts"
)

// Credentials are the git credentials of one repository.
type Credentials struct {
	// SecretName is the Secret they come from.
	SecretName string
	// Auth holds the values, for the agent's own git calls. Never log it.
	Auth gitrepo.Auth

	hasSSH, hasBasic, hasPassword, hasKnownHosts bool
}

// Find returns the credentials for repoURL in namespace, or nil when no Secret matches. When
// several match, the first by name wins. r may be the agent's cache: it holds exactly the
// labelled Secrets.
func Find(ctx context.Context, r client.Reader, namespace, repoURL string) (*Credentials, error) {
	list := &corev1.SecretList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{SecretTypeLabel: SecretTypeRepository}); err != nil {
		return nil, fmt.Errorf("listing repository Secrets in %s: %w", namespace, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	for i := range list.Items {
		s := &list.Items[i]
		if string(s.Data[KeyRepoURL]) != repoURL {
			continue
		}
		c := &Credentials{SecretName: s.Name}
		if key := s.Data[KeySSHPrivateKey]; len(key) > 0 {
			c.hasSSH = true
			c.Auth.SSHPrivateKey = key
			if kh := s.Data[KeySSHKnownHosts]; len(kh) > 0 {
				c.hasKnownHosts = true
				c.Auth.SSHKnownHosts = kh
			}
		} else if user := s.Data[KeyUsername]; len(user) > 0 {
			c.hasBasic = true
			c.Auth.Username = string(user)
			if pw, ok := s.Data[KeyPassword]; ok {
				c.hasPassword = true
				c.Auth.Password = string(pw)
			}
		}
		return c, nil
	}
	return nil, nil
}

// EnvVars returns the runner's git credential variables as references to the Secret: the
// values never leave it. SSH wins over basic auth, as upstream.
func (c *Credentials) EnvVars() []corev1.EnvVar {
	if c == nil {
		return nil
	}
	ref := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.SecretName}, Key: key,
		}}}
	}
	switch {
	case c.hasSSH:
		out := []corev1.EnvVar{ref(runner.EnvGitSSHPrivateKey, KeySSHPrivateKey)}
		if c.hasKnownHosts {
			out = append(out, ref(runner.EnvGitSSHKnownHosts, KeySSHKnownHosts))
		}
		return out
	case c.hasBasic:
		out := []corev1.EnvVar{ref(runner.EnvGitUsername, KeyUsername)}
		if c.hasPassword {
			out = append(out, ref(runner.EnvGitPassword, KeyPassword))
		}
		return out
	}
	return nil
}
