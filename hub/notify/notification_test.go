package notify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/config"
)

// rolloutEvent is an Event as the hub's Rollout controller records it on the Rollout web.
func rolloutEvent(reason, action, note string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{UID: "ev-1", Namespace: "payments", Name: "web.1"},
		EventTime:           metav1.NewMicroTime(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)),
		Regarding:           corev1.ObjectReference{Kind: "Rollout", Namespace: "payments", Name: "web", UID: "ro-1"},
		ReportingController: ReportingController, Reason: reason, Action: action, Note: note, Type: corev1.EventTypeNormal,
	}
}

func TestFromEvent(t *testing.T) {
	ro := &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "web", UID: "ro-1"},
		Spec: magosv1.RolloutSpec{ProjectRef: "shop", Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{{Name: "dev"}, {Name: "prod"}}}},
	}
	for _, tc := range []struct {
		name                                          string
		ev                                            func(*eventsv1.Event)
		ro                                            *magosv1.Rollout
		wantOK                                        bool
		wantType, wantStep, wantProject, wantSeverity string
	}{
		{name: "a step change is StepStarted, its step from the action", ev: func(e *eventsv1.Event) { e.Reason, e.Action = "StepChanged", "Step dev" },
			ro: ro, wantOK: true, wantType: StepStarted, wantStep: "dev", wantProject: "shop", wantSeverity: "info"},
		{name: "a status reason of a step", ev: func(e *eventsv1.Event) { e.Reason, e.Action = "AwaitingApproval", "Step prod" },
			ro: ro, wantOK: true, wantType: StepAwaitingApproval, wantStep: "prod", wantProject: "shop", wantSeverity: "info"},
		{name: "a failure is a warning", ev: func(e *eventsv1.Event) {
			e.Reason, e.Action, e.Type = "StepFailed", "Step prod", corev1.EventTypeWarning
		},
			ro: ro, wantOK: true, wantType: RolloutFailed, wantStep: "prod", wantProject: "shop", wantSeverity: "warning"},
		{name: "an Event of an older hub names no step", ev: func(e *eventsv1.Event) { e.Reason, e.Action = "AwaitingApproval", "Decide" },
			ro: ro, wantOK: true, wantType: StepAwaitingApproval, wantProject: "shop", wantSeverity: "info"},
		{name: "completion names no step", ev: func(e *eventsv1.Event) { e.Reason, e.Action = "RolloutCompleted", "Decide" },
			ro: ro, wantOK: true, wantType: RolloutCompleted, wantProject: "shop", wantSeverity: "info"},
		{name: "a Rollout gone: no Project", ev: func(e *eventsv1.Event) { e.Reason, e.Action = "StepCompleted", "Step dev" },
			wantOK: true, wantType: StepCompleted, wantStep: "dev", wantSeverity: "info"},
		{name: "a Rollout re-created under the same name is another Rollout", ev: func(e *eventsv1.Event) { e.Reason, e.Action, e.Regarding.UID = "StepChanged", "Step dev", "old" },
			ro: ro, wantOK: true, wantType: StepStarted, wantStep: "dev", wantSeverity: "info"},
		{name: "grants are not notified", ev: func(e *eventsv1.Event) { e.Reason = "Granted" }},
		{name: "another controller's Event is not", ev: func(e *eventsv1.Event) { e.Reason, e.ReportingController = "StepChanged", "someone-else" }},
		{name: "the notifier's own Events are not", ev: func(e *eventsv1.Event) { e.Reason, e.ReportingController = EventNotificationFailed, "magos-hub-notify" }},
		{name: "a Workspace's Event is not", ev: func(e *eventsv1.Event) { e.Reason, e.Regarding.Kind = "StepChanged", "Workspace" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := rolloutEvent("", "", "the note")
			tc.ev(ev)
			n, ok := FromEvent(ev, tc.ro, "https://magos.example.com")
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if n.Type != tc.wantType || n.Step != tc.wantStep || n.Project != tc.wantProject || n.Severity != tc.wantSeverity {
				t.Errorf("got type %q step %q project %q severity %q, want %q %q %q %q", n.Type, n.Step, n.Project, n.Severity,
					tc.wantType, tc.wantStep, tc.wantProject, tc.wantSeverity)
			}
			if n.ID != "ev-1" || n.Message != "the note" || n.Namespace != "payments" || n.Rollout != "web" {
				t.Errorf("notification %+v does not carry the Event's identity and note", n)
			}
			if want := "https://magos.example.com/#/namespaces/payments/rollouts/web"; n.Link != want {
				t.Errorf("link %q, want %q", n.Link, want)
			}
		})
	}
}

