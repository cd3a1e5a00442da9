package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
)

// AgentCluster is the engaged cluster of an agent cluster: its hub namespace
// magos-cluster-<name>, seen through the hub's cache (not to be confused with fleetview.View,
// which reads the Workspaces of every cluster for a decision). Every AgentCluster shares the
// hub's informers (one for Workspaces, whatever the number of clusters). Reads see only the
// namespace; writes go to the hub's API server and are refused outside the namespace. Objects
// keep their real namespace.
//
// GetConfig and GetHTTPClient return the hub's own connection, which is not confined to the
// namespace: use the client.
type AgentCluster struct {
	name      string
	namespace string
	hub       cluster.Cluster
	client    *viewClient
	cache     *viewCache
	reader    *viewReader
}

var _ cluster.Cluster = &AgentCluster{}

// newView returns the view of an agent cluster once the hub's Workspace informer has synced.
// A view never stops on its own, so its stopped channel is nil.
func (f *Fleet) newView(ctx context.Context, name string) (cluster.Cluster, <-chan struct{}, error) {
	if _, err := f.opts.Hub.GetCache().GetInformer(ctx, &magosv1.Workspace{}); err != nil {
		return nil, nil, fmt.Errorf("waiting for the hub's Workspace informer: %w", err)
	}
	return makeAgentCluster(f.opts.Hub, name, f.indexHub, f.fanouts), nil, nil
}

// makeAgentCluster returns the view of agent cluster name over the hub cluster. index receives the
// IndexField calls made through the view and fanouts the event handlers added to its informers
// (all views share one cache, so the fleet indexes each field once and adds one handler per
// informer).
func makeAgentCluster(hub cluster.Cluster, name string, index func(context.Context, client.Object, string, client.IndexerFunc) error, fanouts *fanouts) *AgentCluster {
	s := scope{cluster: name, namespace: mirror.Namespace(name), types: hub.GetClient()}
	return &AgentCluster{
		name:      name,
		namespace: s.namespace,
		hub:       hub,
		client:    &viewClient{scope: s, c: hub.GetClient()},
		cache:     &viewCache{scope: s, c: hub.GetCache(), index: index, fanouts: fanouts},
		reader:    &viewReader{scope: s, r: hub.GetAPIReader()},
	}
}

// Name is the registered name of the agent cluster.
func (v *AgentCluster) Name() string { return v.name }

// Namespace is the hub namespace the view shows.
func (v *AgentCluster) Namespace() string { return v.namespace }

// GetHTTPClient returns the hub's HTTP client.
func (v *AgentCluster) GetHTTPClient() *http.Client { return v.hub.GetHTTPClient() }

// GetConfig returns the hub's REST config.
func (v *AgentCluster) GetConfig() *rest.Config { return v.hub.GetConfig() }

// GetCache returns the hub's cache, confined to the namespace.
func (v *AgentCluster) GetCache() cache.Cache { return v.cache }

// SharedCache returns the hub's whole cache, which every agent cluster's view confines to its
// namespace: one read of it across namespaces reads every agent cluster at once. Read only.
func (v *AgentCluster) SharedCache() client.Reader { return v.hub.GetCache() }

// GetScheme returns the hub's scheme.
func (v *AgentCluster) GetScheme() *runtime.Scheme { return v.hub.GetScheme() }

// GetClient returns a client confined to the namespace: reads from the hub's cache, writes to
// the hub's API server.
func (v *AgentCluster) GetClient() client.Client { return v.client }

// GetFieldIndexer indexes the hub's shared cache.
func (v *AgentCluster) GetFieldIndexer() client.FieldIndexer { return v.cache }

// GetRESTMapper returns the hub's REST mapper.
func (v *AgentCluster) GetRESTMapper() meta.RESTMapper { return v.hub.GetRESTMapper() }

// GetAPIReader returns a reader of the hub's API server confined to the namespace.
func (v *AgentCluster) GetAPIReader() client.Reader { return v.reader }

// GetEventRecorderFor returns the hub's event recorder (events land in the mirror's namespace).
func (v *AgentCluster) GetEventRecorderFor(name string) record.EventRecorder {
	return v.hub.GetEventRecorderFor(name)
}

// GetEventRecorder returns the hub's event recorder.
func (v *AgentCluster) GetEventRecorder(name string) events.EventRecorder {
	return v.hub.GetEventRecorder(name)
}

// Start does nothing until ctx ends: the hub's cache is started by the hub's manager.
func (v *AgentCluster) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// scope confines requests to one namespace.
type scope struct {
	cluster   string
	namespace string
	types     client.Client // resolves kinds and scopes
}

func (s scope) refuse(obj runtime.Object, name, ns string) error {
	gvk, _ := s.types.GroupVersionKindFor(obj)
	where := "cluster-scoped objects"
	if ns != "" {
		where = "namespace " + ns
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(strings.TrimSuffix(gvk.Kind, "List"))},
		name, fmt.Errorf("cluster %s is the hub namespace %s; %s are outside it", s.cluster, s.namespace, where))
}

