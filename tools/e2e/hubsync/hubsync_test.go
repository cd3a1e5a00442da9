package hubsync_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/magosfleet/magos/agent/hubsync"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

var (
	env *localcluster.Fleet
	hub *app.Hub
	// bootstrap holds each spoke's agent bootstrap kubeconfig, as the hub printed it.
	bootstrap = map[string]*rest.Config{}
)

var spokes = []string{"us-east-1", "eu-west-1", "ap-south-1"}

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.MainOptions{Fleet: localcluster.Options{Spokes: spokes}, Setup: setup})
}

// setup starts a hub registering the three spokes as agent clusters.
func setup(e *testenv.MainEnv) error {
	env = e.Fleet
	dir, err := os.MkdirTemp("", "hubsync-test-")
	if err != nil {
		return err
	}
	e.Cleanup(func(int) { _ = os.RemoveAll(dir) })
	file := filepath.Join(dir, "config.yaml")
	var body strings.Builder
	body.WriteString("clusters:\n")
	for _, s := range spokes {
		fmt.Fprintf(&body, "  - name: %s\n    labels: {region: %s}\n    agent: {}\n", s, s)
	}
	if err := os.WriteFile(file, []byte(body.String()), 0o600); err != nil {
		return err
	}
	cfg, err := registry.LoadConfig(file, nil)
	if err != nil {
		return err
	}
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	hub, err = app.New(app.Options{
		RestConfig: env.Hub.Config, Config: cfg, ConfigFile: file, Logger: ctrl.Log.WithName("hub"),
		HealthInterval: time.Second, SkipNameValidation: true,
		// The agent's hub sync is under test, not the hub's decisions.
		WithoutDecisionControllers: true,
		Fleet:                      fleet.Options{MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second},
	})
	if err != nil {
		return err
	}
	e.Background("hub", hub.Manager.Start)
	for _, s := range spokes {
		var raw []byte
		if err := localcluster.Poll(60*time.Second, func() (err error) {
			raw, err = registry.AgentKubeconfig(context.Background(), env.Hub.Config, registry.AgentKubeconfigOptions{Cluster: s, Duration: time.Hour})
			return err
		}); err != nil {
			return err
		}
		if bootstrap[s], err = clientcmd.RESTConfigFromKubeConfig(raw); err != nil {
			return err
		}
	}
	return nil
}

type agentOptions struct {
	heartbeat, lease time.Duration
	// statusFault, when set, can refuse mirror status writes (hubsync.Options.StatusFault).
	statusFault func(types.NamespacedName) error
	// bootstrap replaces the spoke's bootstrap kubeconfig.
	bootstrap *rest.Config
	// tokenExpiry, when set, has the agent renew its hub token (keeping it in tokenSecret).
	tokenExpiry time.Duration
	tokenSecret types.NamespacedName
	// version is the version the agent reports (default v0.1.3-test).
	version string
	// logger, when set, receives the agent manager's logs.
	logger *logr.Logger
	// progressHold is hubsync.Options.ProgressHold (0: its default).
	progressHold time.Duration
}

// startAgent runs an agent manager on a spoke with only the hub sync, authenticated on the hub
// with the spoke's bootstrap kubeconfig (or o.bootstrap). stop ends it (the test's end does too).
func startAgent(t testing.TB, cluster string, o agentOptions) (stop func()) {
	t.Helper()
	skip := true
	logger := ctrl.Log.WithName("agent")
	if o.logger != nil {
		logger = *o.logger
	}
	version := "v0.1.3-test"
	if o.version != "" {
		version = o.version
	}
	mgr, err := ctrl.NewManager(env.Spokes[cluster].Config, ctrl.Options{
		Scheme:  magosscheme.New(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&magosv1.Workspace{}: {Label: mirror.NotMirrors()},
		}},
		Controller: config.Controller{SkipNameValidation: &skip},
		Logger:     logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	hubConfig := bootstrap[cluster]
	if o.bootstrap != nil {
		hubConfig = o.bootstrap
	}
	opts := hubsync.Options{
		ClusterName: cluster, HubConfig: rest.CopyConfig(hubConfig), AgentVersion: version, HubQPS: benchQPS, HubBurst: 2 * int(benchQPS),
		Identity: "agent-0", HeartbeatInterval: o.heartbeat, LeaseDuration: o.lease,
		TokenExpiry: o.tokenExpiry, TokenSecret: o.tokenSecret, ProgressHold: o.progressHold,
	}
	if o.statusFault != nil {
		opts.StatusFault = o.statusFault
	}
	if err := hubsync.SetupWithManager(mgr, opts); err != nil {
		t.Fatal(err)
	}
	return testenv.Background(t, context.Background(), "agent "+cluster, mgr.Start)
}

func newWorkspace(ns, name string) *magosv1.Workspace {
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: "payments"},
			Source:     magosv1.Source{RepoURL: "file:///tmp/repo", TargetRevision: "main"},
			Terraform:  magosv1.TerraformSpec{Version: "1.10.6"},
		},
	}
}

func ensureNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// mirrorOf reads the hub's mirror of a spoke Workspace.
func mirrorOf(cluster, ns, name string) (*magosv1.Workspace, error) {
	m := &magosv1.Workspace{}
	err := env.Hub.Client.Get(context.Background(), client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name(ns, name)}, m)
	return m, err
}

// TestMirrorFollowsTheSpokeWorkspace creates, changes and deletes a spoke Workspace and checks
// its mirror's name, labels, annotations, spec, status and origin at each step.
func TestMirrorFollowsTheSpokeWorkspace(t *testing.T) {
	ctx := context.Background()
	const cluster = "us-east-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "mirror-test")
	startAgent(t, cluster, agentOptions{})

	ws := newWorkspace("mirror-test", "web")
	ws.Labels = map[string]string{"env": "prod", "tier": "front"}
	ws.Annotations = map[string]string{"team": "a", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
	if err := spoke.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		m, err := mirrorOf(cluster, "mirror-test", "web")
		if err != nil {
			return err
		}
		wantLabels := map[string]string{"env": "prod", "tier": "front", keys.Mirror: "true", keys.Cluster: cluster,
			keys.OriginNamespace: "mirror-test", keys.OriginName: "web"}
		if !maps.Equal(m.Labels, wantLabels) {
			return fmt.Errorf("mirror labels %v, want %v", m.Labels, wantLabels)
		}
		if !maps.Equal(m.Annotations, map[string]string{"team": "a"}) {
			return fmt.Errorf("mirror annotations %v, want only team=a", m.Annotations)
		}
		if m.Spec.Source.TargetRevision != "main" || m.Spec.ProjectRef.Name != "payments" {
			return fmt.Errorf("mirror spec %+v", m.Spec)
		}
		o := m.Status.Origin
		if o == nil || o.Cluster != cluster || o.Namespace != "mirror-test" || o.Name != "web" || o.UID != string(ws.UID) || o.Generation != 1 {
			return fmt.Errorf("mirror origin %+v", o)
		}
		return nil
	})

	// A spec change: the mirror's spec and origin generation follow.
	patch := []byte(`{"spec":{"source":{"targetRevision":"v2"}},"metadata":{"labels":{"tier":null}}}`)
	if err := spoke.Patch(ctx, ws, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		m, err := mirrorOf(cluster, "mirror-test", "web")
		if err != nil {
			return err
		}
		if m.Spec.Source.TargetRevision != "v2" || m.Status.Origin == nil || m.Status.Origin.Generation != 2 {
			return fmt.Errorf("mirror revision %s, origin %+v: want v2 at generation 2", m.Spec.Source.TargetRevision, m.Status.Origin)
		}
		if _, ok := m.Labels["tier"]; ok {
			return errors.New("the label removed on the spoke is still on the mirror")
		}
		return nil
	})

	// A status change: copied with the origin, in one write.
	ws.Status = magosv1.WorkspaceStatus{ObservedGeneration: 2, Phase: magosv1.PhasePending, Reason: magosv1.ReasonConfigurationChanged,
		CurrentRunID: "20260101T000000-abcdef01", CurrentRunTrigger: magosv1.TriggerConfiguration,
		Conditions: []metav1.Condition{{Type: magosv1.ConditionReady, Status: metav1.ConditionUnknown, Reason: "Pending", LastTransitionTime: metav1.Now()}}}
	if err := spoke.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		m, err := mirrorOf(cluster, "mirror-test", "web")
		if err != nil {
			return err
		}
		if m.Status.Phase != magosv1.PhasePending || m.Status.CurrentRunID != ws.Status.CurrentRunID || m.Status.ObservedGeneration != 2 ||
			meta.FindStatusCondition(m.Status.Conditions, magosv1.ConditionReady) == nil || m.Status.Origin == nil || m.Status.Origin.Generation != 2 {
			return fmt.Errorf("mirror status %+v", m.Status)
		}
		return nil
	})

	if err := spoke.Delete(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		_, err := mirrorOf(cluster, "mirror-test", "web")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("mirror still there (%v)", err)
	})
}

