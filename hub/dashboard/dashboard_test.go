package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/dashboard"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/hub/rolloutgrid"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/logging"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// fixture is a real hub (app.New on a real API server) serving its dashboard, with two agent
// clusters: us-east-1 bound to team-a only, eu-west-1 bound to team-a and team-b. No agent
// runs: the test writes the mirrors as an agent would (a simulated agent), which is what the
// dashboard reads.
type fixture struct {
	t     testing.TB
	ctx   context.Context
	admin client.Client
	cs    *kubernetes.Clientset
	cfg   *rest.Config
	base  string
}

const hubConfig = `
clusters:
- name: us-east-1
  labels: {region: us-east-1}
  agent: {}
- name: eu-west-1
  labels: {region: eu-west-1}
  agent: {}
bindings:
- namespaces: [team-a]
  clusters: [us-east-1, eu-west-1]
- namespaces: [team-b]
  clusters: [eu-west-1]
dashboard:
  bindAddress: 127.0.0.1:0
`

func start(t testing.TB) *fixture { return startWith(t, hubConfig) }

// startWith starts the fixture with a hub config file.
func startWith(t testing.TB, config string) *fixture {
	t.Helper()
	env := testenv.Start(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	file := filepath.Join(t.TempDir(), "hub.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.LoadConfig(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	log, err := logging.New(logging.Options{Development: true, Level: "error"})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := app.New(app.Options{
		RestConfig: env.Hub.Config, Config: cfg, ConfigFile: file, Logger: log, SkipNameValidation: true,
		// The fixture writes the Rollouts' and Workspaces' status itself.
		WithoutDecisionControllers: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := testenv.Background(t, ctx, "the hub", hub.Manager.Start)
	t.Cleanup(stop)
	addr, err := hub.Dashboard.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, admin: env.Hub.Client, cs: cs, cfg: env.Hub.Config, base: "http://" + addr}
	for _, ns := range []string{"team-a", "team-b"} {
		f.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	testenv.Eventually(t, time.Minute, func() error {
		for _, c := range cfg.Clusters {
			c := c.Name
			if err := f.admin.Get(ctx, client.ObjectKey{Name: mirror.Namespace(c)}, &corev1.Namespace{}); err != nil {
				return fmt.Errorf("cluster %s's hub namespace: %w", c, err)
			}
		}
		return nil
	})
	return f
}

func (f *fixture) create(obj client.Object) {
	f.t.Helper()
	if err := f.admin.Create(f.ctx, obj); err != nil {
		f.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// user creates ServiceAccount name in namespace ns, bound to a Role there with rules, and
// returns a token of it.
func (f *fixture) user(ns, name string, rules ...rbacv1.PolicyRule) string {
	f.t.Helper()
	f.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if len(rules) > 0 {
		f.create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules})
		f.create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}})
	}
	tr, err := f.cs.CoreV1().ServiceAccounts(ns).CreateToken(f.ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return tr.Status.Token
}

func read(resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{magosv1.GroupVersion.Group}, Resources: resources, Verbs: []string{"get", "list", "watch"}}
}

// mirror writes, as cluster's agent would, the mirror of Workspace ns/name with the phase.
func (f *fixture) mirror(cluster, ns, name, project string, labels map[string]string, phase magosv1.Phase) *magosv1.Workspace {
	f.t.Helper()
	origin := hubtest.Workspace(ns, name, project, labels)
	m := origin.DeepCopy()
	m.Namespace, m.Name, m.Labels = mirror.Namespace(cluster), mirror.Name(ns, name), mirror.Labels(cluster, origin)
	f.create(m)
	m.Status.Phase, m.Status.ObservedRevision = phase, strings.Repeat("a", 40)
	if err := f.admin.Status().Update(f.ctx, m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// get GETs path with the token (none if empty) and decodes the JSON answer into out; it
// returns the HTTP status.
func (f *fixture) get(token, path string, out any) int {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.base+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			f.t.Fatalf("GET %s: %d %q: %v", path, res.StatusCode, body, err)
		}
	}
	return res.StatusCode
}

