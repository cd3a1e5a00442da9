package browser

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

// rolloutEvents are the notes of the Rollout's Events with reason, oldest first, read from the
// hub's API server.
func rolloutEvents(ctx context.Context, f *devfleet.Fleet, reason string) ([]string, error) {
	var list eventsv1.EventList
	if err := f.Client("hub").List(ctx, &list, client.InNamespace(corev1.NamespaceDefault)); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Rollout" && e.Regarding.Name == demo.Project && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out, nil
}

// TestDashboardActionsInABrowser: on a real fleet (real hub, agents and tofu) the people on call
// steer a Rollout from the page, in Chromium, as themselves. A viewer (read-only RBAC) is offered
// no button, and the API refuses them when they call it anyway from the page. An operator
// resumes the paused Rollout, rejects the plans of the step that requires approval (saying why,
// which the page then shows), approves them after all, asks a region's Workspace for a retry,
// and pauses the Rollout: the hub's API server (read by the test, not through the dashboard)
// shows each done in the operator's name, the Rollout's Events name them, the spokes apply the
// last region only after the approval, and the retried Workspace runs again.
func TestDashboardActionsInABrowser(t *testing.T) {
	d := startDemo(t, 12*time.Minute, demo.Options{Paused: true, Approval: true})
	f, ctx, viewer := d.Fleet, d.ctx, d.viewer
	operator, err := f.OperatorToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const who = "system:serviceaccount:default:" + devfleet.DashboardOperator
	hub := f.Client("hub")
	last := f.Order[len(f.Order)-1]
	lastApplied := func() bool {
		var ws magosv1.Workspace
		err := f.Client(last).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &ws)
		return err == nil && ws.Status.Phase == magosv1.PhaseApplied
	}
	rollout := func() *magosv1.Rollout {
		t.Helper()
		var ro magosv1.Rollout
		if err := hub.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Project}, &ro); err != nil {
			t.Fatal(err)
		}
		return &ro
	}
	browser := newBrowser(t, ctx, browserOptions{})
	// visible reports whether the element is shown (neither it nor a parent hidden).
	visible := func(id string) bool {
		t.Helper()
		v, err := chromedp.Run(browser, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.getElementById(%q); return !!e && e.offsetParent !== null; })()`, id)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	text := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(browser, chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById(%q).textContent`, id)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// pagePost POSTs an action from the page itself, as a person who calls the API without the
	// button would, and returns the status and body.
	pagePost := func(path, body string) string {
		t.Helper()
		v, err := chromedp.Run(browser, chromedp.Evaluate[string](fmt.Sprintf(
			`fetch(%q, {method: "POST", headers: {"Content-Type": "application/json"}, body: %q}).then(async r => r.status + " " + await r.text())`, path, body),
			chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// The viewer: no button, and refused by the API server when calling it anyway.
	signIn(t, browser, f.DashboardURL(), viewer)
	testenv.Eventually(t, 30*time.Second, func() error {
		if visible("pause") || visible("resume") {
			return fmt.Errorf("the viewer is offered pause or resume")
		}
		return nil
	})
	rolloutPath := "/api/v1/namespaces/default/rollouts/" + demo.Project
	if got := pagePost(rolloutPath+"/resume", "{}"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("resume by the viewer from the page: %s, want 403", got)
	}
	if ro := rollout(); !ro.Spec.Paused {
		t.Fatal("the viewer's refused resume resumed the Rollout")
	}
	steps(t, browser, "signing out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login")))

	// The operator resumes the Rollout from the page.
	signIn(t, browser, f.DashboardURL(), operator)
	steps(t, browser, "resuming", chromedp.WaitVisible(chromedp.CSS("#resume")), chromedp.Click(chromedp.CSS("#resume")))
	testenv.Eventually(t, 30*time.Second, func() error {
		if ro := rollout(); ro.Spec.Paused || ro.Annotations[keys.PausedBy] != who {
			return fmt.Errorf("paused %v, paused-by %q: want resumed by %s", ro.Spec.Paused, ro.Annotations[keys.PausedBy], who)
		}
		return nil
	})

	// The last region's step awaits approval: the page lists its plans with their digests.
	var step string
	testenv.Eventually(t, 5*time.Minute, func() error {
		ro := rollout()
		if ro.Status.Reason != magosv1.ReasonAwaitingApproval {
			return fmt.Errorf("the Rollout is %s/%s (%s), not awaiting approval yet", ro.Status.Phase, ro.Status.Reason, ro.Status.Message)
		}
		step = ro.Status.CurrentStepName
		if !visible("approve") {
			return fmt.Errorf("the page does not offer the approval yet")
		}
		return nil
	})
	ro := rollout()
	plans := ro.Status.Steps[ro.Status.CurrentStep].Plans
	for _, p := range plans {
		if shown := text("approval-plans"); !strings.Contains(shown, p.Digest) || !strings.Contains(shown, p.Workspace) {
			t.Errorf("the approval panel shows %q, want plan %s of %s", shown, p.Digest, p.Workspace)
		}
	}
	shot, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	saveArtifact(t, "dashboard-approval.png", shot)

	// Reject: a reason is required; then the step is held back, and the page says by whom and why.
	steps(t, browser, "rejecting without a reason", chromedp.Click(chromedp.CSS("#reject")))
	if got := text("action-result"); !strings.Contains(got, "say why") {
		t.Errorf("rejecting without a reason shows %q", got)
	}
	const reason = "the plan replaces the region's ConfigMap during business hours"
	steps(t, browser, "rejecting", chromedp.SendKeys(chromedp.CSS("#reject-reason"), reason), chromedp.Click(chromedp.CSS("#reject")))
	testenv.Eventually(t, time.Minute, func() error {
		ro := rollout()
		if ro.Status.Reason != magosv1.ReasonApprovalRejected || !strings.Contains(ro.Status.Message, who) || !strings.Contains(ro.Status.Message, reason) {
			return fmt.Errorf("the Rollout is %s: %s; want ApprovalRejected naming %s and the reason", ro.Status.Reason, ro.Status.Message, who)
		}
		if shown := text("approval-rejection"); !visible("approval-rejection") || !strings.Contains(shown, who) || !strings.Contains(shown, reason) {
			return fmt.Errorf("the page shows the rejection as %q", shown)
		}
		return nil
	})
	if lastApplied() {
		t.Fatalf("%s applied under a rejection", last)
	}

	// The viewer sees the plans and the rejection, but no approve or reject button, and is
	// refused when approving from the page anyway.
	steps(t, browser, "signing out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login")))
	signIn(t, browser, f.DashboardURL(), viewer)
	testenv.Eventually(t, 30*time.Second, func() error {
		if !visible("approval") || !visible("approval-denied") || !visible("approval-rejection") {
			return fmt.Errorf("the viewer is not shown the plans, the rejection and why they may not approve")
		}
		return nil
	})
	if visible("approve") || visible("reject") || visible("pause") || visible("resume") {
		t.Error("the viewer is offered an approve, reject, pause or resume button")
	}
	if got := pagePost(rolloutPath+"/approve", fmt.Sprintf(`{"step": %q}`, step)); !strings.HasPrefix(got, "403 ") {
		t.Errorf("approve by the viewer from the page: %s, want 403", got)
	}
	if a := rollout().Spec.Approvals; len(a) != 0 {
		t.Fatalf("the viewer's refused approval wrote %+v", a)
	}
	steps(t, browser, "signing out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login")))
	signIn(t, browser, f.DashboardURL(), operator)

	// Approve after all: the step applies, and the Rollout completes.
	steps(t, browser, "approving", chromedp.WaitVisible(chromedp.CSS("#approve")), chromedp.Click(chromedp.CSS("#approve")))
	testenv.Eventually(t, 4*time.Minute, func() error {
		ro := rollout()
		if ro.Status.Reason != magosv1.ReasonRolloutCompleted || !lastApplied() {
			return fmt.Errorf("the Rollout is %s/%s (%s); %s applied: %v", ro.Status.Phase, ro.Status.Reason, ro.Status.Message, last, lastApplied())
		}
		return nil
	})
	if a := rollout().Spec.Approvals; len(a) != 1 || a[0].ApprovedBy != who || a[0].Step != step || len(a[0].Plans) != len(plans) {
		t.Errorf("approvals %+v: want step %s's %d plan(s) approved by %s", a, step, len(plans), who)
	}

	// Retry the first region's Workspace: its agent runs it again.
	first := f.Order[0]
	var before magosv1.Workspace
	if err := f.Client(first).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &before); err != nil {
		t.Fatal(err)
	}
	steps(t, browser, "asking for a retry",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#grid-rows td[data-cluster=%q] .ws`, first))),
		chromedp.WaitVisible(chromedp.CSS("#retry")),
		chromedp.Click(chromedp.CSS("#retry")))
	testenv.Eventually(t, 3*time.Minute, func() error {
		var ws magosv1.Workspace
		if err := f.Client(first).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &ws); err != nil {
			return err
		}
		if ws.Status.CurrentRunID == before.Status.CurrentRunID || ws.Status.Phase != magosv1.PhaseApplied {
			return fmt.Errorf("%s's Workspace: run %s %s, want a new run applied after %s (the page says %q)",
				first, ws.Status.CurrentRunID, ws.Status.Phase, before.Status.CurrentRunID, text("action-result"))
		}
		return nil
	})

	// Pause again from the page.
	steps(t, browser, "pausing", chromedp.WaitVisible(chromedp.CSS("#pause")), chromedp.Click(chromedp.CSS("#pause")))
	testenv.Eventually(t, 30*time.Second, func() error {
		if ro := rollout(); !ro.Spec.Paused || ro.Annotations[keys.PausedBy] != who {
			return fmt.Errorf("paused %v by %q", ro.Spec.Paused, ro.Annotations[keys.PausedBy])
		}
		return nil
	})

	// The Rollout's Events name the operator for each action.
	testenv.Eventually(t, time.Minute, func() error {
		for _, want := range []struct{ reason, note string }{
			{"Resumed", "Resumed by " + who},
			{magosv1.ReasonApprovalRejected, "rejected by " + who},
			{magosv1.ReasonApproved, "approved by " + who},
			{"RetryRequested", "requested by " + who},
			{magosv1.ReasonPaused, "paused by " + who},
		} {
			notes, err := rolloutEvents(ctx, f, want.reason)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want.note) }) {
				return fmt.Errorf("no %s Event says %q (notes %q)", want.reason, want.note, notes)
			}
		}
		return nil
	})
}
