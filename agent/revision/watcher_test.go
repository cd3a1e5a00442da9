package revision_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/credentials"
	"github.com/magosfleet/magos/agent/revision"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// resolveLog counts the polls per ref and records the credentials they used.
type resolveLog struct {
	mu    sync.Mutex
	calls map[string]int
	users map[string]string
}

func (r *resolveLog) resolve(ctx context.Context, o gitrepo.ResolveOptions) (string, error) {
	r.mu.Lock()
	r.calls[o.URL+"#"+o.Ref]++
	r.users[o.URL+"#"+o.Ref] = o.Auth.Username
	r.mu.Unlock()
	return gitrepo.Resolve(ctx, o)
}

func (r *resolveLog) count(ref string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[ref]
}

// TestWatcher: Workspaces tracking the same ref share one poll per interval, made with the
// repository's credentials; a new commit marks every one of them that has not run it; a
// pinned commit is never polled; a Workspace that moves to another ref moves its polling too.
func TestWatcher(t *testing.T) {
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"git"}})
	cluster := fleet.Spokes["git"]
	c := cluster.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cacheOpts, err := app.CacheOptions()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cluster.Config, ctrl.Options{
		Scheme:     magosscheme.New(),
		Cache:      cacheOpts,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	log := &resolveLog{calls: map[string]int{}, users: map[string]string{}}
	// The watcher's clock runs a day ahead: detected-at must come from it, not from time.Now.
	const skew = 24 * time.Hour
	now := func() time.Time { return time.Now().Add(skew) }
	if _, err := revision.SetupWithManager(mgr, revision.Options{DefaultInterval: time.Second, MinInterval: time.Second, Resolve: log.resolve, Now: now}); err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, ctx, "manager", mgr.Start)

	repo := gitrepotest.New(t)
	first := repo.Commit(t, "first", map[string]string{"main.tf": "# v1\n"})
	repo.Switch(t, "dev")
	dev := repo.Commit(t, "dev", map[string]string{"main.tf": "# dev\n"})
	repo.Switch(t, "main")
	url := repo.URL()

	ns := "team"
	objects := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo-creds",
			Labels: map[string]string{credentials.SecretTypeLabel: credentials.SecretTypeRepository}},
			StringData: map[string]string{"repoURL": url, "username": "bot", "password": "token"}},
	}
	for _, o := range objects {
		if err := localcluster.Poll(30*time.Second, func() error { return c.Create(ctx, o) }); err != nil {
			t.Fatal(err)
		}
	}
	tracking := []string{"a", "b", "c"}
	for _, name := range append(tracking, "pinned") {
		ref := "main"
		if name == "pinned" {
			ref = first
		}
		ws := &magosv1.Workspace{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: "p"},
				Source:    magosv1.Source{RepoURL: url, TargetRevision: ref, Path: "."},
				Terraform: magosv1.TerraformSpec{Version: "1.10.6"}},
		}
		if err := localcluster.Poll(30*time.Second, func() error { return c.Create(ctx, ws) }); err != nil {
			t.Fatal(err)
		}
		ws.Status.ObservedRevision, ws.Status.CurrentRevision = first, first // it ran the first commit
		if err := c.Status().Update(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}

	mainRef := url + "#main"
	testenv.Eventually(t, 30*time.Second, func() error {
		if log.count(mainRef) < 3 {
			return fmt.Errorf("%d polls of main", log.count(mainRef))
		}
		return nil
	})
	startPolls, start := log.count(mainRef), time.Now()
	testenv.Consistently(t, 4*time.Second, func() error {
		// One poll per second for the three Workspaces together (+-10% jitter), never one each.
		if n, limit := log.count(mainRef)-startPolls, int(time.Since(start).Seconds()*1.2)+2; n > limit {
			return fmt.Errorf("%d polls of main in %s: not shared", n, time.Since(start))
		}
		return nil
	})
	if u := log.users[mainRef]; u != "bot" {
		t.Errorf("polled with user %q, want the repository Secret's bot", u)
	}
	if n := log.count(url + "#" + first); n != 0 {
		t.Errorf("a pinned commit was polled %d times", n)
	}
	for _, name := range tracking {
		if d := annotation(t, c, ns, name); d != "" {
			t.Errorf("%s marked with %s although it ran the tip", name, d)
		}
	}

	committed := now()
	second := repo.Commit(t, "second", map[string]string{"main.tf": "# v2\n"})
	for _, name := range tracking {
		testenv.Eventually(t, 30*time.Second, func() error {
			if d := annotation(t, c, ns, name); d != second {
				return fmt.Errorf("%s: detected-revision %q, want %s", name, d, second)
			}
			return nil
		})
		// detected-at came in the same patch: RFC 3339 with nanoseconds, UTC, the watcher's clock.
		at := annotations(t, c, ns, name)[keys.DetectedAt]
		ts, err := time.Parse(time.RFC3339Nano, at)
		if err != nil || !strings.HasSuffix(at, "Z") {
			t.Fatalf("%s: detected-at %q is not RFC 3339 UTC: %v", name, at, err)
		}
		if ts.Before(committed) || ts.After(now()) {
			t.Errorf("%s: detected-at %s, want between %s and %s (the watcher's clock)", name, at, committed.UTC().Format(time.RFC3339Nano), now().UTC().Format(time.RFC3339Nano))
		}
	}
	testenv.Consistently(t, 2*time.Second, func() error {
		if d := annotation(t, c, ns, "pinned"); d != "" {
			return fmt.Errorf("pinned Workspace marked with %s", d)
		}
		return nil
	})
	// The polls in the metrics: the first (seeded), those that found main where it was
	// (unchanged), the one that found the second commit (changed, counted before the marks),
	// each one timed.
	for _, result := range []string{revision.ResultSeeded, revision.ResultUnchanged, revision.ResultChanged} {
		if n := testenv.MetricSum(t, "magos_refwatcher_polls_total", map[string]string{"result": result}); n < 1 {
			t.Errorf("magos_refwatcher_polls_total{result=%q} = %v, want at least 1", result, n)
		}
	}
	if n, polls := testenv.MetricSum(t, "magos_refwatcher_poll_duration_seconds", nil), float64(startPolls); n < polls {
		t.Errorf("refwatcher_poll_duration_seconds counts %v polls, want at least %v", n, polls)
	}

	// "a" moves to the dev branch: it is polled there at once, and marked with dev's commit.
	ws := &magosv1.Workspace{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, ws); err != nil {
		t.Fatal(err)
	}
	ws.Spec.Source.TargetRevision = "dev"
	// Taken before the update: the watcher may poll dev and mark "a" before Update returns.
	moved := now()
	if err := c.Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if d := annotation(t, c, ns, "a"); d != dev {
			return fmt.Errorf("a: detected-revision %q, want dev's %s", d, dev)
		}
		return nil
	})
	// A new detection carries a new detected-at.
	at := annotations(t, c, ns, "a")[keys.DetectedAt]
	if ts, err := time.Parse(time.RFC3339Nano, at); err != nil || ts.Before(moved) {
		t.Errorf("a: detected-at %s (%v), want the time of the new detection (after %s)", at, err, revision.DetectedAt(moved))
	}
}

func annotation(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	return annotations(t, c, ns, name)[keys.DetectedRevision]
}

func annotations(t *testing.T, c client.Client, ns, name string) map[string]string {
	t.Helper()
	ws := &magosv1.Workspace{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, ws); err != nil {
		t.Fatal(err)
	}
	return ws.Annotations
}
