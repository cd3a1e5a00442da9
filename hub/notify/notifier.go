// Package notify sends what happens to Rollouts to the webhooks the hub's config file names
// (notifications.webhooks): a step started or completed, a step awaiting approval, a failure, a
// passed progress deadline, a completed Rollout. Each notification is one Event the hub's Rollout
// controller recorded on a Rollout (FromEvent), so notifications say what `kubectl events` says,
// once per Event, and the Rollout controller knows nothing of them.
//
// The Notifier runs on the elected hub leader beside the controllers, never in their way: each
// webhook has its own queue and sender, so a slow or failing receiver delays only its own
// notifications, never a decision or another webhook. A webhook receives its notifications in
// the order the Events were recorded (each Event is held for Settle first); one that fails is
// retried with backoff (1 s doubling to 1 min) for the webhook's retryFor, then dropped. A delivery is recorded on the Event
// (annotation keys.NotifiedPrefix + webhook), so a hub that restarts, or a new leader, sends
// what was not delivered yet (Events younger than retryFor) and nothing twice.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/version"
)

// Event reasons the Notifier records on a Rollout.
const (
	// EventNotificationFailed (Warning): a webhook refused or did not answer a notification of
	// the Rollout; it is retried. Recorded when a webhook starts failing, not at every attempt.
	EventNotificationFailed = "NotificationFailed"
	// EventNotificationDropped (Warning): a notification could not be delivered within its
	// webhook's retryFor and was dropped.
	EventNotificationDropped = "NotificationDropped"
)

// Backoff bounds of a failing delivery.
const (
	firstBackoff = time.Second
	maxBackoff   = time.Minute
)