// TestDecisionsTravelDown has the hub grant a run on a mirror the way the Rollout controller
// does (a merge patch through the engaged cluster's client), then revoke it: the spoke Workspace
// gets the three decision keys, then loses them, and no other hub-side annotation goes down.
func TestDecisionsTravelDown(t *testing.T) {
	ctx := context.Background()
	const cluster = "us-east-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "decision-test")
	startAgent(t, cluster, agentOptions{})
	ws := newWorkspace("decision-test", "api")
	if err := spoke.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	var view client.Client
	var m *magosv1.Workspace
	testenv.Eventually(t, 60*time.Second, func() error {
		cl, err := hub.Manager.GetCluster(ctx, cluster)
		if err != nil {
			return err
		}
		view = cl.GetClient()
		m = &magosv1.Workspace{}
		return view.Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name("decision-test", "api")}, m)
	})

	grant := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true",%q:"run-1",%q:"rollout","hub-note":"stays up"}}}`,
		keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy)
	if err := view.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(grant))); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{keys.ExecutionAllowed: "true", keys.GrantedRun: "run-1", keys.GrantedBy: "rollout"}
	testenv.Eventually(t, 60*time.Second, func() error {
		got := &magosv1.Workspace{}
		if err := spoke.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
			return err
		}
		if !maps.Equal(mirror.Decisions(got), want) {
			return fmt.Errorf("spoke decision %v, want %v", mirror.Decisions(got), want)
		}
		if _, ok := got.Annotations["hub-note"]; ok {
			return errors.New("a non-decision annotation travelled down")
		}
		return nil
	})
	// The decision stays on the mirror (the up-sync never overwrites it).
	testenv.Consistently(t, 2*time.Second, func() error {
		got := &magosv1.Workspace{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
			return err
		}
		if !maps.Equal(mirror.Decisions(got), want) {
			return fmt.Errorf("mirror decision became %v", mirror.Decisions(got))
		}
		return nil
	})

	revoke := fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null,%q:null}}}`, keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy)
	if err := view.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(revoke))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		got := &magosv1.Workspace{}
		if err := spoke.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
			return err
		}
		if d := mirror.Decisions(got); len(d) != 0 {
			return fmt.Errorf("spoke still has the decision %v", d)
		}
		return nil
	})
}

// TestOrphanMirrorsAreDeletedOnStart leaves a mirror whose spoke Workspace is gone (the agent was
// down when it was deleted): a starting agent deletes it and mirrors the Workspace that exists.
func TestOrphanMirrorsAreDeletedOnStart(t *testing.T) {
	ctx := context.Background()
	const cluster = "eu-west-1"
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, "orphan-test")
	ghost := newWorkspace("orphan-test", "ghost")
	ghost.Labels = map[string]string{"env": "prod"}
	orphan := newWorkspace(mirror.Namespace(cluster), mirror.Name("orphan-test", "ghost"))
	orphan.Labels = mirror.Labels(cluster, ghost)
	if err := env.Hub.Client.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if err := spoke.Create(ctx, newWorkspace("orphan-test", "real")); err != nil {
		t.Fatal(err)
	}
	startAgent(t, cluster, agentOptions{})
	testenv.Eventually(t, 60*time.Second, func() error {
		if _, err := mirrorOf(cluster, "orphan-test", "ghost"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("orphan mirror: %v, want it deleted", err)
		}
		_, err := mirrorOf(cluster, "orphan-test", "real")
		return err
	})
}

// TestHeartbeatMakesTheClusterAvailable runs an agent that heartbeats every 500ms with a 3s
// lease: the hub's Cluster turns Available and shows the agent's version and heartbeat; once
// the agent stops, it turns unavailable within about the lease duration.
func TestHeartbeatMakesTheClusterAvailable(t *testing.T) {
	ctx := context.Background()
	const cluster = "ap-south-1"
	const lease = 3 * time.Second
	stop := startAgent(t, cluster, agentOptions{heartbeat: 500 * time.Millisecond, lease: lease})
	available := func(want metav1.ConditionStatus, reason string) func() error {
		return func() error {
			cl := &magosv1.Cluster{}
			if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: cluster}, cl); err != nil {
				return err
			}
			c := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionAvailable)
			if c == nil || c.Status != want || c.Reason != reason {
				return fmt.Errorf("Available = %+v, want %s/%s", c, want, reason)
			}
			if want == metav1.ConditionTrue && (cl.Status.AgentVersion != "v0.1.3-test" || cl.Status.LastHeartbeatTime == nil) {
				return fmt.Errorf("agent version %q, heartbeat %v", cl.Status.AgentVersion, cl.Status.LastHeartbeatTime)
			}
			return nil
		}
	}
	testenv.Eventually(t, 60*time.Second, available(metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating))
	l := &coordinationv1.Lease{}
	if err := env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: keys.AgentLease}, l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != cluster+"/agent-0" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("lease spec %+v", l.Spec)
	}
	// It stays available while the agent runs (renewals beat the lease).
	testenv.Consistently(t, 2*lease, available(metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating))

	stop()
	stopped := time.Now()
	testenv.Eventually(t, 30*time.Second, available(metav1.ConditionFalse, magosv1.ReasonAgentSilent))
	if took := time.Since(stopped); took > lease+5*time.Second {
		t.Errorf("unavailable %s after the agent stopped, want within about the lease duration (%s)", took, lease)
	}
	t.Logf("the stopped agent's cluster turned unavailable after %s (lease %s)", time.Since(stopped).Round(10*time.Millisecond), lease)
}

// TestAgentCredentialsAreConfinedToItsNamespace uses an agent's bootstrap credentials against
// the hub's real RBAC: it can work with Workspaces in its own namespace, and everything else is
// Forbidden: another cluster's namespace, Projects, Rollouts, Cluster objects, Secrets, RBAC.
func TestAgentCredentialsAreConfinedToItsNamespace(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(bootstrap["us-east-1"], client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	own, other := mirror.Namespace("us-east-1"), mirror.Namespace("eu-west-1")
	theirs := newWorkspace(other, "theirs-"+fmt.Sprint(time.Now().UnixNano()%100000))
	if err := env.Hub.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	ensureNamespace(t, env.Hub.Client, "payments")

	// What it needs works.
	allowed := map[string]func() error{
		"list own Workspaces": func() error { return c.List(ctx, &magosv1.WorkspaceList{}, client.InNamespace(own)) },
		"create own Workspace": func() error {
			return c.Create(ctx, newWorkspace(own, "sec-"+fmt.Sprint(time.Now().UnixNano()%100000)))
		},
		"get own Lease": func() error {
			err := c.Get(ctx, client.ObjectKey{Namespace: own, Name: keys.AgentLease}, &coordinationv1.Lease{})
			return client.IgnoreNotFound(err)
		},
	}
	for name, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`))
	forbidden := map[string]func() error{
		"list another cluster's Workspaces": func() error { return c.List(ctx, &magosv1.WorkspaceList{}, client.InNamespace(other)) },
		"get another cluster's Workspace":   func() error { return c.Get(ctx, client.ObjectKeyFromObject(theirs), &magosv1.Workspace{}) },
		"create in another cluster's namespace": func() error {
			return c.Create(ctx, newWorkspace(other, "intruder"))
		},
		"patch another cluster's Workspace":  func() error { return c.Patch(ctx, theirs.DeepCopy(), patch) },
		"delete another cluster's Workspace": func() error { return c.Delete(ctx, theirs.DeepCopy()) },
		"patch another cluster's status": func() error {
			return c.Status().Patch(ctx, theirs.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Applied"}}`)))
		},
		"renew another cluster's Lease": func() error {
			return c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: keys.AgentLease}})
		},
		"list Workspaces in all namespaces": func() error { return c.List(ctx, &magosv1.WorkspaceList{}) },
		"list Projects":                     func() error { return c.List(ctx, &magosv1.ProjectList{}, client.InNamespace("payments")) },
		"list Projects in its namespace":    func() error { return c.List(ctx, &magosv1.ProjectList{}, client.InNamespace(own)) },
		"create a Project": func() error {
			return c.Create(ctx, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "p"}})
		},
		"list Rollouts": func() error { return c.List(ctx, &magosv1.RolloutList{}, client.InNamespace("payments")) },
		"get a Rollout": func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: "payments", Name: "r"}, &magosv1.Rollout{})
		},
		"list Clusters": func() error { return c.List(ctx, &magosv1.ClusterList{}) },
		"get its Cluster": func() error {
			return c.Get(ctx, client.ObjectKey{Name: "us-east-1"}, &magosv1.Cluster{})
		},
		"patch its Cluster status": func() error {
			cl := &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "us-east-1"}}
			return c.Status().Patch(ctx, cl, client.RawPatch(types.MergePatchType, []byte(`{"status":{"workspaces":7}}`)))
		},
		"list Secrets in its namespace": func() error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace(own)) },
		"list Leases in its namespace":  func() error { return c.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(own)) },
		"bind itself a Role": func() error {
			return c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "escalate"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: own, Name: registry.AgentServiceAccount}}})
		},
		"list namespaces": func() error { return c.List(ctx, &corev1.NamespaceList{}) },
	}
	for name, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", name, err)
		}
	}
}

