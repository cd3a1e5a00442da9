package fleetview

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
)

// ProjectIndex is the cache index of Workspaces by the Project they belong to: the value is
// "<namespace>/<projectRef>", where namespace is the Workspace's own, or its origin's for a
// mirror (decision.Workspace.MemberOf). Snapshot reads a Project's Workspaces through it.
const ProjectIndex = "magosproject.io/project"

// IndexWorkspaces adds ProjectIndex to the Workspace caches of mgr's clusters, current and
// future (the hub's shared cache for agent clusters, each direct cluster's own). Call it once,
// before the manager starts: a View reads through it, and on a manager without it every read
// fails (the cluster counts as ListFailed).
func IndexWorkspaces(ctx context.Context, mgr mcmanager.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &magosv1.Workspace{}, ProjectIndex, func(o client.Object) []string {
		ws, ok := o.(*magosv1.Workspace)
		if !ok || ws.Spec.ProjectRef.Name == "" {
			return nil
		}
		return []string{projectKey(originNamespace(ws), ws.Spec.ProjectRef.Name)}
	})
}

// originNamespace is the namespace a Workspace belongs to: its origin's for a mirror, as the
// mirror says (mirror.IdentityOf; readAgent then refuses a mirror that mirror.Check rejects).
func originNamespace(ws *magosv1.Workspace) string {
	return mirror.IdentityOf(ws).Namespace
}

func projectKey(namespace, project string) string { return namespace + "/" + project }

// ProjectIndexValue is the ProjectIndex value of the Workspaces of Project namespace/project:
// list them with client.MatchingFields{ProjectIndex: ProjectIndexValue(namespace, project)}.
func ProjectIndexValue(namespace, project string) string { return projectKey(namespace, project) }