// cells is a grid's Workspaces as "step/cluster/namespace/name=phase", in order.
func cells(g rolloutgrid.Grid) []string {
	var out []string
	for _, s := range g.Steps {
		for _, w := range s.Workspaces {
			out = append(out, fmt.Sprintf("%s/%s/%s/%s=%s", s.Name, w.Cluster, w.Namespace, w.Name, w.Phase))
		}
	}
	return out
}

// TestDashboardAPI: the dashboard answers only callers with a token the hub's API server
// accepts, shows each what RBAC lets them read and nothing else, builds a Rollout's grid from
// the mirrors the hub believes (not those of an unbound cluster, nor a forged one), serves a
// Workspace's run records, and keeps a signed-in browser's token in an HttpOnly cookie.
func TestDashboardAPI(t *testing.T) {
	f := start(t)
	viewer := f.user("team-a", "viewer", read("rollouts", "workspaces"))
	rolloutsOnly := f.user("team-a", "rollouts-only", read("rollouts"))
	outsider := f.user("team-b", "outsider")

	f.create(hubtest.Rollout("team-a", "web", []string{"us", "eu"}, map[string]string{"region": "us-east-1"}, map[string]string{"region": "eu-west-1"}))
	f.create(hubtest.Rollout("team-b", "db", []string{"all"}, map[string]string{"tier": "db"}))
	f.mirror("us-east-1", "team-a", "web", "web", map[string]string{"region": "us-east-1"}, magosv1.PhaseApplied)
	eu := f.mirror("eu-west-1", "team-a", "web", "web", map[string]string{"region": "eu-west-1"}, magosv1.PhaseIdle)
	f.mirror("eu-west-1", "team-a", "api", "other", map[string]string{"region": "eu-west-1"}, magosv1.PhaseIdle) // another Project
	f.mirror("us-east-1", "team-b", "db", "db", map[string]string{"tier": "db"}, magosv1.PhaseIdle)              // us-east-1 is not bound to team-b
	f.mirror("eu-west-1", "team-b", "db", "db", map[string]string{"tier": "db"}, magosv1.PhaseIdle)
	// A forged mirror: in eu-west-1's namespace, claiming to speak for us-east-1.
	forged := hubtest.Workspace("team-a", "forged", "web", map[string]string{"region": "us-east-1"})
	forged.Labels = mirror.Labels("us-east-1", forged)
	forged.Namespace, forged.Name = mirror.Namespace("eu-west-1"), mirror.Name("team-a", "forged")
	f.create(forged)

	// Who may come in.
	if got := f.get("", "/api/v1/rollouts", nil); got != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", got)
	}
	if got := f.get("not-a-token", "/api/v1/rollouts", nil); got != http.StatusUnauthorized {
		t.Errorf("a token the API server does not know: %d, want 401", got)
	}
	var me dashboard.Whoami
	if got := f.get(viewer, "/api/v1/whoami", &me); got != http.StatusOK || me.User != "system:serviceaccount:team-a:viewer" {
		t.Errorf("whoami: %d %+v", got, me)
	}

	// What each may see.
	var list dashboard.RolloutList
	testenv.Eventually(t, 30*time.Second, func() error {
		list = dashboard.RolloutList{}
		if got := f.get(viewer, "/api/v1/rollouts", &list); got != http.StatusOK || len(list.Items) == 0 {
			return fmt.Errorf("rollouts: %d %+v", got, list)
		}
		return nil
	})
	if len(list.Items) != 1 || list.Items[0].Namespace != "team-a" || list.Items[0].Name != "web" || list.Items[0].Steps != 2 {
		t.Errorf("the viewer of team-a lists %+v, want team-a/web only", list.Items)
	}
	list = dashboard.RolloutList{}
	if got := f.get(outsider, "/api/v1/rollouts", &list); got != http.StatusOK || len(list.Items) != 0 {
		t.Errorf("a user with no role lists %d %+v, want none", got, list.Items)
	}
	var e dashboard.Error
	if got := f.get(viewer, "/api/v1/namespaces/team-b/rollouts/db", &e); got != http.StatusForbidden || !strings.Contains(e.Error, "may not get rollouts db") {
		t.Errorf("team-a's viewer reading team-b's Rollout: %d %q, want 403", got, e.Error)
	}
	if got := f.get(rolloutsOnly, "/api/v1/namespaces/team-a/rollouts/web", &e); got != http.StatusForbidden || !strings.Contains(e.Error, "may not list workspaces") {
		t.Errorf("a grid for a user who may not list Workspaces: %d %q, want 403", got, e.Error)
	}
	if got := f.get(viewer, "/api/v1/namespaces/team-a/rollouts/nope", &e); got != http.StatusNotFound {
		t.Errorf("a Rollout that does not exist: %d %q, want 404", got, e.Error)
	}
	if got := f.get(viewer, "/api/v1/clusters", &e); got != http.StatusForbidden {
		t.Errorf("clusters for a user who may not list them: %d, want 403", got)
	}

	// The grid: the mirrors the hub believes, of the Project, in bound clusters.
	want := []string{"us/us-east-1/team-a/web=Applied", "eu/eu-west-1/team-a/web=Idle"}
	var g rolloutgrid.Grid
	testenv.Eventually(t, 30*time.Second, func() error {
		g = rolloutgrid.Grid{}
		if got := f.get(viewer, "/api/v1/namespaces/team-a/rollouts/web", &g); got != http.StatusOK {
			return fmt.Errorf("grid: %d", got)
		}
		if !slices.Equal(cells(g), want) {
			return fmt.Errorf("grid cells %v, want %v", cells(g), want)
		}
		return nil
	})
	if !slices.Equal(g.Clusters, []string{"us-east-1", "eu-west-1"}) || g.Phase != "Unknown" {
		t.Errorf("grid columns %v, phase %q", g.Clusters, g.Phase)
	}
	admin := f.user("team-b", "admin-b", read("rollouts", "workspaces"))
	testenv.Eventually(t, 30*time.Second, func() error {
		g = rolloutgrid.Grid{}
		f.get(admin, "/api/v1/namespaces/team-b/rollouts/db", &g)
		if got := cells(g); !slices.Equal(got, []string{"all/eu-west-1/team-b/db=Idle"}) {
			return fmt.Errorf("team-b's grid %v: want eu-west-1's Workspace only (us-east-1 is not bound to team-b)", got)
		}
		return nil
	})

	// Runs, from the mirror's status.runs (which the hub's cache leaves out).
	eu.Status.Runs = []magosv1.RunRecord{{RunID: "20261205T070000-0badcafe", Trigger: "NewCommit", Phase: magosv1.PhaseApplied,
		Operations: []magosv1.RunOperation{{Operation: "plan", Outcome: "Succeeded", OutputSecret: "web-20261205t070000-0badcafe-plan"}}}}
	if err := f.admin.Status().Update(f.ctx, eu); err != nil {
		t.Fatal(err)
	}
	// Drift: the Workspace's last drift check, and the step's drifted Workspaces.
	eu.Status.Drift = &magosv1.DriftStatus{Result: magosv1.DriftResultDrifted, Drifted: true, Revision: eu.Status.ObservedRevision, PlanDigest: "dd1"}
	if err := f.admin.Status().Update(f.ctx, eu); err != nil {
		t.Fatal(err)
	}
	var web magosv1.Rollout
	if err := f.admin.Get(f.ctx, client.ObjectKey{Namespace: "team-a", Name: "web"}, &web); err != nil {
		t.Fatal(err)
	}
	web.Status = magosv1.RolloutStatus{Phase: magosv1.PhaseReconciling, Reason: magosv1.ReasonDriftDetected, ObservedGeneration: web.Generation,
		Steps: []magosv1.StepStatus{{Name: "us", Phase: magosv1.StepCompleted},
			{Name: "eu", Phase: magosv1.StepDriftBlocked, Drifted: []string{"eu-west-1/team-a/web"}}}}
	if err := f.admin.Status().Update(f.ctx, &web); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		g = rolloutgrid.Grid{}
		if got := f.get(viewer, "/api/v1/namespaces/team-a/rollouts/web", &g); got != http.StatusOK || len(g.Steps) != 2 {
			return fmt.Errorf("grid: %d", got)
		}
		us, eu := g.Steps[0], g.Steps[1]
		if len(us.Workspaces) != 1 || us.Workspaces[0].Drift != "" || us.Workspaces[0].Drifted {
			return fmt.Errorf("step us %+v: want a Workspace without drift", us.Workspaces)
		}
		if len(eu.Workspaces) != 1 || eu.Workspaces[0].Drift != magosv1.DriftResultDrifted || !eu.Workspaces[0].Drifted ||
			eu.Status == nil || !slices.Equal(eu.Status.Drifted, []string{"eu-west-1/team-a/web"}) || eu.State != "DriftBlocked (1 drifted)" {
			return fmt.Errorf("step eu %q %+v (status %+v): want eu-west-1/team-a/web drifted", eu.State, eu.Workspaces, eu.Status)
		}
		return nil
	})

	var runs dashboard.Runs
	if got := f.get(viewer, "/api/v1/clusters/eu-west-1/namespaces/team-a/workspaces/web/runs", &runs); got != http.StatusOK ||
		len(runs.Runs) != 1 || runs.Runs[0].RunID != "20261205T070000-0badcafe" || runs.Runs[0].Operations[0].OutputSecret == "" {
		t.Errorf("runs: %d %+v", got, runs)
	}
	if got := f.get(outsider, "/api/v1/clusters/eu-west-1/namespaces/team-a/workspaces/web/runs", &e); got != http.StatusForbidden {
		t.Errorf("runs for a user of another namespace: %d, want 403", got)
	}
	if got := f.get(viewer, "/api/v1/clusters/eu-west-1/namespaces/team-a/workspaces/forged/runs", &e); got != http.StatusNotFound {
		t.Errorf("runs of a forged mirror: %d %q, want 404", got, e.Error)
	}

	// A run's output, read with the caller's own token: RBAC on the Secrets of the cluster's hub
	// namespace decides.
	output := "/api/v1/clusters/eu-west-1/namespaces/team-a/workspaces/web/runs/20261205T070000-0badcafe/plan"
	if got := f.get(viewer, output, &e); got != http.StatusForbidden ||
		!strings.Contains(e.Error, "system:serviceaccount:team-a:viewer may not get secrets in namespace magos-cluster-eu-west-1") {
		t.Errorf("plan for a user who may not read Secrets there: %d %q, want 403", got, e.Error)
	}
	hubNS := mirror.Namespace("eu-west-1")
	f.create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: "plan-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}})
	f.create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: "plan-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "plan-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "viewer"}}})
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := f.get(viewer, output, &e); got != http.StatusNotFound || !strings.Contains(e.Error, "the hub has no copy of its output") {
			return fmt.Errorf("plan with no copy on the hub: %d %q, want 404", got, e.Error)
		}
		return nil
	})
	// The agent's copy (written here by hand, as the agent names it: after the mirror).
	f.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: eu.Name + "-20261205t070000-0badcafe-plan",
		Annotations: map[string]string{"magosproject.io/output-bytes": "4242", "magosproject.io/log-truncated": "true"}},
		Type: "magosproject.io/run-output", Data: map[string][]byte{"plan.gz": hubtest.Gzip(t, "Plan: 1 to add.\n"), "log.gz": hubtest.Gzip(t, "...the end of the log\n")}})
	var out dashboard.RunOutput
	if got := f.get(viewer, output, &out); got != http.StatusOK || out.PlanText != "Plan: 1 to add.\n" || out.Log != "...the end of the log\n" ||
		!out.LogTruncated || out.PlanTruncated || out.OutputBytes != 4242 || out.Outcome != "Succeeded" || out.RunID != "20261205T070000-0badcafe" {
		t.Errorf("plan: %d %+v", got, out)
	}
	if got := f.get(viewer, strings.Replace(output, "/plan", "/apply", 1), &e); got != http.StatusNotFound || !strings.Contains(e.Error, "no such recorded operation") {
		t.Errorf("an operation the run did not record: %d %q, want 404", got, e.Error)
	}
	if got := f.get(outsider, output, &e); got != http.StatusForbidden {
		t.Errorf("plan for a user of another namespace: %d, want 403", got)
	}

	// A browser signs in once; the token lives in an HttpOnly cookie.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	res, err := browser.PostForm(f.base+"/login", url.Values{"token": {viewer}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Set-Cookie"), "HttpOnly") || !strings.Contains(res.Header.Get("Set-Cookie"), "SameSite=Strict") {
		t.Errorf("login: %d, Set-Cookie %q", res.StatusCode, res.Header.Get("Set-Cookie"))
	}
	if res, err = browser.Get(f.base + "/api/v1/whoami"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("whoami with the cookie: %v %v", res.StatusCode, err)
	}
	res.Body.Close()
	if res, err = browser.PostForm(f.base+"/login", url.Values{"token": {"forged"}}); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a bad token: %v %v, want 401", res.StatusCode, err)
	}
	res.Body.Close()
	if res, err = browser.Get(f.base + "/"); err != nil || res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("the page: %v %v, CSP %q", res.StatusCode, err, res.Header.Get("Content-Security-Policy"))
	}
	res.Body.Close()
}

