package dashboard

import (
	"context"
	"fmt"
	"net/http"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/timeline"
)

// Timeline is the answer of GET /api/v1/namespaces/{namespace}/rollouts/{name}/timeline: what
// happened to the Rollout, oldest first (timeline.Build).
type Timeline struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Entries   []timeline.Entry `json:"entries"`
	// EventsUnavailable, when set, says why the timeline holds only what the Rollout itself
	// records (its spec and status): the hub has not read the Rollouts' Events (yet).
	EventsUnavailable string `json:"eventsUnavailable,omitempty"`
}

// eventsNotRead is EventsUnavailable while the hub's cache of the Rollouts' Events has not
// synced: at start, or for good when the hub may not list and watch events.k8s.io Events.
const eventsNotRead = "the hub has not read the Rollouts' Events (it needs list and watch on events in group events.k8s.io): showing what the Rollout records"

// timeline is one Rollout's timeline, for a caller who may get the Rollout. Its Events are read
// from the hub's cache (Events regarding Rollouts: app.CacheOptions), with the hub's rights: a
// caller who may get the Rollout sees the Events recorded on it, whether or not RBAC lets them
// read Events themselves.
func (s *Server) timeline(ctx context.Context, u user.Info, r *http.Request) (any, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if err := s.require(ctx, u, "get", "rollouts", ns, name); err != nil {
		return nil, err
	}
	var ro magosv1.Rollout
	if err := s.opts.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ro); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errorf(http.StatusNotFound, "rollout %s/%s not found", ns, name)
		}
		return nil, fmt.Errorf("reading rollout %s/%s: %w", ns, name, err)
	}
	out := Timeline{Namespace: ns, Name: name}
	events, err := s.rolloutEvents(ctx, ns)
	if err != nil {
		return nil, err
	}
	if events == nil {
		out.EventsUnavailable = eventsNotRead
	}
	out.Entries = timeline.Build(&ro, events)
	if out.Entries == nil {
		out.Entries = []timeline.Entry{}
	}
	return out, nil
}

// rolloutEvents lists the Events of Rollouts in namespace from the hub's cache; nil when the
// cache has not synced them (never blocking on it: the hub may lack the right to read them).
// The Events are the cache's own: read only.
func (s *Server) rolloutEvents(ctx context.Context, namespace string) ([]eventsv1.Event, error) {
	inf, err := s.opts.Cache.GetInformer(ctx, &eventsv1.Event{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("reading the Rollouts' Events: %w", err)
	}
	if !inf.HasSynced() {
		return nil, nil
	}
	var list eventsv1.EventList
	if err := s.opts.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the Events of namespace %s: %w", namespace, err)
	}
	if list.Items == nil {
		list.Items = []eventsv1.Event{}
	}
	return list.Items, nil
}

// watchEvents subscribes n to the Events of Rollouts in the cache, without waiting for them to
// sync: a timeline shows what the Rollout records until they have.
func (n *notifier) watchEvents(ctx context.Context, c cache.Informers) error {
	inf, err := c.GetInformer(ctx, &eventsv1.Event{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching Events: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.notify() },
		UpdateFunc: func(any, any) { n.notify() },
		DeleteFunc: func(any) { n.notify() },
	}); err != nil {
		return fmt.Errorf("watching Events: %w", err)
	}
	return nil
}
