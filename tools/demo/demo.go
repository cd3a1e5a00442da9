// Package demo runs the Magos Fleet demo on a local fleet: a small OpenTofu module in a local
// git repository, a Project and a region-by-region Rollout on the hub, one Workspace in every
// spoke, and a live view of the Rollout as it moves from region to region.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/tools/devfleet"
	"github.com/magosfleet/magos/tools/workdir"
)

// Names of the demo's objects (their one definition is pkg/demoscenario, which the real-node
// demo shares).
const (
	// Project names the Project and the Rollout on the hub.
	Project = demoscenario.Project
	// Workspace names the Workspace in every spoke (namespace default).
	Workspace = demoscenario.Workspace
	// VariableSet names the Workspace's VariableSet in every spoke.
	VariableSet = demoscenario.VariableSet
	// TofuVersion is the OpenTofu version the demo's Workspaces run (demoscenario.TofuVersion).
	TofuVersion = demoscenario.TofuVersion
)

// Options configures Run.
type Options struct {
	// FailRegion makes the Workspace of that spoke fail its plan, to show the Rollout halting.
	FailRegion string
	// Out receives the live view and the summary.
	Out io.Writer
	// Timeout bounds the whole scenario (default 10 minutes).
	Timeout time.Duration
	// Refresh is how often the view is redrawn when something changed (default 500ms).
	Refresh time.Duration
	// Paused creates the Rollout paused (tests resume it when they are ready).
	Paused bool
	// Approval makes the last region's step require approval: the demo waits until someone runs
	// magosctl rollout approve.
	Approval bool
	// PlanFirst sets the Rollout's spec.planFirst: every region plans before the first applies,
	// and the view shows the preview by step and cluster.
	PlanFirst bool
	// Module is the root module of the first commit (default: demoscenario.LocalModuleAt("v1"), which
	// manages a ConfigMap in each region through the kubectl provider). It must
	// declare the variables region and healthy, which the demo's VariableSet sets.
	Module string
	// PollIntervals sets the magosproject.io/git-poll-interval annotation of the Workspace in
	// the spokes named (none by default: the agent's default interval).
	PollIntervals map[string]time.Duration
	// DriftInterval, when set, is every Workspace's spec.driftDetection interval.
	DriftInterval time.Duration
	// StepDrift, when set, is every step's drift (block, warn or ignore).
	StepDrift string
	// Verification, when set, is every step's verification (the checks each region passes
	// after its apply before the next region starts).
	Verification *magosv1.StepVerification
	// OnFailure, when set, is the Rollout's spec.onFailure (Halt or Rollback).
	OnFailure string
}

// StepTime is when a step completed, from the start of the Rollout.
type StepTime struct {
	Step  string
	After time.Duration
}

// Summary is the outcome of the demo.
type Summary struct {
	// Completed is true when the Rollout reached Applied.
	Completed bool
	// HaltedAt is the step where the Rollout halted ("" if it did not).
	HaltedAt string
	// Steps lists the steps in the order they completed.
	Steps []StepTime
	// NeverGranted lists the spokes whose Workspace never got a grant (after a halt).
	NeverGranted []string
	// Wall is the time from applying the Rollout to its end.
	Wall time.Duration
	// Final is the last rendering of the Rollout's status.
	Final string
}

// Run sets up the demo on fleet and follows the Rollout until it completes or halts.
func Run(ctx context.Context, fleet *devfleet.Fleet, opts Options) (Summary, error) {
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := Setup(ctx, fleet, opts); err != nil {
		return Summary{}, err
	}
	return Follow(ctx, fleet, opts)
}

func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Refresh == 0 {
		o.Refresh = 500 * time.Millisecond
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Module == "" {
		o.Module = demoscenario.LocalModuleAt("v1")
	}
	return o
}

// Setup commits the module to a local repository and applies the Project and Rollout to the
// hub and a VariableSet and a Workspace (cdn-edge, in namespace default) to every spoke.
func Setup(ctx context.Context, fleet *devfleet.Fleet, opts Options) error {
	opts = opts.withDefaults()
	if opts.FailRegion != "" && fleet.Spokes[opts.FailRegion] == nil {
		return fmt.Errorf("--fail-region %s: no such spoke (have %s)", opts.FailRegion, strings.Join(fleet.Order, ", "))
	}
	for name := range opts.PollIntervals {
		if fleet.Spokes[name] == nil {
			return fmt.Errorf("poll interval for %s: no such spoke (have %s)", name, strings.Join(fleet.Order, ", "))
		}
	}
	repo, branch, err := makeRepository(repositoryDir(fleet), opts.Module)
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "demo: module committed to %s\n", repo)
	// The Workspaces first, as a platform team has them, then the Rollout that orders them: a
	// Rollout created before its Workspaces reach the hub rightly reports NoWorkspacesFound.
	for _, name := range fleet.Order {
		if err := applySpoke(ctx, fleet, name, repo, branch, name == opts.FailRegion, opts); err != nil {
			return err
		}
	}
	if err := waitMirrored(ctx, fleet); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "demo: one Workspace in each of %s, mirrored to the hub\n", strings.Join(fleet.Order, ", "))
	if err := applyHub(ctx, fleet, opts); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "demo: Project and Rollout %s applied on the hub\n\n", Project)
	return nil
}

