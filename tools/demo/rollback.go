package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/tools/devfleet"
)

// RollbackOptions configures RunRollback.
type RollbackOptions struct {
	Options
	// Module is the root module of each release (default: demoscenario.LocalModuleAt).
	Module func(release string) string
	// OnFailure makes the Rollout roll back by itself (spec.onFailure Rollback) when a step of
	// release v2 fails, instead of magosctl rollout rollback after v2 completed. Options'
	// Verification (or a failing region) must then make v2 fail somewhere.
	OnFailure bool
}

// RollbackSummary is the outcome of the rollback demo.
type RollbackSummary struct {
	// From and To are the commits rolled back from (v2) and to (v1).
	From, To string
	// Failed is, with OnFailure, the Rollout's message when v2 failed.
	Failed string
	// Final is the last rendering of the Rollout's status, rolled back.
	Final string
}

// RunRollback shows a rollback: release v1 rolls out region by region, then release v2; then
// v1 is rolled back out, last region first (magosctl rollout rollback, or by the Rollout itself
// when v2 fails and OnFailure is set), and the Rollout holds every region at v1.
func RunRollback(ctx context.Context, fleet *devfleet.Fleet, opts RollbackOptions) (RollbackSummary, error) {
	opts.Options = opts.Options.withDefaults()
	if opts.Module == nil {
		opts.Module = demoscenario.LocalModuleAt
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	out := opts.Out
	first := opts.Options
	first.Module = opts.Module("v1")
	if opts.OnFailure {
		first.OnFailure = magosv1.OnFailureRollback
	}
	s, err := Run(ctx, fleet, first)
	if err != nil {
		return RollbackSummary{}, err
	}
	if !s.Completed {
		return RollbackSummary{}, fmt.Errorf("release v1 did not complete:\n%s", s.Final)
	}
	var sum RollbackSummary
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Project}
	hub := fleet.Client("hub")
	var r magosv1.Rollout
	if err := hub.Get(ctx, key, &r); err != nil {
		return sum, err
	}
	if len(r.Status.Revisions) == 1 {
		sum.To = r.Status.Revisions[0].Commit
	}
	fmt.Fprintf(out, "demo: release v1 (%.12s) applied everywhere\n", sum.To)
	if sum.From, err = Commit(fleet, "edge module v2", opts.Module("v2")); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "demo: committed release v2 (%.12s)\n", sum.From)
	if opts.OnFailure {
		// v2 fails a step; the Rollout writes spec.rollback itself.
		r, err := untilRollout(ctx, fleet, 5*time.Minute, func(r *magosv1.Rollout) error {
			if r.Spec.Rollback == nil {
				return fmt.Errorf("no rollback yet: the Rollout is %s/%s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
			}
			return nil
		})
		if err != nil {
			return sum, err
		}
		sum.Failed = r.Spec.Rollback.Reason
		fmt.Fprintf(out, "demo: release v2 failed a step, and the Rollout's onFailure is Rollback: %s\n", sum.Failed)
	} else {
		// The Rollout completed v1: follow it once it rolls v2 out.
		_, err = untilRollout(ctx, fleet, 5*time.Minute, func(r *magosv1.Rollout) error {
			if len(r.Status.Revisions) != 1 || r.Status.Revisions[0].Commit != sum.From {
				return fmt.Errorf("the Rollout does not roll v2 out yet (revisions %+v)", r.Status.Revisions)
			}
			return nil
		})
		if err != nil {
			return sum, err
		}
		v2, err := Follow(ctx, fleet, opts.Options)
		if err != nil {
			return sum, err
		}
		if !v2.Completed {
			return sum, fmt.Errorf("release v2 did not complete:\n%s", v2.Final)
		}
		printed, err := magosctl(ctx, fleet, "rollout", "rollback", Project, "--reason", "the demo rolls v2 back")
		if err != nil {
			return sum, err
		}
		fmt.Fprintf(out, "demo: release v2 applied everywhere; rolling it back: magosctl rollout rollback %s\n%s\n", Project, printed)
	}
	last := ""
	var failed error
	err = localcluster.Poll(opts.Timeout, func() error {
		text, ro, err := cli.RolloutStatus(ctx, hub, key)
		if err != nil {
			return err
		}
		if text != last {
			fmt.Fprintf(out, "%s\n", text)
			last = text
		}
		switch {
		case ro.Status.ObservedGeneration != ro.Generation || ro.Spec.Rollback == nil:
			return fmt.Errorf("the hub has not decided the rollback yet")
		case ro.Status.Reason == magosv1.ReasonStepFailed:
			failed = fmt.Errorf("the rollback failed: %s", ro.Status.Message)
			return nil // stop waiting
		case ro.Status.Reason != magosv1.ReasonRolledBack:
			return fmt.Errorf("the Rollout is %s: %s", ro.Status.Reason, ro.Status.Message)
		}
		sum.Final = text
		return nil
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "demo: rolled back: every region of %s is at v1 (%.12s) again, the last step first\n", strings.Join(fleet.Order, ", "), sum.To)
	return sum, nil
}

// SmokeCheck is the demo's verification of every step: a smoke test of the region's endpoint,
// run after each apply as the step's check Job (by the dev fleet's agents as a local process,
// the stand-in for the Job), with the apply's outputs as its environment. It is scripted to find
// release v2 unhealthy in failRegion, and every other release and region healthy, so that the
// demo shows a failed check halting that region.
func SmokeCheck(failRegion string) *magosv1.StepVerification {
	script := fmt.Sprintf(`echo "smoke test of $OUTPUT_ENDPOINT, release $OUTPUT_RELEASE"
case "$OUTPUT_RELEASE $OUTPUT_ENDPOINT" in
  "v2 "*%s*) echo "5xx rate 12%%, above the 1%% threshold: unhealthy"; exit 1 ;;
esac
echo "5xx rate 0.1%%: healthy"`, failRegion)
	return &magosv1.StepVerification{
		Expression: `outputs.endpoint.startsWith("https://")`,
		Job:        &magosv1.VerificationJob{Image: "example.com/edge-smoke-test:1", Command: []string{"sh", "-c", script}},
	}
}
