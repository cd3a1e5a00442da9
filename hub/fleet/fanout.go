package fleet

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fanouts holds one fanout per kind of the hub's cache, shared by every AgentCluster of a Fleet.
//
// Without it, each AgentCluster would add its own handler to the hub's shared informer: with N agent
// clusters and two multi-cluster controllers, every event would be queued to 2N listeners (each
// with two goroutines and a buffer), and each new listener would be sent every object the
// informer holds, N times over at engagement. With it, the informer has one handler per kind,
// an event costs a map lookup by namespace, and an AgentCluster added later is sent the objects of its
// own namespace only.
type fanouts struct {
	hub cache.Cache
	// scheme resolves kinds to lists.
	scheme *runtime.Scheme

	mu  sync.Mutex
	all map[schema.GroupVersionKind]*fanout
}

func newFanouts(hub cache.Cache, scheme *runtime.Scheme) *fanouts {
	return &fanouts{hub: hub, scheme: scheme, all: map[schema.GroupVersionKind]*fanout{}}
}

// of returns the fanout of the informer inf of kind gvk, creating it on first use.
func (f *fanouts) of(gvk schema.GroupVersionKind, inf cache.Informer) *fanout {
	f.mu.Lock()
	defer f.mu.Unlock()
	fo := f.all[gvk]
	if fo == nil {
		fo = &fanout{gvk: gvk, informer: inf, parent: f, byNamespace: map[string][]*fanoutHandler{}}
		f.all[gvk] = fo
	}
	return fo
}

// fanout is the one handler on the hub informer of a kind: it passes each event to the
// handlers of the object's namespace.
type fanout struct {
	gvk      schema.GroupVersionKind
	informer cache.Informer
	parent   *fanouts

	mu sync.RWMutex
	// byNamespace holds the handlers of each namespace. A slice is never changed in place
	// (copy on write), so an event can be dispatched outside the lock.
	byNamespace map[string][]*fanoutHandler
	// registration is the fanout's own handler on the informer, added with the first handler.
	registration toolscache.ResourceEventHandlerRegistration
}

// fanoutHandler is the registration of one AgentCluster's handler.
type fanoutHandler struct {
	fanout    *fanout
	namespace string
	h         toolscache.ResourceEventHandler
}

// HasSynced is true once the fanout's own handler has synced (the informer has, and has sent
// the fanout every object it held): the handler itself was sent its namespace's objects when it
// was added.
func (r *fanoutHandler) HasSynced() bool { return r.fanout.registration.HasSynced() }

// HasSyncedChecker is HasSynced as a toolscache.DoneChecker.
func (r *fanoutHandler) HasSyncedChecker() toolscache.DoneChecker {
	return r.fanout.registration.HasSyncedChecker()
}

// add registers h for the events of namespace ns and sends it, as initial adds, the objects of
// ns the informer holds. The objects are read and the handler registered under the lock that
// dispatch takes, so h misses no change: a change stored before the read is in it, a change
// stored after is dispatched to h. h may see an object twice; every handler here enqueues a
// request, so that is harmless.
func (fo *fanout) add(ctx context.Context, ns string, h toolscache.ResourceEventHandler) (*fanoutHandler, error) {
	list, err := fo.parent.scheme.New(fo.gvk.GroupVersion().WithKind(fo.gvk.Kind + "List"))
	if err != nil {
		return nil, fmt.Errorf("the list of %s: %w", fo.gvk.Kind, err)
	}
	objList, ok := list.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%T is not a list", list)
	}
	fo.mu.Lock()
	defer fo.mu.Unlock()
	if fo.registration == nil {
		reg, err := fo.informer.AddEventHandler(fo)
		if err != nil {
			return nil, err
		}
		fo.registration = reg
	}
	// The hub's cache blocks a read until the informer has synced.
	if err := fo.parent.hub.List(ctx, objList, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("reading the %s of namespace %s: %w", fo.gvk.Kind, ns, err)
	}
	if err := meta.EachListItem(objList, func(obj runtime.Object) error {
		h.OnAdd(obj, true)
		return nil
	}); err != nil {
		return nil, err
	}
	r := &fanoutHandler{fanout: fo, namespace: ns, h: h}
	fo.byNamespace[ns] = append(fo.byNamespace[ns][:len(fo.byNamespace[ns]):len(fo.byNamespace[ns])], r)
	return r, nil
}

// remove unregisters r, if it is registered.
func (fo *fanout) remove(r *fanoutHandler) {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	hs := fo.byNamespace[r.namespace]
	for i, h := range hs {
		if h == r {
			rest := make([]*fanoutHandler, 0, len(hs)-1)
			rest = append(append(rest, hs[:i]...), hs[i+1:]...)
			if len(rest) == 0 {
				delete(fo.byNamespace, r.namespace)
			} else {
				fo.byNamespace[r.namespace] = rest
			}
			return
		}
	}
}

// handlers returns the handlers of obj's namespace.
func (fo *fanout) handlers(obj any) []*fanoutHandler {
	ns, ok := namespaceOf(obj)
	if !ok {
		return nil
	}
	fo.mu.RLock()
	defer fo.mu.RUnlock()
	return fo.byNamespace[ns]
}

// OnAdd passes an add to the handlers of the object's namespace.
func (fo *fanout) OnAdd(obj any, initial bool) {
	for _, r := range fo.handlers(obj) {
		r.h.OnAdd(obj, initial)
	}
}

// OnUpdate passes an update to the handlers of the object's namespace.
func (fo *fanout) OnUpdate(oldObj, newObj any) {
	for _, r := range fo.handlers(newObj) {
		r.h.OnUpdate(oldObj, newObj)
	}
}

// OnDelete passes a delete to the handlers of the object's namespace.
func (fo *fanout) OnDelete(obj any) {
	for _, r := range fo.handlers(obj) {
		r.h.OnDelete(obj)
	}
}

// namespaceOf returns the namespace of an informer's object or of a deleted object's tombstone.
func namespaceOf(obj any) (string, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		if tomb.Obj == nil {
			ns, _, err := toolscache.SplitMetaNamespaceKey(tomb.Key)
			return ns, err == nil
		}
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	return m.GetNamespace(), true
}
