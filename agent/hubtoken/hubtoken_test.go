package hubtoken_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/hubtoken"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// One API server is both the hub (the agent's namespace, ServiceAccount and Role, as the hub's
// registry makes them) and the spoke (the token Secret).
var api *localcluster.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.MainOptions{Setup: func(e *testenv.MainEnv) error {
		api = e.Fleet.Hub
		return nil
	}})
}

// agent is an agent's access to the test hub: its namespace there, with the ServiceAccount, Role
// and RoleBinding the hub's registry creates, and a bootstrap kubeconfig.
type agent struct {
	namespace string
	bootstrap *rest.Config
	secret    types.NamespacedName
}

func newAgent(t *testing.T, name string) agent {
	t.Helper()
	ctx := context.Background()
	ns := "magos-cluster-" + name
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentServiceAccount}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentServiceAccount}, Rules: mirror.AgentRules()},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: keys.AgentServiceAccount},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: keys.AgentServiceAccount},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: keys.AgentServiceAccount}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + name}},
		// What the magos-agent chart installs: the token Secret, empty.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "agent-" + name, Name: "hub-token"}},
	} {
		if err := api.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := kubernetes.NewForConfigOrDie(api.Config).CoreV1().ServiceAccounts(ns).CreateToken(ctx, keys.AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boot := rest.AnonymousClientConfig(api.Config)
	boot.BearerToken = tr.Status.Token
	return agent{namespace: ns, bootstrap: boot, secret: types.NamespacedName{Namespace: "agent-" + name, Name: "hub-token"}}
}

// renewer returns a Renewer for a, on the fake clock, with fault asked before each TokenRequest,
// recording its Events; Start it with start.
func (a agent) renewer(t *testing.T, clock *clocktesting.FakeClock, bootstrapFile string, fault func() error) *hubtoken.Renewer {
	t.Helper()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kubernetes.NewForConfigOrDie(api.Config).EventsV1()})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	broadcaster.StartRecordingToSink(stop)
	opts := hubtoken.Options{
		Namespace: a.namespace, Bootstrap: a.bootstrap, BootstrapFile: bootstrapFile, Expiry: hubtoken.MinExpiry,
		Secret: a.secret, Spoke: api.Client, Recorder: broadcaster.NewRecorder(clientgoscheme.Scheme, "magos-agent"), Clock: clock,
	}
	hubtoken.WithRequestFault(&opts, fault)
	r, err := hubtoken.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs r.Start until the test ends.
func start(t *testing.T, r *hubtoken.Renewer) {
	t.Helper()
	testenv.Background(t, context.Background(), "the token renewer", r.Start) // it never fails
}

// kept waits until the Secret keeps a token other than not.
func (a agent) kept(t *testing.T, not string) hubtoken.Kept {
	t.Helper()
	var k hubtoken.Kept
	testenv.Eventually(t, 30*time.Second, func() error {
		kept, ok, err := hubtoken.ReadKept(context.Background(), api.Client, a.secret)
		if err != nil {
			return err
		}
		if !ok || kept.Token == not {
			return errors.New("no new token kept yet")
		}
		k = kept
		return nil
	})
	return k
}

// idle waits until the renewal loop waits on the fake clock.
func idle(t *testing.T, clock *clocktesting.FakeClock) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if !clock.HasWaiters() {
			return errors.New("the renewal loop is not waiting")
		}
		return nil
	})
}

// warnings returns the reasons of the Warning Events on the Secret.
func (a agent) warnings(t *testing.T) map[string]string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := api.Client.List(context.Background(), list, client.InNamespace(a.secret.Namespace)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "Secret" && e.Regarding.Name == a.secret.Name {
			out[e.Reason] = e.Note
		}
	}
	return out
}

// authenticatesAs checks that token authenticates on the hub as the agent's ServiceAccount.
func (a agent) authenticatesAs(t *testing.T, token string) {
	t.Helper()
	cfg := rest.AnonymousClientConfig(api.Config)
	cfg.BearerToken = token
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the kept token: %v", err)
	}
	if want := "system:serviceaccount:" + a.namespace + ":" + keys.AgentServiceAccount; review.Status.UserInfo.Username != want {
		t.Fatalf("the kept token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
}

// TestRenewsAtAboutEightyPercentOfTheLifetime: the Renewer renews when loaded, keeps the token,
// does not renew again before 75% of its lifetime and does after 85% of it, on a fake clock.
func TestRenewsAtAboutEightyPercentOfTheLifetime(t *testing.T) {
	a := newAgent(t, "schedule")
	clock := clocktesting.NewFakeClock(time.Now())
	var requests atomic.Int32
	r := a.renewer(t, clock, "", func() error { requests.Add(1); return nil })
	r.Load(context.Background())
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d token requests when loaded, want 1", n)
	}
	start(t, r)
	first := a.kept(t, "")
	a.authenticatesAs(t, first.Token)
	if got := hubtoken.ExpiryTimestamp(); got != float64(first.Expiry.Unix()) {
		t.Errorf("expiry metric %v, want %d", got, first.Expiry.Unix())
	}
	life := first.Expiry.Sub(first.Issued)
	if life < hubtoken.MinExpiry-time.Minute || life > hubtoken.MinExpiry+time.Minute {
		t.Fatalf("token lifetime %s, want about %s", life, hubtoken.MinExpiry)
	}

	idle(t, clock)
	clock.Step(life * 74 / 100)
	testenv.Consistently(t, time.Second, func() error {
		if n := requests.Load(); n != 1 {
			return fmt.Errorf("renewed at 74%% of the lifetime (%d requests)", n)
		}
		return nil
	})
	idle(t, clock)
	clock.Step(life * 12 / 100)
	second := a.kept(t, first.Token)
	if n := requests.Load(); n != 2 {
		t.Errorf("%d token requests at 86%% of the lifetime, want 2", n)
	}
	a.authenticatesAs(t, second.Token)
}