// Options configures a Notifier.
type Options struct {
	// Config is the notifications section of the hub's config (validated).
	Config Config
	// Cache holds the hub's Events (of Rollouts) and Rollouts.
	Cache cache.Cache
	// Client patches the delivery annotation onto Events.
	Client client.Client
	// Secrets reads the webhooks' Secrets (the API reader: no informer on Secrets).
	Secrets client.Reader
	// Recorder records NotificationFailed and NotificationDropped Events on Rollouts.
	Recorder events.EventRecorder
	// Logger logs deliveries (V(1)) and failures; never a URL or a Secret's value.
	Logger logr.Logger
	// Transport sends the requests (default http.DefaultTransport).
	Transport http.RoundTripper
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Settle is how long the Notifier holds an Event before it sends its notification: the hub's
// event recorder writes each Event in a goroutine of its own, so Events recorded a moment apart
// may reach the API server in either order. Held this long, they are sent in the order they were
// recorded (their eventTime).
const Settle = 2 * time.Second

// Notifier sends the hub's notifications. It is a manager Runnable that runs on the leader.
type Notifier struct {
	opts    Options
	senders []*sender

	mu sync.Mutex
	// pending are the Events held for Settle, in no order.
	pending []*eventsv1.Event
	// seen are the Events already taken, by UID, with when they were recorded (forgotten once
	// older than every webhook's retryFor).
	seen map[types.UID]time.Time
}

// New returns a Notifier for opts.Config's webhooks.
func New(opts Options) *Notifier {
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := &Notifier{opts: opts, seen: map[types.UID]time.Time{}}
	for _, w := range opts.Config.Webhooks {
		n.senders = append(n.senders, &sender{n: n, wh: w, wake: make(chan struct{}, 1),
			log:    opts.Logger.WithValues("webhook", w.Name),
			client: &http.Client{Transport: opts.Transport, Timeout: w.Timeout}})
		metrics.queued.WithLabelValues(w.Name).Set(0)
	}
	return n
}

// NeedLeaderElection makes the Notifier run on the elected leader only.
func (n *Notifier) NeedLeaderElection() bool { return true }

// Start watches the Rollouts' Events and sends their notifications until ctx ends.
func (n *Notifier) Start(ctx context.Context) error {
	inf, err := n.opts.Cache.GetInformer(ctx, &eventsv1.Event{})
	if err != nil {
		return fmt.Errorf("notify: the Events informer: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ev, ok := obj.(*eventsv1.Event); ok {
				n.add(ev)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("notify: watching Events: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	var wg sync.WaitGroup
	for _, s := range n.senders {
		wg.Go(func() { s.run(ctx) })
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		wg.Wait()
		return nil
	}
	n.opts.Logger.Info("sending notifications", "webhooks", len(n.senders))
	release := time.NewTicker(Settle / 8)
	defer release.Stop()
	prune := time.NewTicker(10 * time.Minute)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-release.C:
			n.release(ctx)
		case <-prune.C:
			n.prune()
		}
	}
}

// add holds an Event that makes a notification, once.
func (n *Notifier) add(ev *eventsv1.Event) {
	if _, ok := FromEvent(ev, nil, ""); !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.seen[ev.UID]; dup {
		return
	}
	n.seen[ev.UID] = eventTime(ev)
	n.pending = append(n.pending, ev)
}

// release queues, oldest first, the held Events recorded at least Settle ago.
func (n *Notifier) release(ctx context.Context) {
	horizon := n.opts.Now().Add(-Settle)
	n.mu.Lock()
	var due []*eventsv1.Event
	n.pending = slices.DeleteFunc(n.pending, func(ev *eventsv1.Event) bool {
		if eventTime(ev).After(horizon) {
			return false
		}
		due = append(due, ev)
		return true
	})
	n.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	for _, ev := range due {
		n.queue(ctx, ev)
	}
}

// queue hands the Event's notification to every webhook that keeps it and has not received it.
func (n *Notifier) queue(ctx context.Context, ev *eventsv1.Event) {
	var ro *magosv1.Rollout
	candidate := &magosv1.Rollout{}
	if err := n.opts.Cache.Get(ctx, types.NamespacedName{Namespace: ev.Regarding.Namespace, Name: ev.Regarding.Name}, candidate); err == nil {
		ro = candidate
	}
	note, ok := FromEvent(ev, ro, n.opts.Config.DashboardURL)
	if !ok {
		return
	}
	it := item{note: note, event: types.NamespacedName{Namespace: ev.Namespace, Name: ev.Name}, regarding: ev.Regarding}
	for _, s := range n.senders {
		if !s.wh.keeps(note) || ev.Annotations[keys.NotifiedPrefix+s.wh.Name] != "" {
			continue
		}
		if age := n.opts.Now().Sub(note.Time); age > s.wh.RetryFor {
			metrics.dropped.WithLabelValues(s.wh.Name).Inc()
			s.log.Info("not sending a notification older than retryFor", "type", note.Type, "rollout", note.Namespace+"/"+note.Rollout, "age", age.Round(time.Second))
			continue
		}
		s.push(it)
	}
}

// prune forgets the Events older than every webhook's retryFor: they are never queued again.
func (n *Notifier) prune() {
	var horizon time.Duration
	for _, s := range n.senders {
		horizon = max(horizon, s.wh.RetryFor)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for uid, at := range n.seen {
		if n.opts.Now().Sub(at) > horizon+time.Hour {
			delete(n.seen, uid)
		}
	}
}

// item is one notification queued for one webhook.
type item struct {
	note Notification
	// event is the Event it comes from, annotated once delivered; regarding is its Rollout.
	event     types.NamespacedName
	regarding corev1.ObjectReference
}

// sender delivers one webhook's notifications, one at a time, in order.
type sender struct {
	n      *Notifier
	wh     Webhook
	log    logr.Logger
	client *http.Client

	mu    sync.Mutex
	queue []item
	wake  chan struct{}
	// failing is set from a failed attempt until the next delivery.
	failing bool
}

// push appends it to the queue.
func (s *sender) push(it item) {
	s.mu.Lock()
	s.queue = append(s.queue, it)
	metrics.queued.WithLabelValues(s.wh.Name).Set(float64(len(s.queue)))
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run delivers the queue's head until it is delivered or dropped, then the next, until ctx ends.
func (s *sender) run(ctx context.Context) {
	for {
		s.mu.Lock()
		var it *item
		if len(s.queue) > 0 {
			it = &s.queue[0]
		}
		s.mu.Unlock()
		if it == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		if !s.deliver(ctx, *it) {
			return // ctx ended
		}
		s.mu.Lock()
		s.queue = s.queue[1:]
		metrics.queued.WithLabelValues(s.wh.Name).Set(float64(len(s.queue)))
		s.mu.Unlock()
	}
}

// deliver sends it until the webhook takes it or its retryFor passes, with backoff; it returns
// false when ctx ended first.
func (s *sender) deliver(ctx context.Context, it item) bool {
	backoff := firstBackoff
	rollout := it.note.Namespace + "/" + it.note.Rollout
	for {
		err := s.post(ctx, it.note)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			metrics.sent.WithLabelValues(s.wh.Name, it.note.Type).Inc()
			s.log.V(1).Info("notification delivered", "type", it.note.Type, "rollout", rollout, "event", it.event.Name)
			s.failing = false
			s.markDelivered(ctx, it)
			return true
		}
		metrics.failures.WithLabelValues(s.wh.Name).Inc()
		s.log.Info("a notification was not delivered; retrying", "type", it.note.Type, "rollout", rollout, "error", err.Error(), "retryIn", backoff)
		if !s.failing {
			s.failing = true
			s.record(it, corev1.EventTypeWarning, EventNotificationFailed,
				"Webhook %s did not take the %s notification: %v; retrying for up to %s", s.wh.Name, it.note.Type, err, s.wh.RetryFor)
		}
		if s.n.opts.Now().Sub(it.note.Time) > s.wh.RetryFor {
			metrics.dropped.WithLabelValues(s.wh.Name).Inc()
			s.log.Info("dropping a notification that could not be delivered within retryFor", "type", it.note.Type, "rollout", rollout, "retryFor", s.wh.RetryFor)
			s.record(it, corev1.EventTypeWarning, EventNotificationDropped,
				"Webhook %s did not take the %s notification within %s: dropped (last error: %v)", s.wh.Name, it.note.Type, s.wh.RetryFor, err)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// record records an Event about a delivery on the notification's Rollout.
func (s *sender) record(it item, kind, reason, format string, args ...any) {
	if s.n.opts.Recorder == nil {
		return
	}
	ro := &magosv1.Rollout{}
	ro.Namespace, ro.Name, ro.UID = it.regarding.Namespace, it.regarding.Name, it.regarding.UID
	ro.SetGroupVersionKind(magosv1.GroupVersion.WithKind("Rollout"))
	s.n.opts.Recorder.Eventf(ro, nil, kind, reason, "Notify", format, args...)
}

// post sends one request. Its error never holds the webhook's URL (it may hold a token).
func (s *sender) post(ctx context.Context, note Notification) error {
	target, err := s.secret(ctx, s.wh.URLSecretRef)
	if err != nil {
		return err
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("the value of Secret key %s is not an http or https URL", s.wh.URLSecretRef)
	}
	body, contentType, err := Body(s.wh.Format, note)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return errors.New("building the request failed")
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "magos-hub/"+version.Get())
	if ref := s.wh.AuthorizationSecretRef; ref != nil {
		auth, err := s.secret(ctx, *ref)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return fmt.Errorf("%s: %w", ue.Op, ue.Err)
		}
		return errors.New("the request failed")
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// secret reads a Secret key's value (SecretKeyRef.Read), without surrounding spaces.
func (s *sender) secret(ctx context.Context, ref SecretKeyRef) (string, error) {
	v, err := ref.Read(ctx, s.n.opts.Secrets)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(v)), nil
}

// markDelivered records the delivery on the Event, so that the webhook never receives it again
// (an Event already gone needs nothing).
func (s *sender) markDelivered(ctx context.Context, it item) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		keys.NotifiedPrefix + s.wh.Name: s.n.opts.Now().UTC().Format(time.RFC3339)}}})
	if err != nil {
		return
	}
	ev := &eventsv1.Event{}
	ev.Namespace, ev.Name = it.event.Namespace, it.event.Name
	if err := s.n.opts.Client.Patch(ctx, ev, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		s.log.Info("could not record a delivery on its Event: a hub that starts again may send it again", "event", it.event.String(), "error", err.Error())
	}
}
