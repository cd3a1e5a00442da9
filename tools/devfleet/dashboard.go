package devfleet

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
)

// DashboardViewer is the ServiceAccount (in the hub's default namespace) and the ClusterRole of
// DashboardToken: read access to every Magos object, nothing else.
const DashboardViewer = "magos-dashboard-viewer"

// DashboardURL is the address of the hub's dashboard (Options.Dashboard, or the port chosen for
// AnyAddress), or "" when off.
func (f *Fleet) DashboardURL() string {
	if f.dashboard == "" {
		return ""
	}
	return "http://" + f.dashboard
}

// RunOutputReader is the ClusterRole that may get Secrets, which DashboardToken binds to
// DashboardViewer in each agent cluster's hub namespace only: there, the Secrets are the copies
// of run output (plan text and logs) the agent keeps.
const RunOutputReader = "magos-run-output-reader"

// DashboardToken returns a token, valid for an hour, of the ServiceAccount DashboardViewer,
// which it creates with a ClusterRole that may read every Magos object, and RunOutputReader in
// the hub namespace of each agent cluster: what a person signs in to the dashboard with.
func (f *Fleet) DashboardToken(ctx context.Context) (string, error) {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: DashboardViewer}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DashboardViewer}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{magosv1.GroupVersion.Group},
			Resources: []string{"rollouts", "projects", "workspaces", "clusters"},
			Verbs:     []string{"get", "list", "watch"},
		}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: DashboardViewer},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DashboardViewer},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: corev1.NamespaceDefault, Name: DashboardViewer}}},
	}
	// Run output: the copies agents keep in their clusters' hub namespaces, readable there only.
	objs = append(objs, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: RunOutputReader}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
	}}})
	agentClusters := f.Order
	if f.single {
		agentClusters = nil // its one cluster is direct: no hub namespace, no copies
	}
	for _, name := range agentClusters {
		objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: mirror.Namespace(name), Name: DashboardViewer},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RunOutputReader},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: corev1.NamespaceDefault, Name: DashboardViewer}}})
	}
	if err := f.createAll(ctx, objs); err != nil {
		return "", fmt.Errorf("the dashboard viewer: %w", err)
	}
	return f.token(ctx, DashboardViewer)
}

// DashboardOperator is the ServiceAccount (in the hub's default namespace) and the ClusterRoles
// of OperatorToken: what a person on call holds on the hub.
const DashboardOperator = "magos-dashboard-operator"

// OperatorToken returns a token, valid for an hour, of the ServiceAccount DashboardOperator,
// which it creates with what a person on call holds on the hub: read every Magos object;
// update, patch and approve Rollouts (approve or reject a step's plans, pause, resume); and in
// each agent cluster's hub namespace, patch and retry the mirrors and read the run output. It
// is what the dashboard's actions are tried with.
func (f *Fleet) OperatorToken(ctx context.Context) (string, error) {
	group := magosv1.GroupVersion.Group
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: corev1.NamespaceDefault, Name: DashboardOperator}}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: DashboardOperator}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DashboardOperator}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{"rollouts", "projects", "workspaces", "clusters"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{group}, Resources: []string{"rollouts"}, Verbs: []string{"update", "patch", "approve"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: DashboardOperator},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DashboardOperator}, Subjects: subject},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DashboardOperator + "-mirrors"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{"workspaces"}, Verbs: []string{"patch", "retry"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		}},
	}
	if !f.single {
		for _, name := range f.Order {
			objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: mirror.Namespace(name), Name: DashboardOperator},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: DashboardOperator + "-mirrors"}, Subjects: subject})
		}
	}
	if err := f.createAll(ctx, objs); err != nil {
		return "", fmt.Errorf("the dashboard operator: %w", err)
	}
	return f.token(ctx, DashboardOperator)
}

// createAll creates objs on the hub, leaving those that exist; a cluster's hub namespace
// appears once the hub has registered it, so each is tried for up to a minute.
func (f *Fleet) createAll(ctx context.Context, objs []client.Object) error {
	for _, o := range objs {
		err := localcluster.Poll(time.Minute, func() error {
			if err := f.Hub.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// token returns a token, valid for an hour, of ServiceAccount default/name on the hub.
func (f *Fleet) token(ctx context.Context, name string) (string, error) {
	cs, err := kubernetes.NewForConfig(f.Hub.Config)
	if err != nil {
		return "", err
	}
	secs := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(corev1.NamespaceDefault).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of %s: %w", name, err)
	}
	return tr.Status.Token, nil
}