// own checks that obj is a namespaced object of the view's namespace, defaulting an empty one.
func (s scope) own(obj client.Object) error {
	namespaced, err := s.types.IsObjectNamespaced(obj)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", s.cluster, err)
	}
	if !namespaced {
		return s.refuse(obj, obj.GetName(), "")
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(s.namespace)
	}
	if obj.GetNamespace() != s.namespace {
		return s.refuse(obj, obj.GetName(), obj.GetNamespace())
	}
	return nil
}

// key checks a read: objects of other namespaces are not found; cluster-scoped ones refused.
func (s scope) key(obj client.Object, key client.ObjectKey) (client.ObjectKey, error) {
	namespaced, err := s.types.IsObjectNamespaced(obj)
	if err != nil {
		return key, fmt.Errorf("cluster %s: %w", s.cluster, err)
	}
	if !namespaced {
		return key, s.refuse(obj, key.Name, "")
	}
	if key.Namespace == "" {
		key.Namespace = s.namespace
	}
	if key.Namespace != s.namespace {
		gvk, _ := s.types.GroupVersionKindFor(obj)
		return key, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, key.Name)
	}
	return key, nil
}

// list confines a list to the namespace. ok is false when the list asks for another namespace:
// the list is then emptied and nothing is to be read.
func (s scope) list(list client.ObjectList, opts []client.ListOption) ([]client.ListOption, bool, error) {
	gvk, err := s.types.GroupVersionKindFor(list)
	if err != nil {
		return nil, false, fmt.Errorf("cluster %s: %w", s.cluster, err)
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	mapping, err := s.types.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, false, fmt.Errorf("cluster %s: %w", s.cluster, err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, false, s.refuse(list, "", "")
	}
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	if lo.Namespace != "" && lo.Namespace != s.namespace {
		return nil, false, meta.SetList(list, nil)
	}
	return append(opts, client.InNamespace(s.namespace)), true, nil
}

type viewReader struct {
	scope
	r client.Reader
}

func (v *viewReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	key, err := v.key(obj, key)
	if err != nil {
		return err
	}
	return v.r.Get(ctx, key, obj, opts...)
}

func (v *viewReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	opts, ok, err := v.list(list, opts)
	if !ok {
		return err
	}
	return v.r.List(ctx, list, opts...)
}

// viewClient is the client of a AgentCluster.
type viewClient struct {
	scope
	c client.Client
}

var _ client.Client = &viewClient{}

func (v *viewClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	key, err := v.key(obj, key)
	if err != nil {
		return err
	}
	return v.c.Get(ctx, key, obj, opts...)
}

func (v *viewClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	opts, ok, err := v.list(list, opts)
	if !ok {
		return err
	}
	return v.c.List(ctx, list, opts...)
}

func (v *viewClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if err := v.ownApply(obj); err != nil {
		return err
	}
	return v.c.Apply(ctx, obj, opts...)
}

func (v *viewClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Create(ctx, obj, opts...)
}

func (v *viewClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Delete(ctx, obj, opts...)
}

func (v *viewClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Update(ctx, obj, opts...)
}

func (v *viewClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Patch(ctx, obj, patch, opts...)
}

func (v *viewClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	var o client.DeleteAllOfOptions
	o.ApplyOptions(opts)
	if o.Namespace != "" && o.Namespace != v.namespace {
		return v.refuse(obj, "", o.Namespace)
	}
	if namespaced, err := v.types.IsObjectNamespaced(obj); err != nil || !namespaced {
		if err != nil {
			return err
		}
		return v.refuse(obj, "", "")
	}
	return v.c.DeleteAllOf(ctx, obj, append(opts, client.InNamespace(v.namespace))...)
}

func (v *viewClient) Status() client.SubResourceWriter { return v.SubResource("status") }

func (v *viewClient) SubResource(sub string) client.SubResourceClient {
	return &viewSubResource{scope: v.scope, c: v.c.SubResource(sub)}
}

func (v *viewClient) Scheme() *runtime.Scheme     { return v.c.Scheme() }
func (v *viewClient) RESTMapper() meta.RESTMapper { return v.c.RESTMapper() }
func (v *viewClient) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return v.c.GroupVersionKindFor(obj)
}
func (v *viewClient) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	return v.c.IsObjectNamespaced(obj)
}

func (s scope) ownApply(obj runtime.ApplyConfiguration) error {
	named, ok := obj.(interface {
		GetName() *string
		GetNamespace() *string
	})
	if !ok {
		return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("cluster %s: cannot tell the namespace of this apply configuration", s.cluster))
	}
	ns, name := named.GetNamespace(), ""
	if n := named.GetName(); n != nil {
		name = *n
	}
	if ns == nil || *ns != s.namespace {
		got := ""
		if ns != nil {
			got = *ns
		}
		return apierrors.NewForbidden(schema.GroupResource{}, name,
			fmt.Errorf("cluster %s is the hub namespace %s; namespace %q is outside it", s.cluster, s.namespace, got))
	}
	return nil
}

