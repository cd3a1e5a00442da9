package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/notify"
	"github.com/magosfleet/magos/pkg/config"
	"github.com/magosfleet/magos/pkg/keys"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// receiver is a real HTTP receiver on loopback that records what arrived: each request it took
// (answered 204) and how many it refused. It refuses the first failFirst requests (503), or
// every request when failFirst is negative.
type receiver struct {
	*httptest.Server
	failFirst int

	mu       sync.Mutex
	attempts int
	took     []received
}

// received is one request a receiver took.
type received struct {
	contentType, authorization string
	body                       []byte
}

func newReceiver(t *testing.T, failFirst int) *receiver {
	r := &receiver{failFirst: failFirst}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.attempts++
		if r.failFirst < 0 || r.attempts <= r.failFirst {
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		r.took = append(r.took, received{req.Header.Get("Content-Type"), req.Header.Get("Authorization"), body})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

// cloudEvents returns the CloudEvents the receiver took, as "type rollout step" lines, and their
// IDs.
func (r *receiver) cloudEvents(t *testing.T) (lines, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, got := range r.took {
		var ce struct {
			ID, Type string
			Data     notify.Notification
		}
		if err := json.Unmarshal(got.body, &ce); err != nil {
			t.Fatalf("a CloudEvent that does not parse: %s: %v", got.body, err)
		}
		lines = append(lines, fmt.Sprintf("%s %s %s", strings.TrimPrefix(ce.Type, "io.magosproject.rollout."), ce.Data.Rollout, ce.Data.Step))
		ids = append(ids, ce.ID)
	}
	return lines, ids
}

// slackTexts returns the texts of the Slack messages the receiver took.
func (r *receiver) slackTexts(t *testing.T) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, got := range r.took {
		var m struct{ Text string }
		if err := json.Unmarshal(got.body, &m); err != nil {
			t.Fatalf("a Slack message that does not parse: %s: %v", got.body, err)
		}
		out = append(out, m.Text)
	}
	return out
}

// syncBuffer is a log sink's buffer, written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(line + "\n")
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startNotifier starts a hub manager with the hub's cache (app.CacheOptions: Events of
// Rollouts only) and a Notifier for cfg, logging into logs. It returns the manager's event
// recorder as the Rollout controller's and a stop function.
func startNotifier(t *testing.T, h *dt.Hub, cfg notify.Config, logs *syncBuffer) (events.EventRecorder, func()) {
	t.Helper()
	logger := funcr.New(func(prefix, args string) { logs.add(prefix + " " + args) }, funcr.Options{Verbosity: 1})
	mgr, err := ctrl.NewManager(h.Fleet.Hub.Config, ctrl.Options{
		Scheme: magosscheme.New(), Cache: app.CacheOptions(), Logger: logger,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	n := notify.New(notify.Options{Config: cfg, Cache: mgr.GetCache(), Client: mgr.GetClient(), Secrets: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("magos-hub-notify"), Logger: logger.WithName("notify")})
	if err := mgr.Add(n); err != nil {
		t.Fatal(err)
	}
	stop := testenv.Background(t, context.Background(), "hub manager", mgr.Start)
	return mgr.GetEventRecorder(notify.ReportingController), stop
}

// rolloutEvents returns the notes of the Events of reason on the Rollout name.
func rolloutEvents(t *testing.T, c client.Client, ns, name, reason string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Rollout" && e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// TestNotifier runs the Notifier against a real API server, real Events (recorded by the
// manager's own recorder, as the Rollout controller records them) and real HTTP receivers:
//   - a CloudEvents webhook takes every notification, in the order the Events were recorded,
//     with the Authorization header read from a Secret;
//   - a Slack webhook filtered to one Project and two types, which refuses its first four
//     requests, gets its three in order once it answers, while the first webhook was never held
//     up by it; the failures show in magos_notification_delivery_failures_total and in one
//     NotificationFailed Event;
//   - a webhook that never answers 2xx drops its notification after retryFor, with a
//     NotificationDropped Event and magos_notifications_dropped_total;
//   - a hub that starts again sends nothing twice (deliveries are recorded on the Events);
//   - no log line holds a webhook's URL (its token).
func TestNotifier(t *testing.T) {
	const ns = "payments"
	h := dt.Start(t)
	ctx := context.Background()
	h.Namespace(t, ns)
	h.Namespace(t, "magos-system")

	ok, flaky, dead := newReceiver(t, 0), newReceiver(t, 4), newReceiver(t, -1)
	const token = "s3cr3t-t0ken"
	h.CreateHub(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "magos-system", Name: "hooks"}, StringData: map[string]string{
		"ok": ok.URL + "/hooks/" + token, "flaky": flaky.URL + "/services/" + token, "dead": dead.URL + "/" + token,
		"authorization": "Bearer " + token,
	}})
	ref := func(key string) notify.SecretKeyRef {
		return notify.SecretKeyRef{Namespace: "magos-system", Name: "hooks", Key: key}
	}
	auth := ref("authorization")
	cfg := notify.Config{DashboardURL: "https://magos.example.com", Webhooks: []notify.Webhook{
		{Name: "ok", URLSecretRef: ref("ok"), AuthorizationSecretRef: &auth},
		{Name: "flaky", Format: notify.FormatSlack, URLSecretRef: ref("flaky"),
			Projects: []string{ns + "/web"}, Events: []string{notify.StepStarted, notify.RolloutCompleted}},
		{Name: "dead", URLSecretRef: ref("dead"), Events: []string{notify.RolloutFailed}, RetryFor: 3 * time.Second},
	}}
	var errs config.Errors
	if cfg.Validate("notifications", &errs); errs.Err() != nil {
		t.Fatal(errs.Err())
	}

	web := dt.Rollout(ns, "web", []string{"dev", "prod"}, map[string]string{"env": "dev"}, map[string]string{"env": "prod"})
	api := dt.Rollout(ns, "api", []string{"dev"}, map[string]string{"env": "dev"})
	api.Spec.ProjectRef = "api"
	h.CreateHub(t, web)
	h.CreateHub(t, api)

	var logs syncBuffer
	failedBefore := testenv.MetricSum(t, "magos_notification_delivery_failures_total", map[string]string{"webhook": "flaky"})
	droppedBefore := testenv.MetricSum(t, "magos_notifications_dropped_total", map[string]string{"webhook": "dead"})
	rec, stop := startNotifier(t, h, cfg, &logs)

	// As the Rollout controller records them, one after the other.
	record := []struct {
		ro                         *magosv1.Rollout
		kind, reason, action, note string
	}{
		{web, corev1.EventTypeNormal, "StepChanged", "Step dev", "Step 1/2 dev is current"},
		{web, corev1.EventTypeNormal, "StepCompleted", "Step dev", "Step 1/2 dev completed: 2/2 applied, 0 failed"},
		{web, corev1.EventTypeNormal, "StepChanged", "Step prod", "Step 2/2 prod is current"},
		{web, corev1.EventTypeNormal, "AwaitingApproval", "Step prod", "Step prod awaits approval of 2 plan(s)"},
		{api, corev1.EventTypeNormal, "StepChanged", "Step dev", "Step 1/1 dev is current"},
		{web, corev1.EventTypeNormal, "RolloutCompleted", "Decide", "All steps completed successfully"},
		{api, corev1.EventTypeWarning, "StepFailed", "Step dev", "Step dev failed: payments/app: apply failed"},
		{web, corev1.EventTypeNormal, "Granted", "Grant", "not a notification"},
	}
	for _, r := range record {
		rec.Eventf(r.ro, nil, r.kind, r.reason, r.action, "%s", r.note)
	}
	want := []string{
		"StepStarted web dev", "StepCompleted web dev", "StepStarted web prod", "StepAwaitingApproval web prod",
		"StepStarted api dev", "RolloutCompleted web ", "RolloutFailed api dev",
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if got, _ := ok.cloudEvents(t); !slices.Equal(got, want) {
			return fmt.Errorf("webhook ok took %q, want %q", got, want)
		}
		return nil
	})
	if n := len(flaky.slackTexts(t)); n != 0 {
		t.Errorf("webhook flaky took %d notification(s) within its 15 s of backoff: did it not refuse them?", n)
	}
	for _, got := range ok.took {
		if got.authorization != "Bearer "+token || got.contentType != "application/cloudevents+json; charset=utf-8" {
			t.Errorf("webhook ok got Authorization %q and Content-Type %q", got.authorization, got.contentType)
		}
	}

	wantSlack := []string{
		":large_blue_circle: *StepStarted* Rollout payments/web, step dev: Step 1/2 dev is current <https://magos.example.com/#/namespaces/payments/rollouts/web|Open the Rollout>",
		":large_blue_circle: *StepStarted* Rollout payments/web, step prod: Step 2/2 prod is current <https://magos.example.com/#/namespaces/payments/rollouts/web|Open the Rollout>",
		":white_check_mark: *RolloutCompleted* Rollout payments/web: All steps completed successfully <https://magos.example.com/#/namespaces/payments/rollouts/web|Open the Rollout>",
	}
	testenv.Eventually(t, time.Minute, func() error {
		if got := flaky.slackTexts(t); !slices.Equal(got, wantSlack) {
			return fmt.Errorf("webhook flaky took %q, want %q", got, wantSlack)
		}
		return nil
	})
	if got := testenv.MetricSum(t, "magos_notification_delivery_failures_total", map[string]string{"webhook": "flaky"}) - failedBefore; got != 4 {
		t.Errorf("magos_notification_delivery_failures_total{webhook=flaky} rose by %g, want 4 (the receiver refused 4 requests)", got)
	}
	if notes := rolloutEvents(t, h.Client, ns, "web", notify.EventNotificationFailed); len(notes) != 1 || !strings.Contains(notes[0], "Webhook flaky did not take the StepStarted notification: the receiver answered 503 Service Unavailable") {
		t.Errorf("want one NotificationFailed Event on web for the flaky webhook, got %q", notes)
	}

	testenv.Eventually(t, 30*time.Second, func() error {
		if got := testenv.MetricSum(t, "magos_notifications_dropped_total", map[string]string{"webhook": "dead"}) - droppedBefore; got != 1 {
			return fmt.Errorf("magos_notifications_dropped_total{webhook=dead} rose by %g, want 1", got)
		}
		if notes := rolloutEvents(t, h.Client, ns, "api", notify.EventNotificationDropped); len(notes) != 1 {
			return fmt.Errorf("want one NotificationDropped Event on api, got %q", notes)
		}
		return nil
	})

	// Each delivery is recorded on its Event.
	var list eventsv1.EventList
	if err := h.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, e := range list.Items {
		if e.Annotations[keys.NotifiedPrefix+"ok"] != "" {
			marked++
		}
	}
	if marked != len(want) {
		t.Errorf("%d Events carry %sok, want %d", marked, keys.NotifiedPrefix, len(want))
	}

	// A hub that starts again sends only what is new: the new Event comes after anything the
	// first list would have queued again.
	stop()
	rec, stop = startNotifier(t, h, cfg, &logs)
	defer stop()
	rec.Eventf(web, nil, corev1.EventTypeNormal, "StepChanged", "Step dev", "Step 1/2 dev is current again")
	want = append(want, "StepStarted web dev")
	testenv.Eventually(t, 30*time.Second, func() error {
		got, ids := ok.cloudEvents(t)
		if !slices.Equal(got, want) {
			return fmt.Errorf("webhook ok took %q, want %q", got, want)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
			return fmt.Errorf("webhook ok took an Event twice: %q", ids)
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, func() error {
		if got := len(flaky.slackTexts(t)); got != len(wantSlack)+1 {
			return fmt.Errorf("webhook flaky took %d notifications, want %d", got, len(wantSlack)+1)
		}
		return nil
	})

	if strings.Contains(logs.String(), token) {
		t.Errorf("a log line holds a webhook's token:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "the receiver answered 503") {
		t.Errorf("the logs do not say why a delivery failed:\n%s", logs.String())
	}
	for _, r := range []string{notify.EventNotificationFailed, notify.EventNotificationDropped} {
		for _, name := range []string{"web", "api"} {
			for _, note := range rolloutEvents(t, h.Client, ns, name, r) {
				if strings.Contains(note, token) {
					t.Errorf("Event %s on %s holds a webhook's token: %s", r, name, note)
				}
			}
		}
	}
}