// waitMirrored waits until the hub holds the mirror of every spoke's demo Workspace.
func waitMirrored(ctx context.Context, fleet *devfleet.Fleet) error {
	return localcluster.Poll(2*time.Minute, func() error {
		var mirrors magosv1.WorkspaceList
		if err := fleet.Client("hub").List(ctx, &mirrors, client.MatchingLabelsSelector{Selector: mirror.OnlyMirrors()}); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, name := range fleet.Order {
			for _, m := range mirrors.Items {
				if m.Namespace == mirror.Namespace(name) && mirror.OriginOf(name, &m).Name == Workspace {
					seen[name] = true
				}
			}
		}
		for _, name := range fleet.Order {
			if !seen[name] {
				return fmt.Errorf("the Workspace of %s is not mirrored on the hub yet", name)
			}
		}
		return nil
	})
}

// Follow redraws the Rollout on every change until it completes or halts.
func Follow(ctx context.Context, fleet *devfleet.Fleet, opts Options) (Summary, error) {
	opts = opts.withDefaults()
	return follow(ctx, fleet, opts)
}

func follow(ctx context.Context, fleet *devfleet.Fleet, opts Options) (Summary, error) {
	start := time.Now()
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Project}
	var s Summary
	done := map[string]bool{}
	last, asked := "", false
	tick := time.NewTicker(opts.Refresh)
	defer tick.Stop()
	for {
		text, r, err := cli.RolloutStatus(ctx, fleet.Client("hub"), key)
		if err == nil {
			if text != last {
				fmt.Fprintf(opts.Out, "[+%s]\n%s\n", time.Since(start).Round(time.Second), text)
				last = text
			}
			if r.Status.Reason == magosv1.ReasonAwaitingApproval && !asked {
				asked = true
				fmt.Fprintf(opts.Out, "demo: step %s awaits your approval. Approve it, from another terminal, with\n  magosctl --kubeconfig %s rollout approve %s --step %s -n default\n(go run ./hub/cmd/magosctl, or bin/magosctl after make build)\n\n",
					r.Status.CurrentStepName, fleet.Kubeconfig("hub"), Project, r.Status.CurrentStepName)
			}
			for _, st := range r.Status.Steps {
				if st.Phase == magosv1.StepCompleted && !done[st.Name] {
					done[st.Name] = true
					s.Steps = append(s.Steps, StepTime{Step: st.Name, After: time.Since(start)})
				}
			}
			if r.Status.ObservedGeneration == r.Generation {
				switch {
				case r.Status.Phase == magosv1.PhaseApplied:
					s.Completed, s.Final, s.Wall = true, text, time.Since(start)
					return s, nil
				case r.Status.Phase == magosv1.PhaseFailed && r.Status.Reason == magosv1.ReasonStepFailed:
					s.HaltedAt, s.Final, s.Wall = r.Status.CurrentStepName, text, time.Since(start)
					s.NeverGranted, err = neverGranted(ctx, fleet, r.Status.CurrentStep)
					return s, err
				}
			}
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("the Rollout did not finish in time (last view above; logs in %s): %w",
				filepath.Join(fleet.Dir, "logs"), ctx.Err())
		case <-tick.C:
		}
	}
}

// neverGranted lists the spokes after the halted step whose Workspace carries no grant.
func neverGranted(ctx context.Context, fleet *devfleet.Fleet, halted int) ([]string, error) {
	var out []string
	for _, name := range fleet.Order[halted+1:] {
		var ws magosv1.Workspace
		if err := fleet.Client(name).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Workspace}, &ws); err != nil {
			return nil, err
		}
		if !grant.Of(&ws).Allowed && ws.Status.Phase == magosv1.PhasePending {
			out = append(out, name)
		}
	}
	return out, nil
}

// Print writes the summary.
func (s Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "\n==== Summary (%s from Rollout to result) ====\n", s.Wall.Round(time.Second))
	for _, st := range s.Steps {
		fmt.Fprintf(w, "  step %-12s applied after %s\n", st.Step, st.After.Round(time.Second))
	}
	switch {
	case s.Completed:
		fmt.Fprintln(w, "  Rollout completed: every region applied, one region at a time.")
	case s.HaltedAt != "":
		fmt.Fprintf(w, "  Rollout halted at step %s: the failure froze it before the next region was granted.\n", s.HaltedAt)
		if len(s.NeverGranted) > 0 {
			fmt.Fprintf(w, "  Never granted (still Pending): %s\n", strings.Join(s.NeverGranted, ", "))
		}
	}
	fmt.Fprintf(w, "\n%s", s.Final)
}