// event is one server-sent event.
type event struct{ name, data string }

// events reads the server-sent events of a stream into a channel.
func events(t *testing.T, ctx context.Context, f *fixture, token, path string) <-chan event {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := make(chan event, 16)
	go func() {
		defer res.Body.Close()
		defer close(out)
		r := bufio.NewReader(res.Body)
		var ev event
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				out <- ev
				ev = event{}
			}
		}
	}()
	return out
}

// awaitUpdate reads the stream's events until an update, decoded as T, shows what want says
// (shows returns true), or fails the test when the stream or ctx ends first.
func awaitUpdate[T any](t *testing.T, ctx context.Context, stream <-chan event, want string, shows func(T) bool) {
	t.Helper()
	for {
		select {
		case ev, ok := <-stream:
			if !ok {
				t.Fatalf("the stream ended before showing %s", want)
			}
			var v T
			if ev.name != "update" || json.Unmarshal([]byte(ev.data), &v) != nil {
				t.Fatalf("event %q: %s", ev.name, ev.data)
			}
			if shows(v) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no event showing %s", want)
		}
	}
}

// TestDashboardStream: the stream of a Rollout's grid sends the grid at once and again when a
// mirror's phase changes, and a stream for a Rollout the caller may not read is refused.
func TestDashboardStream(t *testing.T) {
	f := start(t)
	viewer := f.user("team-a", "viewer", read("rollouts", "workspaces"))
	f.create(hubtest.Rollout("team-a", "web", []string{"us", "eu"}, map[string]string{"region": "us-east-1"}, map[string]string{"region": "eu-west-1"}))
	us := f.mirror("us-east-1", "team-a", "web", "web", map[string]string{"region": "us-east-1"}, magosv1.PhaseIdle)

	var e dashboard.Error
	if got := f.get(f.user("team-b", "outsider"), "/api/v1/watch/namespaces/team-a/rollouts/web", &e); got != http.StatusForbidden {
		t.Errorf("a stream for a user of another namespace: %d %q, want 403", got, e.Error)
	}
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	stream := events(t, ctx, f, viewer, "/api/v1/watch/namespaces/team-a/rollouts/web")
	next := func(want string) {
		t.Helper()
		awaitUpdate(t, ctx, stream, want, func(g rolloutgrid.Grid) bool { return slices.Contains(cells(g), want) })
	}
	next("us/us-east-1/team-a/web=Idle")
	us.Status.Phase = magosv1.PhaseApplying
	if err := f.admin.Status().Update(f.ctx, us); err != nil {
		t.Fatal(err)
	}
	next("us/us-east-1/team-a/web=Applying")
}
