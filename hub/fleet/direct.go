package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
)

// HubCacheByObject is what the hub manager's cache must be told for the fleet: Workspaces are
// cached only when they are mirrors (all namespaces, one informer shared by every agent cluster).
// Merge it into the manager's cache.Options.ByObject.
func HubCacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&magosv1.Workspace{}: {Label: mirror.OnlyMirrors(), Transform: WorkspaceTransform()},
	}
}

// WorkspaceTransform is how the hub's caches keep Workspaces: without managed fields and
// without their run records (status.runs), which no decision reads (magosctl reads them from the
// API server) and which would otherwise be most of what the hub holds of a mirror. The hub
// never writes a Workspace's status, so nothing it writes is made from a copy without them.
func WorkspaceTransform() toolscache.TransformFunc {
	strip := cache.TransformStripManagedFields()
	return func(in any) (any, error) {
		out, err := strip(in)
		if ws, ok := out.(*magosv1.Workspace); ok {
			ws.Status.Runs = nil
		}
		return out, err
	}
}

// DirectCacheOptions is the cache of a direct cluster: Workspaces that are not mirrors
// (mirror.NotMirrors, so that the hub's own cluster, registered as a direct cluster, never shows
// the mirrors of agent clusters, and a Workspace whose mirror label is anything but "true" is
// seen, as its agent runs it), without managed fields, and Workspaces as WorkspaceTransform
// keeps them.
func DirectCacheOptions() cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&magosv1.Workspace{}: {Label: mirror.NotMirrors(), Transform: WorkspaceTransform()},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

// inClusterFingerprint is the fingerprint of a direct cluster reached with the hub's own
// identity (kubeconfig.inCluster): it never changes.
const inClusterFingerprint = "direct:in-cluster"

// restConfig returns how to reach a direct cluster and a fingerprint of it (which changes when
// the kubeconfig does): the kubeconfig from its file or Secret (read through the hub's API
// reader: the hub keeps no Secret informer), or, for kubeconfig.inCluster, the hub's own
// connection to its own cluster, with its own ServiceAccount.
func (f *Fleet) restConfig(ctx context.Context, src *magosv1.KubeconfigSource) (*rest.Config, string, error) {
	if src != nil && src.InCluster {
		return rest.CopyConfig(f.opts.Hub.GetConfig()), inClusterFingerprint, nil
	}
	raw, err := f.readKubeconfig(ctx, src)
	if err != nil {
		return nil, "", err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, "", fmt.Errorf("parsing kubeconfig: %w", err)
	}
	return cfg, fingerprint(raw), nil
}

// readKubeconfig reads a direct cluster's kubeconfig from its file or Secret.
func (f *Fleet) readKubeconfig(ctx context.Context, src *magosv1.KubeconfigSource) ([]byte, error) {
	switch {
	case src == nil:
		return nil, errors.New("a direct cluster needs a kubeconfig")
	case src.Path != "":
		raw, err := os.ReadFile(src.Path)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig file: %w", err)
		}
		return raw, nil
	case src.SecretRef != nil:
		ref := src.SecretRef
		key := ref.Key
		if key == "" {
			key = "kubeconfig"
		}
		secret := &corev1.Secret{}
		if err := f.opts.Hub.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
			return nil, fmt.Errorf("reading kubeconfig Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		raw, ok := secret.Data[key]
		if !ok || len(raw) == 0 {
			return nil, fmt.Errorf("kubeconfig Secret %s/%s has no key %q", ref.Namespace, ref.Name, key)
		}
		return raw, nil
	default:
		return nil, errors.New("kubeconfig needs a path, a secretRef or inCluster: true")
	}
}

func fingerprint(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "direct:" + hex.EncodeToString(sum[:])
}

// newDirect connects to a direct cluster: it starts a cluster.Cluster under ctx and waits until
// its Workspace informer has synced. stopped is closed when the cluster stops.
func (f *Fleet) newDirect(ctx context.Context, name string, cfg *rest.Config) (cluster.Cluster, <-chan struct{}, error) {
	cfg.QPS, cfg.Burst = f.opts.QPS, f.opts.Burst
	log := f.log.WithValues("cluster", name)
	cl, err := cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = f.opts.Scheme
		o.Logger = log
		o.Cache = DirectCacheOptions()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating cluster: %w", err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := cl.Start(ctx); err != nil {
			log.Error(err, "cluster stopped")
		}
	}()
	if _, err := cl.GetCache().GetInformer(ctx, &magosv1.Workspace{}); err != nil {
		return nil, nil, fmt.Errorf("watching Workspaces: %w", err)
	}
	if !cl.GetCache().WaitForCacheSync(ctx) {
		return nil, nil, errors.New("the Workspace cache did not sync")
	}
	return cl, stopped, nil
}

// Probe checks that a registered cluster answers: for a direct cluster, its API server's
// /readyz; for an agent cluster, nothing (the agent's Lease says whether it is alive). It fails
// when the cluster is not engaged.
func (f *Fleet) Probe(ctx context.Context, name string) error {
	cl, err := f.Get(ctx, multicluster.ClusterName(name))
	if err != nil {
		return err
	}
	if _, ok := cl.(*AgentCluster); ok {
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("probing cluster %s: %w", name, err)
	}
	if _, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("probing cluster %s: %w", name, err)
	}
	return nil
}
