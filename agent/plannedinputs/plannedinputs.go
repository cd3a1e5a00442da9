// Package plannedinputs computes status.plannedInputs, the digest of what a run's plan was made
// from, which the apply must match (the apply runs exactly what was planned).
//
// The inputs include the values of sensitive literals, and the Workspace status is mirrored to
// the hub, so the digest is keyed: an HMAC-SHA256 under the agent's key. Without the key it says
// nothing about the inputs (no offline guessing of a weak secret from a mirror); with it, plan
// and apply of one run compute the same digest, and any change of any input changes it.
//
// The key is random (KeySize bytes), kept in a Secret of the agent's own namespace so that it
// survives agent restarts and is shared by the replicas (Keys). It is never written to a
// status, an Event, a log or a mirror.
package plannedinputs

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/pkg/runner"
)

// KeySize is the size in bytes of the keys the agent makes, and the least it accepts.
const KeySize = 32

// SecretKey is the key of the Secret's data that holds the digest key.
const SecretKey = "key"

// DigestLength is the number of hex characters of a digest.
const DigestLength = 12

// Digest is the digest of what a plan or apply of run runs, under key (at least KeySize
// bytes): HMAC-SHA256 of the run's identity (namespace, name, run ID) and inputs (repository,
// commit, path, tfvarsPath, binary, version, and the variables and environment: literal values,
// sensitive ones included, and Secret and ConfigMap values by reference; git credentials left
// out), its first DigestLength hex characters. The plan and the apply of one run have the same
// digest exactly when they have the same inputs; the run ID makes digests of different runs
// unrelated even when their inputs are the same.
func Digest(key []byte, run *execution.Run) string {
	env := make([]corev1.EnvVar, 0, len(run.Env))
	for _, e := range run.Env {
		switch e.Name {
		case runner.EnvGitUsername, runner.EnvGitPassword, runner.EnvGitSSHPrivateKey, runner.EnvGitSSHKnownHosts:
			continue
		}
		env = append(env, e)
	}
	s := run.Spec
	raw, _ := json.Marshal(struct {
		Namespace, Name, RunID                               string
		RepoURL, Revision, Path, TfvarsPath, Binary, Version string
		Env                                                  []corev1.EnvVar
	}{s.Namespace, s.Name, s.RunID,
		s.RepoURL, strings.ToLower(s.Revision), s.Path, s.TfvarsPath, s.Binary, strings.TrimPrefix(s.Version, "v"), env})
	mac := hmac.New(sha256.New, key)
	mac.Write(raw)
	return hex.EncodeToString(mac.Sum(nil))[:DigestLength]
}

// PlanDigest is status.planDigest: the digest of a plan of the Workspace namespace/name whose
// JSON rendering has the SHA-256 planSHA256 (runner.Result.PlanSHA256), under key, its first
// DigestLength hex characters. Plans that would apply the same changes in the same Workspace
// have the same digest, whichever run made them; without the key it says nothing of the plan.
func PlanDigest(key []byte, namespace, name, planSHA256 string) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "plan\x00%s\x00%s\x00%s", namespace, name, planSHA256)
	return hex.EncodeToString(mac.Sum(nil))[:DigestLength]
}

// NewKey returns a random key of KeySize bytes.
func NewKey() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making a key for the digest of planned inputs: %w", err)
	}
	return key, nil
}

// Keys provides the agent's digest key, from the Secret it is kept in.
type Keys struct {
	secret types.NamespacedName
	reader client.Reader
	writer client.Writer

	mu  sync.Mutex
	key []byte
}

// NewKeys returns the agent's keys kept in secret (SecretKey of its data), read with reader
// (the API server: Secrets are not cached by the agent) and written with writer. With an empty
// secret the key is random and kept in memory only: a run planned before an agent restart is
// then abandoned at its apply and planned again.
func NewKeys(secret types.NamespacedName, reader client.Reader, writer client.Writer) (*Keys, error) {
	k := &Keys{secret: secret, reader: reader, writer: writer}
	if secret.Name == "" || secret.Namespace == "" {
		k.secret = types.NamespacedName{}
		key, err := NewKey()
		if err != nil {
			return nil, err
		}
		k.key = key
	}
	return k, nil
}

// Kept reports whether the key is kept in a Secret (else it lives as long as the process).
func (k *Keys) Kept() bool { return k.secret.Name != "" }

// Secret is the Secret the key is kept in (empty when it is not kept).
func (k *Keys) Secret() types.NamespacedName { return k.secret }

// Key returns the key. The first call reads it from the Secret; when the Secret has none, it
// writes a new random one there (updating the Secret the magos-agent chart creates empty, or
// creating the Secret when it does not exist), and the replica that writes first wins. Errors
// name the Secret, never the key.
func (k *Keys) Key(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	key, err := k.load(ctx)
	if err != nil {
		return nil, err
	}
	k.key = key
	return key, nil
}

// load reads the key from the Secret, or writes a new one there; a write that loses a race
// with another replica reads the winner's.
func (k *Keys) load(ctx context.Context) ([]byte, error) {
	for range 5 {
		s := &corev1.Secret{}
		err := k.reader.Get(ctx, k.secret, s)
		switch {
		case apierrors.IsNotFound(err):
			fresh, err := NewKey()
			if err != nil {
				return nil, err
			}
			s = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: k.secret.Namespace, Name: k.secret.Name},
				Type:       corev1.SecretTypeOpaque,
				Data:       map[string][]byte{SecretKey: fresh},
			}
			err = k.writer.Create(ctx, s)
			switch {
			case err == nil:
				return fresh, nil
			case apierrors.IsAlreadyExists(err):
				continue
			}
			return nil, fmt.Errorf("creating Secret %s for the key of planned inputs: %w", k.secret, err)
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s, the key of planned inputs: %w", k.secret, err)
		}
		switch key := s.Data[SecretKey]; {
		case len(key) >= KeySize:
			return key, nil
		case len(key) > 0:
			return nil, fmt.Errorf("the key of planned inputs in Secret %s (%q) has %d bytes, want at least %d: remove it and the agent writes a new one",
				k.secret, SecretKey, len(key), KeySize)
		}
		fresh, err := NewKey()
		if err != nil {
			return nil, err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[SecretKey] = fresh
		// The update carries the resourceVersion read: a replica that wrote meanwhile wins.
		err = k.writer.Update(ctx, s)
		switch {
		case err == nil:
			return fresh, nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue
		}
		return nil, fmt.Errorf("writing the key of planned inputs to Secret %s: %w", k.secret, err)
	}
	return nil, fmt.Errorf("writing the key of planned inputs to Secret %s: it kept changing", k.secret)
}
