package mirror

import (
	rbacv1 "k8s.io/api/rbac/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// AgentRules are the agent's permissions on the hub, confined to its cluster namespace
// (Namespace) by the Role the hub's registry grants it there: its mirrors, copies of its runs'
// output (Secrets it creates and deletes, never reads), its heartbeat Lease, Events, and new
// tokens for its own ServiceAccount (the agent renews its credentials itself; resourceNames
// keeps it from minting a token for any other ServiceAccount). Nothing else on the hub.
func AgentRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{
			APIGroups: []string{magosv1.GroupVersion.Group},
			Resources: []string{"workspaces"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		},
		{
			// The status subresource serves get, update and patch only.
			APIGroups: []string{magosv1.GroupVersion.Group},
			Resources: []string{"workspaces/status"},
			Verbs:     []string{"get", "update", "patch"},
		},
		{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     []string{"get", "create", "update"},
		},
		{
			APIGroups: []string{"", "events.k8s.io"},
			Resources: []string{"events"},
			Verbs:     []string{"create", "patch"},
		},
		{
			// Copies of the output (plan text and log) of its Workspaces' runs, made and pruned
			// by name: the agent never reads a Secret on the hub (agent/hubsync).
			APIGroups: []string{""},
			Resources: []string{"secrets"},
			Verbs:     []string{"create", "delete"},
		},
		{
			// TokenRequest: POST .../serviceaccounts/<name>/token names the ServiceAccount, so
			// resourceNames applies.
			APIGroups:     []string{""},
			Resources:     []string{"serviceaccounts/token"},
			ResourceNames: []string{keys.AgentServiceAccount},
			Verbs:         []string{"create"},
		},
	}
}
