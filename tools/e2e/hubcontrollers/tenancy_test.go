package hubcontrollers_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// TestTenancy: a hub namespace belongs to the clusters bound to it, and an agent is untrusted
// input. The hub's config binds us-east-1 and eu-west-1 to the namespace "pay" and ap-south-1
// to "search" only.
func TestTenancy(t *testing.T) {
	const ns = "pay"
	w := start(t, devfleet.Options{Bindings: map[string][]string{
		usEast: {ns}, euWest: {ns, "search"}, apSouth: {"search"},
	}})
	w.Namespace(t, ns)
	web := map[string]string{"tier": "web"}
	for _, r := range regions {
		w.Workspace(t, r, ns, "web", "pay", web)
	}
	us, eu, ap := key(usEast, ns, "web"), key(euWest, ns, "web"), key(apSouth, ns, "web")
	w.WaitMirrored(t, us, eu, ap)

	t.Run("a cluster not bound to the namespace never counts in, holds or is granted by its Rollout", func(t *testing.T) {
		// ap-south-1's agent stops: were the cluster part of "pay", the step would wait for it.
		resume := w.Stop(t, apSouth)
		w.WaitAvailable(t, apSouth, false)
		w.CreateHub(t, hubtest.Rollout(ns, "pay", []string{"web"}, web))
		ro := w.WaitRollout(t, ns, "pay", Completed)
		if ro.Status.TotalWorkspaces != 2 || ro.Status.AppliedWorkspaces != 2 {
			t.Errorf("Rollout counts %d/%d Workspaces applied, want 2/2 (ap-south-1 is not bound to %s)", ro.Status.AppliedWorkspaces, ro.Status.TotalWorkspaces, ns)
		}
		if got := w.grants.For(ap); len(got) > 0 {
			t.Errorf("the Workspace of the unbound cluster was granted: %v", keysOf(got))
		}
		// The hub says so on the mirror, with an Event, and the agent carries it to the spoke.
		testenv.Eventually(t, wait, func() error {
			m, err := w.Mirror(apSouth, ns, "web")
			if err != nil {
				return err
			}
			if got := m.Annotations[keys.HubRefusal]; !strings.Contains(got, "cluster ap-south-1 is not bound to hub namespace pay") {
				return fmt.Errorf("mirror's %s = %q", keys.HubRefusal, got)
			}
			notes := w.eventNotes(t, mirror.Namespace(apSouth), "Workspace", m.Name)
			if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, "ClusterNotBound: cluster ap-south-1 is not bound") }) {
				return fmt.Errorf("no ClusterNotBound Event on the mirror in %q", notes)
			}
			return nil
		})
		resume()
		testenv.Eventually(t, wait, func() error {
			if got := w.SpokeWorkspace(t, apSouth, ns, "web").Annotations[keys.HubRefusal]; got == "" {
				return fmt.Errorf("the spoke Workspace does not carry %s yet", keys.HubRefusal)
			}
			return nil
		})
		if got := w.grants.For(ap); len(got) > 0 {
			t.Errorf("the Workspace of the unbound cluster was granted: %v", keysOf(got))
		}

		// Bound, it counts: the refusal goes and the Rollout takes the Workspace in.
		if err := w.f.Bind(w.ctx, apSouth, ns, "search"); err != nil {
			t.Fatal(err)
		}
		w.WaitRollout(t, ns, "pay", func(ro *magosv1.Rollout) error {
			if ro.Status.TotalWorkspaces != 3 {
				return fmt.Errorf("Rollout counts %d Workspaces, want 3 once ap-south-1 is bound", ro.Status.TotalWorkspaces)
			}
			return nil
		})
		testenv.Eventually(t, wait, func() error {
			if got, ok := w.SpokeWorkspace(t, apSouth, ns, "web").Annotations[keys.HubRefusal]; ok {
				return fmt.Errorf("the spoke Workspace still carries %s = %q", keys.HubRefusal, got)
			}
			return nil
		})
	})

	t.Run("a Project runs the Workspaces of the clusters bound to its namespace, and only those", func(t *testing.T) {
		// "search" is bound to eu-west-1 and ap-south-1 only.
		const search = "search"
		w.Namespace(t, search)
		var ks []string
		for _, r := range regions {
			w.Workspace(t, r, search, "index", "search", nil)
			ks = append(ks, key(r, search, "index"))
		}
		w.WaitMirrored(t, ks...)
		w.CreateHub(t, projectOf(search, "search", map[string]string{keys.Orchestration: keys.OrchestrationParallel}))
		w.granted(t, keys.GrantedByProject, key(euWest, search, "index"), key(apSouth, search, "index"))
		w.waitProject(t, search, "search", func(p *magosv1.Project) error {
			if p.Status.Workspaces != 2 || !slices.Equal(p.Status.Clusters, []string{apSouth, euWest}) {
				return fmt.Errorf("status counts %d Workspaces in %v, want 2 in [%s %s]", p.Status.Workspaces, p.Status.Clusters, apSouth, euWest)
			}
			return nil
		})
		testenv.Eventually(t, wait, func() error {
			if got := w.SpokeWorkspace(t, usEast, search, "index").Annotations[keys.HubRefusal]; !strings.Contains(got, "cluster us-east-1 is not bound to hub namespace search") {
				return fmt.Errorf("us-east-1's Workspace carries %s = %q", keys.HubRefusal, got)
			}
			return nil
		})
		if got := w.grants.For(key(usEast, search, "index")); len(got) > 0 {
			t.Errorf("the Workspace of the unbound cluster was granted by the Project: %v", keysOf(got))
		}
	})

	t.Run("mirrors an agent forges are ignored with an Event, and it cannot write another cluster's", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", w.f.AgentHubKubeconfig(usEast))
		if err != nil {
			t.Fatal(err)
		}
		agent, err := client.New(cfg, client.Options{Scheme: magosscheme.New()})
		if err != nil {
			t.Fatal(err)
		}
		forge := func(name string, labels map[string]string) *magosv1.Workspace {
			return &magosv1.Workspace{
				ObjectMeta: metav1.ObjectMeta{Namespace: mirror.Namespace(usEast), Name: name, Labels: labels},
				Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: "pay"},
					Source:    magosv1.Source{RepoURL: w.repo, TargetRevision: "main"},
					Terraform: magosv1.TerraformSpec{Version: demo.TofuVersion}},
			}
		}
		origin := func(cluster, name string) map[string]string {
			return map[string]string{keys.Mirror: "true", keys.Cluster: cluster, keys.OriginNamespace: ns, keys.OriginName: name, "tier": "web"}
		}
		// Each names an origin the agent's own sync leaves alone: a spoke Workspace that exists
		// (its mirror has another name), or one that does not (the agent deletes only the mirror
		// of that name, which does not exist).
		forged := map[string]*magosv1.Workspace{
			// in us-east-1's namespace, labelled eu-west-1's
			"claims another cluster": forge("web-eu", origin(euWest, "web")),
			// an origin whose mirror has another name: were it believed, us-east-1/pay/api
			// would join the step and be granted
			"claims another origin": forge("api-forged", origin(usEast, "api")),
		}
		for what, m := range forged {
			if err := agent.Create(w.ctx, m); err != nil {
				t.Fatalf("the agent creating a mirror that %s in its own namespace: %v", what, err)
			}
			m.Status = magosv1.WorkspaceStatus{Phase: magosv1.PhasePending, CurrentRunID: "forged-" + m.Name}
			if err := agent.Status().Update(w.ctx, m); err != nil {
				t.Fatalf("the agent writing the status of the mirror that %s: %v", what, err)
			}
		}
		// Another cluster's namespace is closed to it (RBAC).
		other := forge(mirror.Name(ns, "web"), origin(euWest, "web"))
		other.Namespace = mirror.Namespace(euWest)
		if err := agent.Create(w.ctx, other); !apierrors.IsForbidden(err) && !apierrors.IsAlreadyExists(err) {
			t.Errorf("the agent of %s writing a mirror in %s's namespace: %v, want Forbidden", usEast, euWest, err)
		}
		if err := agent.Update(w.ctx, other); !apierrors.IsForbidden(err) {
			t.Errorf("the agent of %s updating a mirror in %s's namespace: %v, want Forbidden", usEast, euWest, err)
		}

		// Nor can it grant itself a run: a grant on a mirror needs the verb grant, which only
		// the hub holds (the magos-workspace-requests admission policy). (A run of its own
		// minting: the mirror may still carry the hub's spent grant of its current run, which
		// the hub leaves in place, and a patch that changes nothing changes no grant.)
		own, err := w.Mirror(usEast, ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		const forgedRun = "20991231T000000-f0f0f0f0"
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+keys.ExecutionAllowed+`":"true","`+keys.GrantedRun+`":"`+forgedRun+`"}}}`))
		if err := agent.Patch(w.ctx, own, patch); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Errorf("the agent of %s granting its own mirror a run: %v, want refused by admission", usEast, err)
		}

		// Every mirror event makes the Rollout decide again; the forged mirrors take no part.
		testenv.Eventually(t, wait, func() error {
			for what, m := range forged {
				notes := w.eventNotes(t, mirror.Namespace(usEast), "Workspace", m.Name)
				if !slices.ContainsFunc(notes, func(n string) bool {
					return strings.HasPrefix(n, "MirrorRejected: ignored: mirror "+m.Namespace+"/"+m.Name)
				}) {
					return fmt.Errorf("no MirrorRejected Event on the mirror that %s in %q", what, notes)
				}
			}
			return nil
		})
		ro := w.WaitRollout(t, ns, "pay", Completed)
		if ro.Status.TotalWorkspaces != 3 {
			t.Errorf("Rollout counts %d Workspaces, want 3 (the forged mirrors count for nothing)", ro.Status.TotalWorkspaces)
		}
		for what, m := range forged {
			got := &magosv1.Workspace{}
			if err := w.f.Client("hub").Get(w.ctx, client.ObjectKeyFromObject(m), got); err != nil {
				t.Fatal(err)
			}
			if v, ok := got.Annotations[keys.ExecutionAllowed]; ok {
				t.Errorf("the forged mirror that %s was granted (%s=%s)", what, keys.ExecutionAllowed, v)
			}
		}
	})
}
