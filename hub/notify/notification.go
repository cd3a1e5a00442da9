package notify

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/hub/timeline"
)

// Notification types: what happened to a Rollout. Each comes from one Event the hub's Rollout
// controller records on the Rollout (its reason in parentheses), so a notification says what the
// Rollout's Events say, once per Event. They are the timeline's entry types of those Events
// (package timeline, TypeOf: one definition of what an Event of a Rollout means).
const (
	// StepStarted: a step became the current one (StepChanged).
	StepStarted = timeline.StepStarted
	// StepCompleted: a step is done, and soaked (StepCompleted).
	StepCompleted = timeline.StepCompleted
	// StepAwaitingApproval: the current step's plans wait for a person (AwaitingApproval).
	StepAwaitingApproval = timeline.StepAwaitingApproval
	// StepRejected: a person rejected the plans the current step waits with, saying why
	// (ApprovalRejected).
	StepRejected = timeline.StepRejected
	// StepApproved: an approval of the current step's plans is in force (Approved).
	StepApproved = timeline.StepApproved
	// RolloutFailed: the Rollout halted on a failure (StepFailed, PreviewFailed,
	// NoWorkspacesFound, InvalidSelector, InvalidVerification, InvalidChangeWindow).
	RolloutFailed = timeline.RolloutFailed
	// RolloutPaused: someone paused the Rollout (Paused).
	RolloutPaused = timeline.RolloutPaused
	// ProgressDeadlineExceeded: the current step has not progressed within
	// spec.progressDeadline (ProgressDeadlineExceeded).
	ProgressDeadlineExceeded = timeline.ProgressDeadlineExceeded
	// RollbackStarted: a failed step rolled the Rollout back (RollbackStarted).
	RollbackStarted = timeline.RollbackStarted
	// DriftDetected: Workspaces of the current step drifted (DriftDetected).
	DriftDetected = timeline.DriftDetected
	// RolloutCompleted: every step is done (RolloutCompleted).
	RolloutCompleted = timeline.RolloutCompleted
)

// Types are the notification types, in the order a Rollout usually meets them: the timeline's
// types that make a notification.
var Types = []string{StepStarted, StepAwaitingApproval, StepRejected, StepApproved, StepCompleted, RolloutCompleted,
	RolloutFailed, RolloutPaused, ProgressDeadlineExceeded, RollbackStarted, DriftDetected}

// typeOf is the notification type of an Event of a Rollout with reason (timeline.TypeOf, when
// that type makes a notification).
func typeOf(reason string) (string, bool) {
	typ, ok := timeline.TypeOf(reason)
	if !ok || !slices.Contains(Types, typ) {
		return "", false
	}
	return typ, true
}

// ReportingController is the reporting controller of the Events notifications come from: the
// hub's Rollout controller's.
const ReportingController = "magos-hub-" + rollout.ControllerName

// Notification is what one webhook request says. Its JSON is the data of a CloudEvent.
type Notification struct {
	// ID is the Event's UID: the same for every attempt to deliver it, so receivers can drop
	// duplicates.
	ID string `json:"id"`
	// Type is the notification type (StepStarted, ...).
	Type string `json:"type"`
	// Time is when the Event was recorded.
	Time time.Time `json:"time"`
	// Namespace, Rollout and Project name the Rollout and its Project ("" when the Rollout is
	// gone).
	Namespace string `json:"namespace"`
	Rollout   string `json:"rollout"`
	Project   string `json:"project,omitempty"`
	// Step is the step the Event is about, when it names one.
	Step string `json:"step,omitempty"`
	// Reason and Message are the Event's.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Severity is info, or warning for a Warning Event.
	Severity string `json:"severity"`
	// Link opens the Rollout on the dashboard (when the config names its URL).
	Link string `json:"link,omitempty"`
}

// FromEvent turns an Event the hub's Rollout controller recorded on a Rollout into its
// notification; ok is false for any other Event. The step is the one the Event's action names
// ("Step <name>"), if any. ro is the Rollout, when it is known: it gives the Project. dashboard
// is Config.DashboardURL.
func FromEvent(ev *eventsv1.Event, ro *magosv1.Rollout, dashboard string) (n Notification, ok bool) {
	if ev.Regarding.Kind != "Rollout" || ev.ReportingController != ReportingController {
		return Notification{}, false
	}
	typ, ok := typeOf(ev.Reason)
	if !ok {
		return Notification{}, false
	}
	n = Notification{
		ID: string(ev.UID), Type: typ, Time: eventTime(ev),
		Namespace: ev.Regarding.Namespace, Rollout: ev.Regarding.Name,
		Reason: ev.Reason, Message: ev.Note, Severity: "info",
	}
	if ev.Type == corev1.EventTypeWarning {
		n.Severity = "warning"
	}
	if step, ok := strings.CutPrefix(ev.Action, "Step "); ok {
		n.Step = step
	}
	if ro != nil && ro.UID == ev.Regarding.UID {
		n.Project = ro.Spec.ProjectRef
	}
	if dashboard != "" {
		n.Link = dashboard + "/#/namespaces/" + url.PathEscape(n.Namespace) + "/rollouts/" + url.PathEscape(n.Rollout)
	}
	return n, true
}

// eventTime is when the Event was recorded: its eventTime, or (an Event of the older API) its
// creation.
func eventTime(ev *eventsv1.Event) time.Time {
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// CloudEventType is the CloudEvents type of a notification type.
func CloudEventType(typ string) string { return "io.magosproject.rollout." + typ }

// cloudEvent is a CloudEvents 1.0 event in the JSON format (structured mode).
type cloudEvent struct {
	SpecVersion     string       `json:"specversion"`
	ID              string       `json:"id"`
	Source          string       `json:"source"`
	Type            string       `json:"type"`
	Subject         string       `json:"subject"`
	Time            string       `json:"time"`
	DataContentType string       `json:"datacontenttype"`
	Data            Notification `json:"data"`
}

// Body renders n in format: the request body and its Content-Type.
func Body(format string, n Notification) (body []byte, contentType string, err error) {
	switch format {
	case FormatSlack:
		body, err = json.Marshal(map[string]string{"text": SlackText(n)})
		return body, "application/json", err
	default:
		body, err = json.Marshal(cloudEvent{
			SpecVersion: "1.0", ID: n.ID,
			Source:  "/apis/magosproject.io/v1alpha1/namespaces/" + n.Namespace + "/rollouts/" + n.Rollout,
			Type:    CloudEventType(n.Type),
			Subject: n.Namespace + "/" + n.Rollout,
			Time:    n.Time.UTC().Format(time.RFC3339Nano), DataContentType: "application/json", Data: n,
		})
		return body, "application/cloudevents+json; charset=utf-8", err
	}
}

// SlackText is a notification as one line of Slack's mrkdwn.
func SlackText(n Notification) string {
	icon := ":large_blue_circle:"
	switch {
	case n.Type == RolloutCompleted || n.Type == StepCompleted:
		icon = ":white_check_mark:"
	case n.Type == StepAwaitingApproval:
		icon = ":raised_hand:"
	case n.Severity == "warning":
		icon = ":red_circle:"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s *%s* Rollout %s/%s", icon, n.Type, slackEscape(n.Namespace), slackEscape(n.Rollout))
	if n.Step != "" {
		fmt.Fprintf(&b, ", step %s", slackEscape(n.Step))
	}
	fmt.Fprintf(&b, ": %s", slackEscape(n.Message))
	if n.Link != "" {
		fmt.Fprintf(&b, " <%s|Open the Rollout>", n.Link)
	}
	return b.String()
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
