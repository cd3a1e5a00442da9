package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
)

// timelineJS reads the Rollout's timeline the page shows, and the mark set on the page when it
// was opened (gone if it reloaded).
const timelineJS = `JSON.stringify({mark: window.__timelineMark || '',
  rows: [...document.querySelectorAll('#timeline-rows tr')].map(r => ({type: r.dataset.type, step: r.dataset.step,
    who: r.dataset.who, time: r.dataset.time, shown: r.querySelector('td.time').textContent}))})`

// fleetJS reads the fleet page's rows.
const fleetJS = `JSON.stringify([...document.querySelectorAll('#fleet-rows tr')].map(r => ({cluster: r.dataset.cluster,
  health: r.dataset.health, version: r.dataset.agentVersion, shownVersion: r.querySelector('td.agent-version').textContent,
  waiting: [...r.querySelectorAll('td.waiting a')].map(a => a.dataset.rollout)})))`

// diffJS reads the plan's lines by kind, and the colour of the first line of each kind.
const diffJS = `JSON.stringify([...document.querySelectorAll('#output-plan span.diff')].reduce((m, s) => {
  const k = s.dataset.diff; m[k] = m[k] || {n: 0, color: getComputedStyle(s).color}; m[k].n++; return m; }, {}))`

type timelineRow struct {
	Type, Step, Who, Time, Shown string
}

type timelinePage struct {
	Mark string
	Rows []timelineRow
}

// index is the position of the first row of typ for step, or -1.
func (p timelinePage) index(typ, step string) int {
	return slices.IndexFunc(p.Rows, func(r timelineRow) bool { return r.Type == typ && r.Step == step })
}

type fleetRow struct {
	Cluster, Health, Version, ShownVersion string
	// Waiting are the Rollouts the page shows waiting on the cluster.
	Waiting []string
}