// TestEveryTypeHasAReason: each notification type comes from some Event reason, and every
// failure reason of a Rollout's status is a failure the Rollout's phase calls failed.
func TestEveryTypeHasAReason(t *testing.T) {
	from := map[string]bool{}
	for _, reason := range allReasons {
		typ, ok := typeOf(reason)
		if !ok {
			continue
		}
		from[typ] = true
		if typ == RolloutFailed && !magosv1.InfoOf(magosv1.PhaseFailed, reason).Failed {
			t.Errorf("reason %s is notified as RolloutFailed, but a Failed Rollout with it is not failed", reason)
		}
	}
	for _, typ := range Types {
		if !from[typ] {
			t.Errorf("notification type %s comes from no Event reason", typ)
		}
	}
}

// allReasons are the reasons of the Events the hub's Rollout controller records.
var allReasons = []string{
	rollout.EventStepChanged, rollout.EventStepCompleted, rollout.EventRevisionChanged, rollout.EventResumed,
	rollout.EventRollbackStarted, fleetview.EventRetryRequested, fleetview.EventGranted, fleetview.EventRevoked,
	magosv1.ReasonNoSteps, magosv1.ReasonNoWorkspacesFound, magosv1.ReasonRolloutCompleted, magosv1.ReasonStepFailed,
	magosv1.ReasonLevelProgressing, magosv1.ReasonWaitingForClusters, magosv1.ReasonPaused, magosv1.ReasonInvalidSelector,
	magosv1.ReasonRollingBack, magosv1.ReasonRolledBack, magosv1.ReasonInvalidVerification, magosv1.ReasonSoaking,
	magosv1.ReasonOutsideChangeWindow, magosv1.ReasonInvalidChangeWindow, magosv1.ReasonProgressDeadlineExceeded,
	magosv1.ReasonFailureTolerated, magosv1.ReasonAwaitingApproval, magosv1.ReasonApproved, magosv1.ReasonApprovalVoided,
	magosv1.ReasonApprovalRejected, magosv1.ReasonPreviewing, magosv1.ReasonPreviewFailed, magosv1.ReasonPlanChanged,
	magosv1.ReasonDriftDetected,
}

func TestBody(t *testing.T) {
	ev := rolloutEvent("StepChanged", "Step <prod>", "Step 2/2 <prod> is current & due")
	n, _ := FromEvent(ev, nil, "https://magos.example.com")

	body, ct, err := Body(FormatCloudEvents, n)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "application/cloudevents+json; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	var ce map[string]any
	if err := json.Unmarshal(body, &ce); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"specversion": "1.0", "id": "ev-1", "type": "io.magosproject.rollout.StepStarted",
		"source": "/apis/magosproject.io/v1alpha1/namespaces/payments/rollouts/web", "subject": "payments/web",
		"time": "2026-12-06T03:00:00Z", "datacontenttype": "application/json",
	} {
		if ce[k] != want {
			t.Errorf("CloudEvent %s = %v, want %q", k, ce[k], want)
		}
	}
	data, _ := ce["data"].(map[string]any)
	if data["step"] != "<prod>" || data["type"] != StepStarted || data["link"] != n.Link {
		t.Errorf("CloudEvent data %v does not carry the notification", data)
	}

	body, ct, err = Body(FormatSlack, n)
	if err != nil {
		t.Fatal(err)
	}
	var slack struct{ Text string }
	if err := json.Unmarshal(body, &slack); err != nil || ct != "application/json" {
		t.Fatalf("slack body %s (%s): %v", body, ct, err)
	}
	want := ":large_blue_circle: *StepStarted* Rollout payments/web, step &lt;prod&gt;: Step 2/2 &lt;prod&gt; is current &amp; due <https://magos.example.com/#/namespaces/payments/rollouts/web|Open the Rollout>"
	if slack.Text != want {
		t.Errorf("slack text\n%s\nwant\n%s", slack.Text, want)
	}
}

