package registry

import (
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// AgentServiceAccount is the ServiceAccount (and the Role and RoleBinding) the hub creates in
// every agent cluster's namespace; the agent's bootstrap kubeconfig authenticates as it.
const AgentServiceAccount = keys.AgentServiceAccount

// ManagedByLabel and ManagedByValue mark the namespaces the hub creates for agent clusters.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "magos-hub"
)

func managedLabels(cluster string) map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue, keys.Cluster: cluster}
}

// ensureAgentAccess creates (or repairs) an agent cluster's namespace, ServiceAccount, Role and
// RoleBinding. fresh says the cluster is probably new to the hub: each object is then created
// outright, one request instead of a read and a create, and read and patched only if it exists.
// The namespace is first looked up in cached, the hub's cache (the ServiceAccount, Role and
// RoleBinding are not cached: the hub may not list them).
func ensureAgentAccess(ctx context.Context, c client.Client, cached client.Reader, cluster string, fresh bool) error {
	ns := mirror.Namespace(cluster)
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := cachedCreateOrPatch(ctx, c, cached, fresh, namespace, func() error {
		if namespace.DeletionTimestamp != nil {
			return fmt.Errorf("namespace %s is still being deleted; it is created again once it is gone", ns)
		}
		namespace.Labels = mergeLabels(namespace.Labels, managedLabels(cluster))
		return nil
	}); err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: AgentServiceAccount}}
	if _, err := createOrPatch(ctx, c, fresh, sa, func() error {
		sa.Labels = mergeLabels(sa.Labels, managedLabels(cluster))
		return nil
	}); err != nil {
		return fmt.Errorf("ServiceAccount %s/%s: %w", ns, AgentServiceAccount, err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: AgentServiceAccount}}
	if _, err := createOrPatch(ctx, c, fresh, role, func() error {
		role.Labels = mergeLabels(role.Labels, managedLabels(cluster))
		role.Rules = mirror.AgentRules()
		return nil
	}); err != nil {
		return fmt.Errorf("Role %s/%s: %w", ns, AgentServiceAccount, err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: AgentServiceAccount}}
	if _, err := createOrPatch(ctx, c, fresh, binding, func() error {
		binding.Labels = mergeLabels(binding.Labels, managedLabels(cluster))
		binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentServiceAccount}
		binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: AgentServiceAccount}}
		return nil
	}); err != nil {
		return fmt.Errorf("RoleBinding %s/%s: %w", ns, AgentServiceAccount, err)
	}
	return nil
}

// createOrPatch is controllerutil.CreateOrPatch; with fresh, it first tries to create obj as
// mutate makes it, and falls back to reading and patching only when obj exists already.
func createOrPatch(ctx context.Context, c client.Client, fresh bool, obj client.Object, mutate controllerutil.MutateFn) (controllerutil.OperationResult, error) {
	if fresh {
		blank := obj.DeepCopyObject()
		if err := mutate(); err != nil {
			return controllerutil.OperationResultNone, err
		}
		err := c.Create(ctx, obj)
		if err == nil {
			return controllerutil.OperationResultCreated, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return controllerutil.OperationResultNone, err
		}
		// Start over from the object as it was given, then read what is there.
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(blank).Elem())
	}
	return controllerutil.CreateOrPatch(ctx, c, obj, mutate)
}

// cachedCreateOrPatch is createOrPatch, except that when the object is not fresh and cached, a
// reader of the hub's cache, shows it already as mutate leaves it, nothing is sent. So a
// resync of clusters whose objects are in place reads nothing from the API server for them.
func cachedCreateOrPatch(ctx context.Context, c client.Client, cached client.Reader, fresh bool, obj client.Object, mutate controllerutil.MutateFn) error {
	if !fresh {
		blank := obj.DeepCopyObject()
		if err := cached.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil {
			before := obj.DeepCopyObject()
			if err := mutate(); err == nil && equality.Semantic.DeepEqual(before, obj) {
				return nil
			}
		}
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(blank).Elem())
	}
	_, err := createOrPatch(ctx, c, fresh, obj, mutate)
	return err
}

func mergeLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

// DefaultBootstrapTokenLifetime is the default lifetime of the token in an agent's bootstrap
// kubeconfig: long enough to install the agent, which then renews its credentials itself with
// short-lived tokens (agent/hubtoken) and no longer needs the bootstrap token.
const DefaultBootstrapTokenLifetime = 24 * time.Hour

// AgentKubeconfigOptions says which agent's bootstrap kubeconfig to make.
type AgentKubeconfigOptions struct {
	// Cluster is the agent cluster's registered name.
	Cluster string
	// Server is the hub API server URL as the agent reaches it; defaults to the host of the
	// hub config (inside the hub's cluster that is an in-cluster address: set it).
	Server string
	// CAData is the hub API server's CA bundle; defaults to the hub config's.
	CAData []byte
	// Duration is the token's requested lifetime (the API server may shorten it). Default
	// DefaultBootstrapTokenLifetime.
	Duration time.Duration
}

// AgentKubeconfig returns an agent's bootstrap kubeconfig: a token for its ServiceAccount (from
// the TokenRequest API), the hub's server URL and CA, and its cluster namespace as the default
// namespace. hub is the hub's own (privileged) configuration.
func AgentKubeconfig(ctx context.Context, hub *rest.Config, opts AgentKubeconfigOptions) ([]byte, error) {
	if opts.Cluster == "" {
		return nil, fmt.Errorf("agent kubeconfig: the cluster name is required")
	}
	if opts.Duration <= 0 {
		opts.Duration = DefaultBootstrapTokenLifetime
	}
	ns := mirror.Namespace(opts.Cluster)
	cs, err := kubernetes.NewForConfig(hub)
	if err != nil {
		return nil, fmt.Errorf("agent kubeconfig: hub client: %w", err)
	}
	secs := int64(opts.Duration / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("agent kubeconfig: no ServiceAccount %s/%s: is %q registered as an agent cluster, and has the hub started since?", ns, AgentServiceAccount, opts.Cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("agent kubeconfig: requesting a token for %s/%s: %w", ns, AgentServiceAccount, err)
	}
	server := opts.Server
	if server == "" {
		server = hub.Host
	}
	ca := opts.CAData
	if len(ca) == 0 {
		ca = hub.CAData
	}
	if len(ca) == 0 && hub.CAFile != "" {
		if ca, err = os.ReadFile(hub.CAFile); err != nil {
			return nil, fmt.Errorf("agent kubeconfig: reading the hub CA: %w", err)
		}
	}
	const name = "magos-hub"
	user := "magos-agent-" + opts.Cluster
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: server, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: user, Namespace: ns}},
		CurrentContext: name,
	}
	raw, err := clientcmd.Write(kc)
	if err != nil {
		return nil, fmt.Errorf("agent kubeconfig: writing: %w", err)
	}
	return raw, nil
}