// TestTimelineAndFleetInABrowser: in a real headless Chromium, the Rollout page's timeline
// follows a Rollout whose last region requires approval as it progresses, without a reload:
// each step started, then completed, in step order, with times, and who approved the last
// region; the fleet page lists every cluster healthy with its agent's version, and shows a
// cluster unhealthy, with the Rollout waiting on it, once its agent is stopped; a plan shows as a
// coloured diff. Screenshots of
// the three are saved as test artifacts (MAGOS_ARTIFACTS_DIR).
func TestTimelineAndFleetInABrowser(t *testing.T) {
	d := startDemo(t, 12*time.Minute, demo.Options{Paused: true, Approval: true})
	f, ctx, token := d.Fleet, d.ctx, d.viewer
	browser := newBrowser(t, ctx, browserOptions{})
	first, last := f.Order[0], f.Order[len(f.Order)-1]

	signIn(t, browser, f.DashboardURL(), token)
	steps(t, browser, "waiting for the timeline", chromedp.WaitVisible(chromedp.CSS(`#timeline-rows tr[data-type="StepStarted"]`)))
	if _, err := chromedp.Run(browser, chromedp.Evaluate[string](`window.__timelineMark = 'opened'`)); err != nil {
		t.Fatal(err)
	}

	// Read the timeline every 200ms while the Rollout runs.
	var (
		mu        sync.Mutex
		seen      []timelinePage
		sampleErr error
	)
	sampling, stopSampling := context.WithCancel(browser)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			raw, err := chromedp.Run(sampling, chromedp.Evaluate[string](timelineJS))
			var p timelinePage
			if err == nil {
				err = json.Unmarshal([]byte(raw), &p)
			}
			mu.Lock()
			if err != nil && sampling.Err() == nil {
				sampleErr = err
			}
			if err == nil && (len(seen) == 0 || len(p.Rows) != len(seen[len(seen)-1].Rows)) {
				seen = append(seen, p)
			}
			mu.Unlock()
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

	hub := f.Client("hub")
	if err := hub.Patch(ctx, &magosv1.Rollout{ObjectMeta: rolloutMeta()},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))); err != nil {
		t.Fatal(err)
	}
	// The last region waits for approval; approve it as a person does.
	testenv.Eventually(t, 6*time.Minute, func() error {
		var ro magosv1.Rollout
		if err := hub.Get(ctx, client.ObjectKeyFromObject(&magosv1.Rollout{ObjectMeta: rolloutMeta()}), &ro); err != nil {
			return err
		}
		if ro.Status.Reason != magosv1.ReasonAwaitingApproval || ro.Status.CurrentStepName != last {
			return fmt.Errorf("the Rollout is %s (%s) at step %s, not awaiting approval at %s", ro.Status.Phase, ro.Status.Reason, ro.Status.CurrentStepName, last)
		}
		return nil
	})
	var out, errOut bytes.Buffer
	approve := cli.NewCommand(&out, &errOut)
	approve.SetArgs([]string{"--kubeconfig", f.Kubeconfig("hub"), "rollout", "approve", demo.Project, "--step", last, "-n", "default"})
	if err := approve.ExecuteContext(ctx); err != nil {
		t.Fatalf("magosctl rollout approve: %v\n%s%s", err, out.String(), errOut.String())
	}
	s, err := demo.Follow(ctx, f, demo.Options{})
	if err != nil || !s.Completed {
		t.Fatalf("the Rollout did not complete: %v\n%s", err, s.Final)
	}
	var ro magosv1.Rollout
	if err := hub.Get(ctx, client.ObjectKeyFromObject(&magosv1.Rollout{ObjectMeta: rolloutMeta()}), &ro); err != nil {
		t.Fatal(err)
	}
	if len(ro.Spec.Approvals) != 1 {
		t.Fatalf("approvals %+v, want the one magosctl wrote", ro.Spec.Approvals)
	}
	approver := ro.Spec.Approvals[0].ApprovedBy

	var final timelinePage
	testenv.Eventually(t, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if sampleErr != nil {
			t.Fatalf("reading the page: %v", sampleErr)
		}
		if len(seen) == 0 || !slices.ContainsFunc(seen[len(seen)-1].Rows, func(r timelineRow) bool { return r.Type == "RolloutCompleted" }) {
			return fmt.Errorf("the timeline does not show the Rollout completed yet (%d states seen)", len(seen))
		}
		final = seen[len(seen)-1]
		return nil
	})
	stopSampling()
	<-sampled

	// In order, with times, and who approved; live: it grew while the page stayed open.
	if final.Mark != "opened" {
		t.Errorf("the page was reloaded (mark %q)", final.Mark)
	}
	prevCompleted := -1
	for i, region := range f.Order {
		started, completed := final.index("StepStarted", region), final.index("StepCompleted", region)
		if started < 0 || completed < 0 || completed < started || started < prevCompleted {
			t.Errorf("step %s (%d of %d): started at row %d, completed at row %d, the step before completed at row %d: want started after the step before completed, then completed",
				region, i+1, len(f.Order), started, completed, prevCompleted)
		}
		prevCompleted = completed
	}
	for i, r := range final.Rows {
		if r.Shown == "" || r.Time == "" {
			t.Errorf("row %d (%s %s) shows no time", i, r.Type, r.Step)
		}
		if i > 0 {
			a, _ := time.Parse(time.RFC3339Nano, final.Rows[i-1].Time)
			b, _ := time.Parse(time.RFC3339Nano, r.Time)
			// To the second: an approval records its time to the second.
			if b.Truncate(time.Second).Before(a.Truncate(time.Second)) {
				t.Errorf("row %d (%s %s at %s) comes after row %d (%s %s at %s): not oldest first", i, r.Type, r.Step, r.Time,
					i-1, final.Rows[i-1].Type, final.Rows[i-1].Step, final.Rows[i-1].Time)
			}
		}
	}
	approved := final.index("StepApproved", last)
	if approved < 0 || final.Rows[approved].Who != approver || approved > final.index("StepCompleted", last) {
		t.Errorf("the timeline's approval of %s: row %d %+v, want one by %s before the step completed", last, approved, final.Rows[max(approved, 0)], approver)
	}
	mu.Lock()
	states := len(seen)
	firstSeen := seen[0]
	mu.Unlock()
	if firstSeen.index("StepCompleted", first) >= 0 {
		t.Errorf("the first timeline the page showed already had %s completed: %+v", first, firstSeen.Rows)
	}
	if states < len(f.Order)+1 {
		t.Errorf("the timeline changed %d times on the open page while the Rollout ran, want at least %d", states, len(f.Order)+1)
	}
	t.Logf("timeline: %d rows at the end, %d states seen live", len(final.Rows), states)
	steps(t, browser, "scrolling to the timeline", chromedp.ScrollIntoView(chromedp.CSS("#timeline")))
	shot(t, browser, "#timeline", "dashboard-timeline.png")

	// The plan of the last region's run, as a coloured diff.
	planButton := `#run-rows tr button[data-output$="/plan"]`
	steps(t, browser, "opening a plan of the last region",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#grid-rows td[data-cluster=%q] .ws`, last))),
		chromedp.WaitVisible(chromedp.CSS(planButton)),
		chromedp.Click(chromedp.CSS(planButton)),
		chromedp.WaitVisible(chromedp.CSS("#output")))
	testenv.Eventually(t, 30*time.Second, func() error {
		raw, err := chromedp.Run(browser, chromedp.Evaluate[string](diffJS))
		if err != nil {
			return err
		}
		var kinds map[string]struct {
			N     int
			Color string
		}
		if err := json.Unmarshal([]byte(raw), &kinds); err != nil {
			return err
		}
		create, plain := kinds["create"], kinds["plain"]
		if create.N == 0 || plain.N == 0 || create.Color == plain.Color {
			return fmt.Errorf("the plan's lines by kind %+v: want lines that create, coloured apart from plain ones", kinds)
		}
		return nil
	})
	steps(t, browser, "scrolling to the plan", chromedp.ScrollIntoView(chromedp.CSS("#output-plan")))
	shot(t, browser, "#output-plan", "dashboard-plan-diff.png")

	// The fleet page: every cluster healthy, with its agent's version.
	versions := map[string]string{}
	var clusters magosv1.ClusterList
	if err := hub.List(ctx, &clusters); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters.Items {
		versions[c.Name] = c.Status.AgentVersion
	}
	steps(t, browser, "opening the fleet page",
		chromedp.Click(chromedp.CSS("#fleet-link")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#fleet-rows tr[data-cluster=%q]`, last))))
	readFleet := func() ([]fleetRow, error) {
		raw, err := chromedp.Run(browser, chromedp.Evaluate[string](fleetJS))
		if err != nil {
			return nil, err
		}
		var rows []fleetRow
		return rows, json.Unmarshal([]byte(raw), &rows)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		rows, err := readFleet()
		if err != nil {
			return err
		}
		for _, name := range f.Order {
			i := slices.IndexFunc(rows, func(r fleetRow) bool { return r.Cluster == name })
			if i < 0 {
				return fmt.Errorf("the fleet page does not list %s: %+v", name, rows)
			}
			if r := rows[i]; r.Health != "succeeded" || versions[name] == "" || r.Version != versions[name] || r.ShownVersion != versions[name] {
				return fmt.Errorf("the fleet page shows %s %+v, want healthy with agent version %q", name, r, versions[name])
			}
		}
		return nil
	})
	shot(t, browser, "#fleet", "dashboard-fleet.png")

	// Its agent stopped, a cluster shows unhealthy, live.
	if err := f.StopProcess(last); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer func() {
		if err := f.ContinueProcess(last); err != nil {
			t.Errorf("resuming the agent of %s: %v", last, err)
		}
	}()
	testenv.Eventually(t, time.Minute, func() error {
		rows, err := readFleet()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(rows, func(r fleetRow) bool { return r.Cluster == last })
		// The Rollout, completed, waits on the cluster again: its Workspace there is not known
		// to be Applied any more.
		if i < 0 || rows[i].Health != "failed" || !slices.Contains(rows[i].Waiting, "default/"+demo.Project) {
			return fmt.Errorf("the fleet page shows %+v, want %s unhealthy, with default/%s waiting on it", rows, last, demo.Project)
		}
		return nil
	})
	t.Logf("the fleet page showed %s unhealthy %s after its agent stopped", last, time.Since(stopped).Round(time.Millisecond))
	shot(t, browser, "#fleet", "dashboard-fleet-agent-stopped.png")
}

// shot saves a screenshot of the element sel as the artifact name.
func shot(t *testing.T, browser context.Context, sel, name string) {
	t.Helper()
	png, err := chromedp.Run(browser, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("a screenshot of %s: %v", sel, err)
	}
	saveArtifact(t, name, png)
}