// repositoryDir is where the demo's repository lives.
func repositoryDir(fleet *devfleet.Fleet) string { return filepath.Join(fleet.Dir, "repo") }

// makeRepository commits the module to a new repository and returns its URL and branch.
func makeRepository(dir, module string) (url, branch string, err error) {
	if err := workdir.Prepare(dir, "the Magos demo (its Git repository)"); err != nil {
		return "", "", fmt.Errorf("the demo repository: %w", err)
	}
	r, err := git.PlainInit(dir, false)
	if err != nil {
		return "", "", fmt.Errorf("creating the demo repository: %w", err)
	}
	if _, err := commit(r, dir, "edge module v1", module); err != nil {
		return "", "", err
	}
	head, err := r.Head()
	if err != nil {
		return "", "", err
	}
	return "file://" + dir, head.Name().Short(), nil
}

// Commit commits a new version of the root module (main.tf) to the branch the demo's
// Workspaces track, as a developer pushing a change would, and returns the commit's SHA. Setup
// must have made the repository.
func Commit(fleet *devfleet.Fleet, message, module string) (string, error) {
	dir := repositoryDir(fleet)
	r, err := git.PlainOpen(dir)
	if err != nil {
		return "", fmt.Errorf("opening the demo repository: %w", err)
	}
	return commit(r, dir, message, module)
}

// commit writes module to main.tf in the repository r (with its work tree at dir) and commits it.
func commit(r *git.Repository, dir, message, module string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(module), 0o644); err != nil {
		return "", err
	}
	wt, err := r.Worktree()
	if err != nil {
		return "", err
	}
	if _, err := wt.Add("main.tf"); err != nil {
		return "", err
	}
	sig := &object.Signature{Name: "Magos demo", Email: "demo@magosfleet.io", When: time.Now()}
	hash, err := wt.Commit(message, &git.CommitOptions{Author: sig})
	if err != nil {
		return "", fmt.Errorf("committing the demo module (%s): %w", message, err)
	}
	return hash.String(), nil
}

func applyHub(ctx context.Context, fleet *devfleet.Fleet, opts Options) error {
	p, ro := demoscenario.HubObjects(fleet.Order)
	if opts.Approval { // the last region waits for a person
		ro.Spec.Strategy.Steps[len(ro.Spec.Strategy.Steps)-1].RequireApproval = true
	}
	ro.Spec.Paused, ro.Spec.PlanFirst, ro.Spec.OnFailure = opts.Paused, opts.PlanFirst, opts.OnFailure
	for i := range ro.Spec.Strategy.Steps {
		ro.Spec.Strategy.Steps[i].Drift = opts.StepDrift
		ro.Spec.Strategy.Steps[i].Verification = opts.Verification
	}
	return demoscenario.Create(ctx, fleet.Client("hub"), "on the hub", p, ro)
}

func applySpoke(ctx context.Context, fleet *devfleet.Fleet, name, repo, branch string, fail bool, opts Options) error {
	vs, ws := demoscenario.SpokeObjects(name, magosv1.Source{RepoURL: repo, TargetRevision: branch}, fail)
	if opts.DriftInterval > 0 {
		ws.Spec.DriftDetection = &magosv1.DriftDetectionSpec{Interval: metav1.Duration{Duration: opts.DriftInterval}}
	}
	if poll := opts.PollIntervals[name]; poll > 0 {
		ws.Annotations = map[string]string{keys.GitPollInterval: poll.String()}
	}
	return demoscenario.Create(ctx, fleet.Client(name), "in "+name, vs, ws)
}

// magosctl runs magosctl against the fleet's hub, in namespace default, and returns what it
// printed; a failure says which command failed, with its output.
func magosctl(ctx context.Context, fleet *devfleet.Fleet, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := cli.NewCommand(&out, &out)
	cmd.SetArgs(append([]string{"--kubeconfig", fleet.Kubeconfig("hub"), "-n", corev1.NamespaceDefault}, args...))
	if err := cmd.ExecuteContext(ctx); err != nil {
		return out.String(), fmt.Errorf("magosctl %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, out.String())
	}
	return out.String(), nil
}

// untilRollout reads the demo's Rollout on the hub until check passes on it, for at most
// timeout, and returns the Rollout as last read; the error is check's last.
func untilRollout(ctx context.Context, fleet *devfleet.Fleet, timeout time.Duration, check func(*magosv1.Rollout) error) (*magosv1.Rollout, error) {
	r := &magosv1.Rollout{}
	key := client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: Project}
	err := localcluster.Poll(timeout, func() error {
		if err := fleet.Client("hub").Get(ctx, key, r); err != nil {
			return err
		}
		return check(r)
	})
	return r, err
}
