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
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/tools/devfleet"
)

// DriftOptions configures RunDrift.
type DriftOptions struct {
	Options
	// Module is the root module of each release (default: demoscenario.LocalModuleAt, which
	// manages the ConfigMap demoscenario.ConfigMap in each region).
	Module func(release string) string
	// WhileHeld, when set, runs while the drifted region's step holds the new release, before
	// the drift is accepted (tests observe the hold here).
	WhileHeld func(ctx context.Context, region, commit string) error
}

// DriftSummary is the outcome of the drift demo.
type DriftSummary struct {
	// Region is the region whose ConfigMap was edited by hand.
	Region string
	// Commit is the second release's commit.
	Commit string
	// Held is the Rollout's message while the step held.
	Held string
	// Final is the second release's summary.
	Final Summary
}

// RunDrift shows drift as a gate: release v1 rolls out region by region with every
// Workspace checking for drift and every step's drift block; then someone edits the ConfigMap
// of the second region by hand, its drift check reports it, release v2 applies in the first
// region and holds before the second (reason DriftDetected), and once the drift is accepted
// (magosctl rollout accept-drift) v2 goes on region by region.
func RunDrift(ctx context.Context, fleet *devfleet.Fleet, opts DriftOptions) (DriftSummary, error) {
	opts.Options = opts.Options.withDefaults()
	if opts.Module == nil {
		opts.Module = demoscenario.LocalModuleAt
	}
	if len(fleet.Order) < 2 {
		return DriftSummary{}, fmt.Errorf("the drift demo needs at least two spokes (have %s)", strings.Join(fleet.Order, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	out := opts.Out
	first := opts.Options
	first.Module, first.DriftInterval, first.StepDrift = opts.Module("v1"), time.Hour, magosv1.DriftBlock
	s, err := Run(ctx, fleet, first)
	if err != nil {
		return DriftSummary{}, err
	}
	if !s.Completed {
		return DriftSummary{Final: s}, fmt.Errorf("release v1 did not complete:\n%s", s.Final)
	}
	for _, region := range fleet.Order {
		if err := waitDrift(ctx, fleet, region, magosv1.DriftResultNone); err != nil {
			return DriftSummary{}, err
		}
	}
	fmt.Fprintf(out, "demo: release v1 applied everywhere; every region's drift check says NoDrift\n")

	sum := DriftSummary{Region: fleet.Order[1]}
	if err := editByHand(ctx, fleet, sum.Region); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "demo: edited ConfigMap %s in %s by hand (as `kubectl --kubeconfig %s edit configmap %s` would)\n",
		demoscenario.ConfigMap, sum.Region, fleet.Kubeconfig(sum.Region), demoscenario.ConfigMap)
	if err := waitDrift(ctx, fleet, sum.Region, magosv1.DriftResultDrifted); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "demo: %s's drift check says Drifted (kubectl get workspace %s -o wide shows it)\n", sum.Region, Workspace)

	if sum.Commit, err = Commit(fleet, "edge module v2", opts.Module("v2")); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "demo: committed release v2 (%s)\n", sum.Commit[:12])
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Project}
	r, err := untilRollout(ctx, fleet, 5*time.Minute, func(r *magosv1.Rollout) error {
		if r.Status.Reason != magosv1.ReasonDriftDetected {
			return fmt.Errorf("the Rollout is %s/%s, not held by drift yet", r.Status.Phase, r.Status.Reason)
		}
		return nil
	})
	if err != nil {
		return sum, err
	}
	sum.Held = r.Status.Message
	if text, _, err := cli.RolloutStatus(ctx, fleet.Client("hub"), key); err == nil {
		fmt.Fprintf(out, "%s\n", text)
	}
	fmt.Fprintf(out, "demo: the step of %s holds v2: %s\n", sum.Region, sum.Held)
	if opts.WhileHeld != nil {
		if err := opts.WhileHeld(ctx, sum.Region, sum.Commit); err != nil {
			return sum, err
		}
	}
	workspace := fleet.Order[1] + "/" + corev1.NamespaceDefault + "/" + Workspace
	printed, err := magosctl(ctx, fleet, "rollout", "accept-drift", Project, "--workspace", workspace)
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "demo: accepted the drift: magosctl rollout accept-drift %s --workspace %s\n%s\n", Project, workspace, printed)
	if sum.Final, err = Follow(ctx, fleet, opts.Options); err != nil {
		return sum, err
	}
	return sum, nil
}

// editByHand changes the release in the region's ConfigMap, as someone with kubectl would, and
// asks the region's Workspace for a drift check (magosproject.io/check-drift).
func editByHand(ctx context.Context, fleet *devfleet.Fleet, region string) error {
	c := fleet.Client(region)
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demoscenario.ConfigMap}, &cm); err != nil {
		return fmt.Errorf("reading the ConfigMap of %s: %w", region, err)
	}
	cm.Data["release"] = "edited-by-hand"
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("editing the ConfigMap of %s: %w", region, err)
	}
	var ws magosv1.Workspace
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Workspace}, &ws); err != nil {
		return err
	}
	patch := client.MergeFrom(ws.DeepCopy())
	if ws.Annotations == nil {
		ws.Annotations = map[string]string{}
	}
	ws.Annotations[keys.CheckDrift] = time.Now().UTC().Format(time.RFC3339)
	return c.Patch(ctx, &ws, patch)
}

// waitDrift waits until the region's Workspace reports drift result want for the commit it
// applied, on the spoke and on its mirror on the hub.
func waitDrift(ctx context.Context, fleet *devfleet.Fleet, region, want string) error {
	return localcluster.Poll(3*time.Minute, func() error {
		var ws magosv1.Workspace
		if err := fleet.Client(region).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Workspace}, &ws); err != nil {
			return err
		}
		d := ws.Status.Drift
		if d == nil || d.Result != want || d.Revision != ws.Status.ObservedRevision || d.CheckingRunID != "" {
			return fmt.Errorf("%s: drift %+v at applied commit %s, want %s", region, d, ws.Status.ObservedRevision, want)
		}
		var m magosv1.Workspace
		if err := fleet.Client("hub").Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(region), Name: mirror.Name(corev1.NamespaceDefault, Workspace)}, &m); err != nil {
			return err
		}
		if md := m.Status.Drift; md == nil || md.Result != want || md.RunID != d.RunID {
			return fmt.Errorf("%s: the hub's mirror shows drift %+v, want %s of check %s", region, md, want, d.RunID)
		}
		return nil
	})
}
