package browser

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// requireChromium returns the path of Debian's chromium; without it the test is skipped, or
// fails under MAGOS_CI (.ci/run installs it). Tests call it before they start a fleet.
func requireChromium(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("MAGOS_CI") != "" {
			t.Fatal("chromium is not installed (.ci/run installs Debian's chromium package)")
		}
		t.Skip("chromium is not installed: apt-get install chromium to run the browser test")
	}
	return chromium
}

// browserOptions tunes newBrowser.
type browserOptions struct {
	// Height is the window's height (default 900; the width is 1280).
	Height int
	// Allocator adds flags to Chromium's command line.
	Allocator []chromedp.ExecAllocatorOption
	// Context adds options to the browser's context (a listener of its events, say).
	Context []chromedp.ContextOption
}

// newBrowser starts a headless Chromium for the test and returns its context; both end with
// the test.
func newBrowser(t *testing.T, ctx context.Context, o browserOptions) context.Context {
	t.Helper()
	if o.Height == 0 {
		o.Height = 900
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(requireChromium(t)),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, o.Height))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(opts, o.Allocator...)...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx, o.Context...)
	t.Cleanup(cancelBrowser)
	// The first context an action runs on owns the browser: start it on this one, so that the
	// bounded contexts of steps end with their steps only.
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return browser
}

// demoFleet is a fleet for a browser test: the hub (serving its dashboard on loopback) and the
// demo's three spokes, with the demo's Project and Rollout set up as o says, and a token that
// may read everything Magos on the hub.
type demoFleet struct {
	*devfleet.Fleet
	// ctx ends with the test, or at the deadline given to startDemo.
	ctx context.Context
	// viewer is a token of devfleet.DashboardViewer.
	viewer string
}

// startDemo checks that Chromium is there, starts the fleet and sets the demo up; the fleet
// stops with the test.
func startDemo(t *testing.T, timeout time.Duration, o demo.Options) demoFleet {
	t.Helper()
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	var progress testenv.Buffer
	f, err := devfleet.Start(ctx, devfleet.Options{Dir: t.TempDir(), Progress: &progress, Dashboard: devfleet.AnyAddress})
	if err != nil {
		t.Fatalf("starting the fleet: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		// End the test's context first: the watches the test opened on the API servers end with
		// it, and an API server with a watch still open does not stop within envtest's timeout.
		cancel()
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	viewer, err := f.DashboardToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Setup(ctx, f, o); err != nil {
		t.Fatal(err)
	}
	return demoFleet{Fleet: f, ctx: ctx, viewer: viewer}
}

// signIn signs in to the dashboard at url with token and opens the demo's Rollout, waiting for
// its grid.
func signIn(t *testing.T, browser context.Context, url, token string) {
	t.Helper()
	rolloutLink := `#rollout-rows tr[data-rollout="default/` + demo.Project + `"] a`
	steps(t, browser, "signing in and opening the Rollout",
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-button")),
		chromedp.WaitVisible(chromedp.CSS(rolloutLink)),
		chromedp.Click(chromedp.CSS(rolloutLink)),
		chromedp.WaitVisible(chromedp.CSS(`#grid-rows td[data-cluster] .ws`)),
	)
}
