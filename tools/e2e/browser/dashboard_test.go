package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// cellsJS reads the Rollout grid the page shows: one entry per Workspace cell.
const cellsJS = `JSON.stringify({phase: document.getElementById('rollout-phase').dataset.phase || '',
  cells: [...document.querySelectorAll('#grid-rows td[data-cluster] .ws')].map(e => ({
    step: e.closest('td').dataset.step, cluster: e.closest('td').dataset.cluster, phase: e.dataset.phase}))})`

type pageCell struct {
	Step, Cluster, Phase string
}

// sample is what the page showed at one moment.
type sample struct {
	at time.Time
	// Phase is the Rollout's phase and Cells its grid.
	Phase string
	Cells []pageCell
}

func (s sample) shows(cluster, phase string) bool {
	return slices.ContainsFunc(s.Cells, func(c pageCell) bool { return c.Cluster == cluster && c.Phase == phase })
}

// spokeChange is a phase a spoke's Workspace took, seen by a watch on the spoke's API server.
type spokeChange struct {
	cluster string
	phase   magosv1.Phase
	at      time.Time
}

// TestDashboardInABrowser: the hub's web page, in a real headless Chromium (Debian's package),
// signs in with a token, lists the Rollout and follows its grid of steps by clusters live
// while the Rollout progresses region by region on a real fleet: the page shows each region
// applied, in step order, without being reloaded. Screenshots are saved as test artifacts
// (MAGOS_ARTIFACTS_DIR, default bin/artifacts). It logs how long each phase change in a spoke
// took to show on the page (spoke watch to page, sampled every 100ms); it asserts no time.
func TestDashboardInABrowser(t *testing.T) {
	d := startDemo(t, 10*time.Minute, demo.Options{Paused: true})
	f, ctx, token := d.Fleet, d.ctx, d.viewer

	// The independent observer: a watch on every spoke's Workspace.
	var mu sync.Mutex
	var changes []spokeChange
	for _, name := range f.Order {
		watchSpoke(t, ctx, f, name, func(phase magosv1.Phase) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, spokeChange{cluster: name, phase: phase, at: time.Now()})
		})
	}

	browser := newBrowser(t, ctx, browserOptions{Height: 720})

	// Sign in, and find the Rollout in the list.
	signIn(t, browser, f.DashboardURL(), token)

	// Read the grid every 100ms from now on, while the Rollout runs; one goroutine drives the
	// browser: it also takes a screenshot once the first region shows applied and the last not.
	first, last := f.Order[0], f.Order[len(f.Order)-1]
	var (
		smu       sync.Mutex
		samples   []sample
		sampleErr error
		mid       []byte
	)
	sampling, stopSampling := context.WithCancel(browser)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			raw, err := chromedp.Run(sampling, chromedp.Evaluate[string](cellsJS))
			var s sample
			if err == nil {
				err = json.Unmarshal([]byte(raw), &s)
			}
			if err == nil && mid == nil && s.shows(first, "Applied") && !s.shows(last, "Applied") {
				mid, err = chromedp.Run(sampling, chromedp.CaptureScreenshot())
			}
			smu.Lock()
			if err != nil && sampling.Err() == nil {
				sampleErr = err
			}
			if err == nil {
				s.at = time.Now()
				samples = append(samples, s)
			}
			smu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-sampling.Done():
				return
			case <-tick.C:
			}
		}
	}()

	if err := f.Client("hub").Patch(ctx, &magosv1.Rollout{ObjectMeta: rolloutMeta()},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))); err != nil {
		t.Fatal(err)
	}
	s, err := demo.Follow(ctx, f, demo.Options{})
	if err != nil || !s.Completed {
		t.Fatalf("the Rollout did not complete: %v\n%s", err, s.Final)
	}
	testenv.Eventually(t, time.Minute, func() error {
		smu.Lock()
		defer smu.Unlock()
		if sampleErr != nil {
			t.Fatalf("reading the page: %v", sampleErr)
		}
		if n := len(samples); n == 0 || samples[n-1].Phase != "Applied" || !samples[n-1].shows(last, "Applied") {
			return fmt.Errorf("the page does not show the Rollout applied yet: %d samples, the last %+v", n, samples[max(0, n-1):])
		}
		return nil
	})
	stopSampling()
	<-sampled
	final, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if mid == nil {
		t.Errorf("the page never showed %s applied while %s was not", first, last)
	} else {
		saveArtifact(t, "dashboard-rollout-progressing.png", mid)
	}
	saveArtifact(t, "dashboard-rollout-applied.png", final)

	// One click from the grid to the plan of the last region's newest run: the copy its agent
	// keeps on the hub, read with the viewer's own token.
	planButton := `#run-rows tr:first-child button[data-output$="/plan"]`
	steps(t, browser, "opening the plan of the last region's run",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#grid-rows td[data-cluster=%q] .ws`, last))),
		chromedp.WaitVisible(chromedp.CSS(planButton)),
		chromedp.Click(chromedp.CSS(planButton)),
		chromedp.WaitVisible(chromedp.CSS("#output")))
	testenv.Eventually(t, 30*time.Second, func() error {
		plan, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.getElementById('output-plan').textContent`))
		if err != nil {
			return err
		}
		if !strings.Contains(plan, "Plan: ") && !strings.Contains(plan, "No changes.") {
			return fmt.Errorf("the page shows as the plan of %s's run: %q, want tofu's plan text", last, plan)
		}
		return nil
	})
	steps(t, browser, "scrolling to the plan", chromedp.ScrollIntoView(chromedp.CSS("#output-plan")))
	shot, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	saveArtifact(t, "dashboard-plan.png", shot)

	// The page changed while the Rollout progressed, showing the regions applied in step order.
	firstApplied := map[string]time.Time{}
	states := map[string]bool{}
	for _, s := range samples {
		raw, _ := json.Marshal(s.Cells)
		states[string(raw)] = true
		for _, c := range s.Cells {
			if _, seen := firstApplied[c.Cluster]; !seen && c.Phase == string(magosv1.PhaseApplied) {
				firstApplied[c.Cluster] = s.at
			}
		}
	}
	if samples[0].shows(last, "Applied") {
		t.Errorf("the page's first sample already showed %s applied: %+v", last, samples[0])
	}
	if len(states) < len(f.Order)+1 {
		t.Errorf("the page showed %d distinct grids while the Rollout ran, want at least %d", len(states), len(f.Order)+1)
	}
	for i, name := range f.Order {
		if firstApplied[name].IsZero() {
			t.Errorf("the page never showed %s applied", name)
			continue
		}
		if i > 0 && !firstApplied[name].After(firstApplied[f.Order[i-1]]) {
			t.Errorf("the page showed %s applied at %s, not after %s (%s)", name, firstApplied[name].Format(time.StampMilli),
				f.Order[i-1], firstApplied[f.Order[i-1]].Format(time.StampMilli))
		}
	}

	// Spoke phase change to page, for every change both saw.
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	var each []string
	for _, c := range changes {
		if c.at.Before(samples[0].at) {
			continue // before the page was open: the watch's first event, not a change
		}
		for _, s := range samples {
			if s.at.Before(c.at) {
				continue
			}
			if s.shows(c.cluster, string(c.phase)) {
				lat = append(lat, s.at.Sub(c.at))
				each = append(each, fmt.Sprintf("%s %s %s", c.cluster, c.phase, s.at.Sub(c.at).Round(time.Millisecond)))
				break
			}
		}
	}
	t.Logf("spoke phase changes as the page showed them: %v", each)
	if len(lat) == 0 {
		t.Fatalf("no spoke phase change was seen on the page (%d changes, %d samples)", len(changes), len(samples))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("spoke phase change to page: n=%d p50=%s p90=%s p99=%s max=%s (page sampled every 100ms; %d samples, %d distinct grids)",
		len(lat), q(0.5), q(0.9), q(0.99), lat[len(lat)-1].Round(time.Millisecond), len(samples), len(states))
}

// steps runs browser actions, bounded by a minute, and fails the test with what the page shows
// when they do not finish.
func steps(t *testing.T, browser context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		text, _ := chromedp.Run(browser, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v; the page shows:\n%s", what, err, text)
	}
}

func rolloutMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: demo.Project}
}

// watchSpoke calls changed with every new phase of the demo Workspace in the spoke, as a
// watch on the spoke's API server delivers it, until ctx ends.
func watchSpoke(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string, changed func(magosv1.Phase)) {
	t.Helper()
	c, err := client.NewWithWatch(f.Spokes[cluster].Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, &magosv1.WorkspaceList{}, client.InNamespace(corev1.NamespaceDefault))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		var last magosv1.Phase
		for ev := range w.ResultChan() {
			ws, ok := ev.Object.(*magosv1.Workspace)
			if !ok || ev.Type == watch.Deleted || ws.Name != demo.Workspace || ws.Status.Phase == last {
				continue
			}
			last = ws.Status.Phase
			changed(last)
		}
	}()
}

// saveArtifact writes a test artifact into MAGOS_ARTIFACTS_DIR (default bin/artifacts at the
// repository's root).
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dir := os.Getenv("MAGOS_ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "bin", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("saved %s (%d bytes)", abs, len(data))
}
