package hubcontrollers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/testenv"
)

// notifyNamespace holds the Projects whose Rollouts the test's webhooks hear about.
const notifyNamespace = "notify"

// webhooks is a real HTTP server on loopback standing for two receivers the hub's config names:
// /events takes CloudEvents of every type, /chat Slack messages of two types only. It records
// what arrived, in order; the test reads nothing else of the hub's notifications.
type webhooks struct {
	*httptest.Server
	mu     sync.Mutex
	events []cloudEvent
	chat   []string
}

// cloudEvent is what the test reads of a CloudEvent: its type and the Rollout, step and message
// of its data (decoded here, not with the hub's types).
type cloudEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Rollout, Project, Step, Message, Link string
	} `json:"data"`
}

func newWebhooks(t *testing.T) *webhooks {
	wh := &webhooks{}
	wh.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wh.mu.Lock()
		defer wh.mu.Unlock()
		switch r.URL.Path {
		case "/events":
			var ce cloudEvent
			if err := json.Unmarshal(body, &ce); err != nil || r.Header.Get("Content-Type") != "application/cloudevents+json; charset=utf-8" {
				http.Error(w, "not a CloudEvent", http.StatusBadRequest)
				return
			}
			wh.events = append(wh.events, ce)
		case "/chat":
			var m struct{ Text string }
			if err := json.Unmarshal(body, &m); err != nil {
				http.Error(w, "not a Slack message", http.StatusBadRequest)
				return
			}
			wh.chat = append(wh.chat, m.Text)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(wh.Close)
	return wh
}

// config is the notifications section of the hub's config file: the URLs in the Secret
// magos-webhooks of the hub's default namespace (created by the test).
func (wh *webhooks) config() map[string]any {
	secret := func(key string) map[string]any {
		return map[string]any{"namespace": corev1.NamespaceDefault, "name": "magos-webhooks", "key": key}
	}
	return map[string]any{
		"dashboardUrl": "https://magos.example.com",
		"webhooks": []any{
			map[string]any{"name": "events", "urlSecretRef": secret("events"), "projects": []any{notifyNamespace + "/*"}},
			map[string]any{"name": "chat", "format": "slack", "urlSecretRef": secret("chat"),
				"projects": []any{notifyNamespace + "/*"}, "events": []any{"StepAwaitingApproval", "RolloutFailed"}},
		},
	}
}

// of returns the CloudEvents about Rollout name, as "type step" lines.
func (wh *webhooks) of(name string) []string {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	var out []string
	for _, ce := range wh.events {
		if ce.Data.Rollout == name {
			out = append(out, strings.TrimPrefix(ce.Type, "io.magosproject.rollout.")+" "+ce.Data.Step)
		}
	}
	return out
}

// notifications: a Rollout of three steps, the second awaiting approval, and a Rollout whose one
// step fails, tell the configured webhooks what happened, in order, once each. The hub runs as
// magos-hub does (the real binary, its config file); every run is real tofu on the spokes.
func (w *world) notifications(t *testing.T, wh *webhooks) {
	ns := notifyNamespace
	w.Namespace(t, ns)
	w.CreateHub(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: "magos-webhooks"},
		StringData: map[string]string{"events": wh.URL + "/events", "chat": wh.URL + "/chat"}})

	w.Workspace(t, usEast, ns, "app-dev", "shop", map[string]string{"env": "dev"})
	w.Workspace(t, euWest, ns, "app-staging", "shop", map[string]string{"env": "staging"})
	w.Workspace(t, apSouth, ns, "app-prod", "shop", map[string]string{"env": "prod"})
	w.Workspace(t, apSouth, ns, "broken", "broken", map[string]string{"env": "prod"})
	w.FailNext(t, apSouth, ns, "broken")
	w.WaitMirrored(t, key(usEast, ns, "app-dev"), key(euWest, ns, "app-staging"), key(apSouth, ns, "app-prod"), key(apSouth, ns, "broken"))

	shop := envRollout(ns, "shop")
	shop.Spec.Strategy.Steps[1].RequireApproval = true
	w.CreateHub(t, shop)
	w.CreateHub(t, hubtest.Rollout(ns, "broken", []string{"prod"}, map[string]string{"env": "prod"}))

	w.WaitRollout(t, ns, "shop", phase(magosv1.PhaseReconciling, magosv1.ReasonAwaitingApproval))
	w.magosctl(t, "rollout", "approve", "shop", "--step", "staging", "-n", ns)
	w.WaitRollout(t, ns, "shop", Completed)
	w.WaitRollout(t, ns, "broken", phase(magosv1.PhaseFailed, magosv1.ReasonStepFailed))

	wantShop := []string{
		"StepStarted dev", "StepCompleted dev",
		"StepStarted staging", "StepAwaitingApproval staging", "StepApproved staging", "StepCompleted staging",
		"StepStarted prod", "StepCompleted prod", "RolloutCompleted ",
	}
	wantBroken := []string{"StepStarted prod", "RolloutFailed prod"}
	testenv.Eventually(t, wait, func() error {
		if got := wh.of("shop"); !slices.Equal(got, wantShop) {
			return fmt.Errorf("CloudEvents of shop: %q, want %q", got, wantShop)
		}
		if got := wh.of("broken"); !slices.Equal(got, wantBroken) {
			return fmt.Errorf("CloudEvents of broken: %q, want %q", got, wantBroken)
		}
		return nil
	})
	wh.mu.Lock()
	defer wh.mu.Unlock()
	ids := map[string]bool{}
	for _, ce := range wh.events {
		if ids[ce.ID] {
			t.Errorf("CloudEvent %s (%s of %s) arrived twice", ce.ID, ce.Type, ce.Data.Rollout)
		}
		ids[ce.ID] = true
		if ce.Data.Rollout == "broken" && strings.HasSuffix(ce.Type, "RolloutFailed") {
			if !strings.Contains(ce.Data.Message, key(apSouth, ns, "broken")+" (ApplyFailed)") || ce.Data.Project != "broken" ||
				ce.Data.Link != "https://magos.example.com/#/namespaces/notify/rollouts/broken" {
				t.Errorf("the failure's notification %+v does not name the failed Workspace and why, its Project and a link", ce.Data)
			}
		}
	}
	if len(wh.chat) != 2 || !strings.Contains(wh.chat[0], "*StepAwaitingApproval* Rollout notify/shop, step staging") && !strings.Contains(wh.chat[1], "*StepAwaitingApproval* Rollout notify/shop, step staging") ||
		!slices.ContainsFunc(wh.chat, func(s string) bool { return strings.Contains(s, "*RolloutFailed* Rollout notify/broken") }) {
		t.Errorf("the chat webhook got %q, want shop's approval wait and broken's failure only", wh.chat)
	}
}
