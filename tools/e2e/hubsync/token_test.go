package hubsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/hubtoken"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// The API server grants no TokenRequest shorter than 10 minutes, so these tests do not wait for
// a bootstrap token to expire: they revoke it. A token requested with a boundObjectRef to a
// Secret is valid only while that Secret exists (the API server checks on every request, after
// its 10s cache of successful authentications), so deleting the Secret ends the bootstrap token
// as its expiry would. The agent's renewed tokens are bound to nothing and stay valid.

// revocableBootstrap returns a bootstrap kubeconfig for the cluster's agent (the hub's server and
// CA, as AgentKubeconfig prints them) whose token is bound to a Secret on the hub, and revoke,
// which deletes that Secret and returns once the hub refuses the token.
func revocableBootstrap(t *testing.T, cluster string) (cfg *rest.Config, revoke func()) {
	t.Helper()
	ctx := context.Background()
	ns := mirror.Namespace(cluster)
	binding := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bootstrap-binding-"}}
	if err := env.Hub.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	tr, err := kubernetes.NewForConfigOrDie(env.Hub.Config).CoreV1().ServiceAccounts(ns).CreateToken(ctx, keys.AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(bootstrap[cluster])
	cfg.BearerToken = tr.Status.Token
	boot := hubClient(t, cfg)
	revoke = func() {
		t.Helper()
		if err := env.Hub.Client.Delete(ctx, binding); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			err := boot.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, &coordinationv1.Lease{})
			if apierrors.IsUnauthorized(err) {
				return nil
			}
			return fmt.Errorf("the hub still accepts the revoked bootstrap token (%v)", err)
		})
	}
	// The bootstrap token works until then.
	err = boot.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, &coordinationv1.Lease{})
	if client.IgnoreNotFound(err) != nil {
		t.Fatalf("the bootstrap token before its revocation: %v", err)
	}
	return cfg, revoke
}

func hubClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: env.Hub.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// keptToken waits until the Secret keeps a token other than not, and returns it.
func keptToken(t *testing.T, c client.Client, key types.NamespacedName, not string) hubtoken.Kept {
	t.Helper()
	var k hubtoken.Kept
	testenv.Eventually(t, 60*time.Second, func() error {
		kept, ok, err := hubtoken.ReadKept(context.Background(), c, key)
		if err != nil {
			return err
		}
		if !ok || kept.Token == not {
			return fmt.Errorf("the Secret %s keeps no new token yet", key)
		}
		k = kept
		return nil
	})
	return k
}

// heartbeatAfter waits until the cluster's Lease is renewed after t.
func heartbeatAfter(t *testing.T, cluster string, after time.Time) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		l, err := agentLease(cluster)
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(after) {
			return fmt.Errorf("the Lease was last renewed at %v, not after %s", l.Spec.RenewTime, after.Format(time.RFC3339Nano))
		}
		return nil
	})
}

// TestAgentKeepsWorkingAfterItsBootstrapTokenIsRevoked starts an agent whose bootstrap token is
// then revoked: the agent renewed its token at start, kept it in its spoke Secret, and goes on
// heartbeating and mirroring with it (its hub clients send the renewed token, not the bootstrap
// one, with every request).
func TestAgentKeepsWorkingAfterItsBootstrapTokenIsRevoked(t *testing.T) {
	ctx := context.Background()
	const cluster = "eu-west-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "magos-system")
	ensureNamespace(t, spoke, "revoke-test")
	boot, revoke := revocableBootstrap(t, cluster)
	secret := types.NamespacedName{Namespace: "magos-system", Name: "hub-token-revoke-test"}
	started := time.Now()
	startAgent(t, cluster, agentOptions{heartbeat: 500 * time.Millisecond, lease: 3 * time.Second,
		bootstrap: boot, tokenExpiry: hubtoken.MinExpiry, tokenSecret: secret})

	kept := keptToken(t, spoke, secret, boot.BearerToken)
	if kept.Namespace != mirror.Namespace(cluster) || kept.Server != boot.Host {
		t.Errorf("kept token for %s at %s, want %s at %s", kept.Namespace, kept.Server, mirror.Namespace(cluster), boot.Host)
	}
	if life := kept.Expiry.Sub(kept.Issued); life < hubtoken.MinExpiry-time.Minute || life > hubtoken.MinExpiry+time.Minute {
		t.Errorf("kept token lifetime %s, want the requested %s", life, hubtoken.MinExpiry)
	}
	heartbeatAfter(t, cluster, started)

	revoke()
	revoked := time.Now()
	heartbeatAfter(t, cluster, revoked.Add(time.Second))
	if err := spoke.Create(ctx, newWorkspace("revoke-test", "after")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		_, err := mirrorOf(cluster, "revoke-test", "after")
		return err
	})
	t.Logf("the agent heartbeats and mirrors with its renewed token after its bootstrap token was revoked")
}

// TestRestartedAgentConnectsWithItsKeptToken stops an agent that kept a renewed token, revokes
// its bootstrap token, and starts it again with that same bootstrap kubeconfig: it connects with
// the kept token, heartbeats and keeps a newly renewed token.
func TestRestartedAgentConnectsWithItsKeptToken(t *testing.T) {
	const cluster = "eu-west-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "magos-system")
	boot, revoke := revocableBootstrap(t, cluster)
	secret := types.NamespacedName{Namespace: "magos-system", Name: "hub-token-restart-test"}
	o := agentOptions{heartbeat: 500 * time.Millisecond, lease: 3 * time.Second,
		bootstrap: boot, tokenExpiry: hubtoken.MinExpiry, tokenSecret: secret}
	stop := startAgent(t, cluster, o)
	first := keptToken(t, spoke, secret, boot.BearerToken)
	stop()

	revoke()
	restarted := time.Now()
	startAgent(t, cluster, o)
	heartbeatAfter(t, cluster, restarted)
	// It renewed again at start, with the kept token (the bootstrap one is refused).
	keptToken(t, spoke, secret, first.Token)
}

// TestRefusedKeptTokenFallsBackToTheBootstrapToken starts an agent whose Secret keeps a token
// the hub refuses (as after the ServiceAccount was recreated): the agent falls back to its
// bootstrap token, renews, heartbeats, and keeps the new token.
func TestRefusedKeptTokenFallsBackToTheBootstrapToken(t *testing.T) {
	ctx := context.Background()
	const cluster = "eu-west-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "magos-system")
	secret := types.NamespacedName{Namespace: "magos-system", Name: "hub-token-refused-test"}
	const refused = "not-a-token-the-hub-issued"
	now := time.Now().UTC()
	if err := spoke.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name},
		StringData: map[string]string{
			hubtoken.SecretKeyToken: refused, hubtoken.SecretKeyNamespace: mirror.Namespace(cluster), hubtoken.SecretKeyServer: bootstrap[cluster].Host,
			hubtoken.SecretKeyIssued: now.Format(time.RFC3339), hubtoken.SecretKeyExpiration: now.Add(time.Hour).Format(time.RFC3339),
		},
	}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	startAgent(t, cluster, agentOptions{heartbeat: 500 * time.Millisecond, lease: 3 * time.Second,
		tokenExpiry: hubtoken.MinExpiry, tokenSecret: secret})
	keptToken(t, spoke, secret, refused)
	heartbeatAfter(t, cluster, started)
}