// TestAgentMintsTokensOnlyForItsOwnServiceAccount uses an agent's bootstrap credentials against
// the hub's real RBAC: a TokenRequest for its own ServiceAccount is granted (and the new token
// authenticates as that ServiceAccount); one for another ServiceAccount of its namespace, or for
// another cluster's agent, is Forbidden, although both ServiceAccounts exist.
func TestAgentMintsTokensOnlyForItsOwnServiceAccount(t *testing.T) {
	ctx := context.Background()
	own, other := mirror.Namespace("us-east-1"), mirror.Namespace("eu-west-1")
	agent := kubernetes.NewForConfigOrDie(bootstrap["us-east-1"])
	neighbour := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "token-test-neighbour"}}
	if err := env.Hub.Client.Create(ctx, neighbour); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	request := func() *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	}

	tr, err := agent.CoreV1().ServiceAccounts(own).CreateToken(ctx, registry.AgentServiceAccount, request(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for its own ServiceAccount: %v", err)
	}
	renewed := rest.CopyConfig(bootstrap["us-east-1"])
	renewed.BearerToken = tr.Status.Token
	review, err := kubernetes.NewForConfigOrDie(renewed).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + own + ":" + registry.AgentServiceAccount; review.Status.UserInfo.Username != want {
		t.Errorf("the renewed token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}

	for name, sa := range map[string]types.NamespacedName{
		"another ServiceAccount of its namespace": {Namespace: own, Name: neighbour.Name},
		"another cluster's agent":                 {Namespace: other, Name: registry.AgentServiceAccount},
	} {
		if err := env.Hub.Client.Get(ctx, client.ObjectKey(sa), &corev1.ServiceAccount{}); err != nil {
			t.Fatalf("%s %s: %v", name, sa, err)
		}
		_, err := agent.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, request(), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("a token for %s (%s): %v, want Forbidden", name, sa, err)
		}
	}
	// Nor may it create ServiceAccounts to mint tokens for.
	agentClient, err := client.New(bootstrap["us-east-1"], client.Options{Scheme: magosscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	err = agentClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "minted"}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("creating a ServiceAccount: %v, want Forbidden", err)
	}
}

// benchQPS is the agent's hub QPS in tests (0: the default); MAGOS_BENCH_HUB_QPS overrides it.
var benchQPS = func() float32 {
	var q float32
	_, _ = fmt.Sscan(os.Getenv("MAGOS_BENCH_HUB_QPS"), &q)
	return q
}()