func TestConfigValidate(t *testing.T) {
	ref := SecretKeyRef{Namespace: "magos-system", Name: "hooks"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{name: "a webhook with defaults", cfg: Config{Webhooks: []Webhook{{Name: "oncall", URLSecretRef: ref}}}},
		{name: "filters", cfg: Config{DashboardURL: "https://magos.example.com/", Webhooks: []Webhook{{Name: "oncall", Format: "slack", URLSecretRef: ref,
			Projects: []string{"payments/web", "search/*"}, Events: []string{StepAwaitingApproval, RolloutFailed}}}}},
		{name: "bad keys", cfg: Config{DashboardURL: "magos.example.com", Webhooks: []Webhook{
			{Name: "On Call", Format: "teams", URLSecretRef: SecretKeyRef{Name: "hooks"}, Projects: []string{"web"}, Events: []string{"StepStart"}, Timeout: -time.Second},
			{Name: "x", URLSecretRef: ref}, {Name: "x", URLSecretRef: ref}}},
			want: []string{
				`notifications.dashboardUrl: must be an http or https URL`,
				`notifications.webhooks[0].name: must be a DNS label`,
				`notifications.webhooks[0].format: must be cloudevents or slack, got "teams"`,
				`notifications.webhooks[0].urlSecretRef.namespace: must be a namespace name`,
				`notifications.webhooks[0].projects[0]: must be namespace/project or namespace/*, got "web"`,
				`notifications.webhooks[0].events[0]: must be one of StepStarted, `,
				`notifications.webhooks[0].timeout: must be a positive duration`,
				`notifications.webhooks[2].name: duplicate webhook name "x" (also notifications.webhooks[1])`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs config.Errors
			tc.cfg.Validate("notifications", &errs)
			err := errs.Err()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				w := tc.cfg.Webhooks[0]
				if w.URLSecretRef.Key != DefaultURLKey || w.Timeout != DefaultTimeout || w.RetryFor != DefaultRetryFor || w.Format == "" {
					t.Errorf("defaults not filled in: %+v", w)
				}
				if strings.HasSuffix(tc.cfg.DashboardURL, "/") {
					t.Errorf("dashboardUrl keeps its trailing slash: %q", tc.cfg.DashboardURL)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestWebhookKeeps(t *testing.T) {
	n := Notification{Type: StepAwaitingApproval, Namespace: "payments", Project: "web"}
	for _, tc := range []struct {
		w    Webhook
		want bool
	}{
		{Webhook{}, true},
		{Webhook{Events: []string{StepAwaitingApproval}}, true},
		{Webhook{Events: []string{RolloutFailed}}, false},
		{Webhook{Projects: []string{"payments/web"}}, true},
		{Webhook{Projects: []string{"payments/*"}}, true},
		{Webhook{Projects: []string{"payments/api", "search/*"}}, false},
		{Webhook{Projects: []string{"payments/*"}, Events: []string{RolloutFailed}}, false},
	} {
		if got := tc.w.keeps(n); got != tc.want {
			t.Errorf("webhook projects %v events %v keeps = %v, want %v", tc.w.Projects, tc.w.Events, got, tc.want)
		}
	}
}

// TestChartSchemaListsEveryType: the magos-hub chart's values schema, which checks a webhook's
// events: filter at helm install, lists exactly the notification types.
func TestChartSchemaListsEveryType(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "magos-hub", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Config struct {
				Properties struct {
					Notifications struct {
						Properties struct {
							Webhooks struct {
								Items struct {
									Properties struct {
										Events struct {
											Items struct {
												Enum []string `json:"enum"`
											} `json:"items"`
										} `json:"events"`
									} `json:"properties"`
								} `json:"items"`
							} `json:"webhooks"`
						} `json:"properties"`
					} `json:"notifications"`
				} `json:"properties"`
			} `json:"config"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.Config.Properties.Notifications.Properties.Webhooks.Items.Properties.Events.Items.Enum
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(Types))) {
		t.Errorf("the chart's schema lists the notification types %v, want %v", got, Types)
	}
}