// TestFailingRenewalNearExpiryIsReported: renewals that fail are retried with backoff; a failure
// with more than 10% of the lifetime left is logged only, one within the last 10% also records a
// HubTokenExpiring Warning Event on the token Secret; the next renewal that goes through
// replaces the token.
func TestFailingRenewalNearExpiryIsReported(t *testing.T) {
	a := newAgent(t, "expiring")
	clock := clocktesting.NewFakeClock(time.Now())
	var refuse atomic.Bool
	r := a.renewer(t, clock, "", func() error {
		if refuse.Load() {
			return errors.New("test fault: the hub does not answer")
		}
		return nil
	})
	r.Load(context.Background())
	start(t, r)
	first := a.kept(t, "")
	life := first.Expiry.Sub(first.Issued)

	refuse.Store(true)
	failures := hubtoken.RenewalFailures()
	idle(t, clock)
	clock.Step(life * 86 / 100)
	testenv.Eventually(t, 30*time.Second, func() error {
		if hubtoken.RenewalFailures() <= failures {
			return errors.New("no renewal failed yet")
		}
		return nil
	})
	idle(t, clock)
	testenv.Consistently(t, time.Second, func() error {
		if w := a.warnings(t); len(w) > 0 {
			return fmt.Errorf("Warning Events %v with 14%% of the lifetime left", w)
		}
		return nil
	})

	failures = hubtoken.RenewalFailures()
	clock.Step(life * 6 / 100) // 92%: past the retry's backoff
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := a.warnings(t)[hubtoken.ReasonExpiring]; !ok {
			return fmt.Errorf("no %s Event on the token Secret (Warnings: %v)", hubtoken.ReasonExpiring, a.warnings(t))
		}
		return nil
	})
	if hubtoken.RenewalFailures() <= failures {
		t.Error("the renewal at 92% of the lifetime did not count as failed")
	}
	if got := hubtoken.ExpiryTimestamp(); got != float64(first.Expiry.Unix()) {
		t.Errorf("expiry metric %v, want the token in use's %d", got, first.Expiry.Unix())
	}

	refuse.Store(false)
	idle(t, clock)
	clock.Step(time.Minute) // past any backoff
	a.authenticatesAs(t, a.kept(t, first.Token).Token)
}

// TestRefusedBootstrapTokenIsReportedAndItsReplacementUsed: when the hub refuses the bootstrap
// token (expired, revoked) and nothing else is kept, loading fails with a HubTokenRefused Warning
// Event on the token Secret; once the operator replaces the bootstrap kubeconfig (the mounted
// Secret changes), the next renewal reads the new one and goes through, without a restart.
func TestRefusedBootstrapTokenIsReportedAndItsReplacementUsed(t *testing.T) {
	a := newAgent(t, "refused")
	file := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig := func(token string) {
		t.Helper()
		kc := clientcmdapi.Config{
			Clusters:       map[string]*clientcmdapi.Cluster{"hub": {Server: a.bootstrap.Host, CertificateAuthorityData: a.bootstrap.CAData}},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{"agent": {Token: token}},
			Contexts:       map[string]*clientcmdapi.Context{"hub": {Cluster: "hub", AuthInfo: "agent"}},
			CurrentContext: "hub",
		}
		if err := clientcmd.WriteToFile(kc, file); err != nil {
			t.Fatal(err)
		}
	}
	valid := a.bootstrap.BearerToken
	a.bootstrap.BearerToken = "an-expired-bootstrap-token"
	writeKubeconfig(a.bootstrap.BearerToken)
	clock := clocktesting.NewFakeClock(time.Now())
	r := a.renewer(t, clock, file, nil)
	r.Load(context.Background())
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := a.warnings(t)[hubtoken.ReasonRefused]; !ok {
			return fmt.Errorf("no %s Event on the token Secret (Warnings: %v)", hubtoken.ReasonRefused, a.warnings(t))
		}
		return nil
	})

	writeKubeconfig(valid)
	start(t, r)
	a.authenticatesAs(t, a.kept(t, "").Token)
}

// TestRefusedRequestWakesTheRenewal: when a hub client's request is refused with the token in use
// (client-go's transport calls ResetTokenOlderThan), the Renewer renews at once, without its
// schedule (the fake clock stands still), but not within 10 seconds of the token's adoption.
func TestRefusedRequestWakesTheRenewal(t *testing.T) {
	a := newAgent(t, "nudge")
	clock := clocktesting.NewFakeClock(time.Now())
	var requests atomic.Int32
	r := a.renewer(t, clock, "", func() error { requests.Add(1); return nil })
	r.Load(context.Background())
	start(t, r)
	first := a.kept(t, "")
	idle(t, clock)
	r.ResetTokenOlderThan(time.Now())
	testenv.Consistently(t, time.Second, func() error {
		if n := requests.Load(); n != 1 {
			return fmt.Errorf("renewed on a refusal right after the token was adopted (%d requests)", n)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		r.ResetTokenOlderThan(time.Now())
		if n := requests.Load(); n != 2 {
			return fmt.Errorf("%d token requests, want 2", n)
		}
		return nil
	})
	a.authenticatesAs(t, a.kept(t, first.Token).Token)
}