type viewSubResource struct {
	scope
	c client.SubResourceClient
}

func (v *viewSubResource) Get(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceGetOption) error {
	if _, err := v.key(obj, client.ObjectKeyFromObject(obj)); err != nil {
		return err
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(v.namespace)
	}
	return v.c.Get(ctx, obj, sub, opts...)
}

func (v *viewSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Create(ctx, obj, sub, opts...)
}

func (v *viewSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Update(ctx, obj, opts...)
}

func (v *viewSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := v.own(obj); err != nil {
		return err
	}
	return v.c.Patch(ctx, obj, patch, opts...)
}

func (v *viewSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := v.ownApply(obj); err != nil {
		return err
	}
	return v.c.Apply(ctx, obj, opts...)
}

// viewCache is the hub's cache confined to a namespace: reads and informer events outside it
// are not seen.
type viewCache struct {
	scope
	c       cache.Cache
	index   func(context.Context, client.Object, string, client.IndexerFunc) error
	fanouts *fanouts
}

var _ cache.Cache = &viewCache{}

func (v *viewCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	key, err := v.key(obj, key)
	if err != nil {
		return err
	}
	return v.c.Get(ctx, key, obj, opts...)
}

func (v *viewCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	opts, ok, err := v.list(list, opts)
	if !ok {
		return err
	}
	return v.c.List(ctx, list, opts...)
}

func (v *viewCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := v.types.GroupVersionKindFor(obj)
	if err != nil {
		return nil, err
	}
	return v.GetInformerForKind(ctx, gvk, opts...)
}

func (v *viewCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := v.c.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	fo := v.fanouts.of(gvk, inf)
	if fo.informer != inf {
		fo = nil // another informer of the kind (metadata only, say): handlers are added to it directly
	}
	return &viewInformer{Informer: inf, namespace: v.namespace, fanout: fo}, nil
}

// RemoveInformer is refused: the informers are shared by every agent cluster.
func (v *viewCache) RemoveInformer(context.Context, client.Object) error {
	return errors.New("the informers of an agent cluster are shared by the whole hub and cannot be removed")
}

// Start does nothing until ctx ends: the hub's manager starts the shared cache.
func (v *viewCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (v *viewCache) WaitForCacheSync(ctx context.Context) bool { return v.c.WaitForCacheSync(ctx) }

func (v *viewCache) IndexField(ctx context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	return v.index(ctx, obj, field, fn)
}

// viewInformer passes on only the events of objects in its namespace. Handlers go through the
// informer's fanout; only a handler that asks for periodic resyncs, or one added to an informer
// the fanout does not serve, gets a listener of its own.
type viewInformer struct {
	cache.Informer
	namespace string
	fanout    *fanout
}

// addTimeout bounds reading a namespace's objects for a new handler: the informer has synced
// by then (GetInformer waits for it), so the read is from memory.
const addTimeout = time.Minute

func (i *viewInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if i.fanout == nil {
		return i.Informer.AddEventHandler(namespaceFilter{ns: i.namespace, h: h})
	}
	ctx, cancel := context.WithTimeout(context.Background(), addTimeout)
	defer cancel()
	return i.fanout.add(ctx, i.namespace, h)
}

func (i *viewInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	if resync > 0 {
		return i.Informer.AddEventHandlerWithResyncPeriod(namespaceFilter{ns: i.namespace, h: h}, resync)
	}
	return i.AddEventHandler(h)
}

func (i *viewInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	if opts.ResyncPeriod != nil && *opts.ResyncPeriod > 0 {
		return i.Informer.AddEventHandlerWithOptions(namespaceFilter{ns: i.namespace, h: h}, opts)
	}
	return i.AddEventHandler(h)
}

func (i *viewInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	if r, ok := reg.(*fanoutHandler); ok {
		r.fanout.remove(r)
		return nil
	}
	return i.Informer.RemoveEventHandler(reg)
}

// namespaceFilter forwards the events of objects in one namespace.
type namespaceFilter struct {
	ns string
	h  toolscache.ResourceEventHandler
}

func (n namespaceFilter) OnAdd(obj any, initial bool) {
	if inNamespace(obj, n.ns) {
		n.h.OnAdd(obj, initial)
	}
}

func (n namespaceFilter) OnUpdate(oldObj, newObj any) {
	if inNamespace(newObj, n.ns) {
		n.h.OnUpdate(oldObj, newObj)
	}
}

func (n namespaceFilter) OnDelete(obj any) {
	if inNamespace(obj, n.ns) {
		n.h.OnDelete(obj)
	}
}

func inNamespace(obj any, ns string) bool {
	objNS, ok := namespaceOf(obj)
	return ok && objNS == ns
}
