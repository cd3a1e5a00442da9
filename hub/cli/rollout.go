package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/rolloutgrid"
	"github.com/magosfleet/magos/hub/steer"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/scheme"
)

// ErrRolloutFailed is returned by `rollout status --watch` when the Rollout halts.
var ErrRolloutFailed = errors.New("rollout failed")

func newRolloutCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Inspect and steer Rollouts (run against the hub)",
	}
	var watch bool
	var timeout time.Duration
	status := &cobra.Command{
		Use:   "status ROLLOUT",
		Short: "Show a Rollout's steps and, per cluster, its Workspaces",
		Long: "Show a Rollout's steps and, per cluster, its Workspaces. With --watch, redraw on every\n" +
			"change until the Rollout completes (exit 0) or halts (exit 1).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.clientInNamespace()
			if err != nil {
				return err
			}
			key := client.ObjectKey{Namespace: ns, Name: args[0]}
			ctx := contextFor(cmd)
			if !watch {
				if f := o.output(); f != "" && f != "wide" {
					var r magosv1.Rollout
					if err := c.Get(ctx, key, &r); err != nil {
						return fmt.Errorf("rollout %s: %w", key, err)
					}
					_, err := o.print(&r)
					return err
				}
				text, _, err := RolloutStatus(ctx, c, key)
				if err != nil {
					return err
				}
				_, err = io.WriteString(o.Out, text)
				return err
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			cfg, err := o.Config.ToRESTConfig()
			if err != nil {
				return fmt.Errorf("loading kubeconfig: %w", err)
			}
			return WatchRollout(ctx, cfg, key, o.Out, WatchOptions{})
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "redraw on change until the Rollout completes or halts")
	status.Flags().DurationVar(&timeout, "timeout", 0, "with --watch, give up after this long (0: never)")

	pause := &cobra.Command{
		Use:   "pause ROLLOUT",
		Short: "Stop new grants; runs already granted finish",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.setPaused(cmd, args[0], true) },
	}
	resume := &cobra.Command{
		Use:   "resume ROLLOUT",
		Short: "Let a paused Rollout give grants again",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.setPaused(cmd, args[0], false) },
	}
	var step string
	approve := &cobra.Command{
		Use:   "approve ROLLOUT --step STEP",
		Short: "Approve the plans a step that requires approval waits with",
		Long: "Approve the plans a step that requires approval (steps[].requireApproval) waits with: the\n" +
			"approval names each plan's Workspace, commit and digest, as rollout status lists them, and\n" +
			"the step applies exactly those plans. A plan that changes afterwards voids the approval and\n" +
			"the step waits again. Refused unless the step awaits approval. Needs the verb approve on\n" +
			"the Rollout.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.approveStep(cmd, args[0], step) },
	}
	approve.Flags().StringVar(&step, "step", "", "the step to approve (required)")
	_ = approve.MarkFlagRequired("step")
	var rejectStep, rejectReason string
	reject := &cobra.Command{
		Use:   "reject ROLLOUT --step STEP --reason TEXT",
		Short: "Reject the plans a step that requires approval waits with, saying why",
		Long: "Reject the plans a step that requires approval waits with: the rejection (spec.rejections)\n" +
			"names each plan's Workspace, commit and digest, as rollout status lists them, with your\n" +
			"reason and user name, and replaces the step's approval if it had one. The step applies none\n" +
			"of them, and the Rollout's status and Events say who rejected them and why, until its plans\n" +
			"change (a new commit asks for approval again) or rollout approve approves them after all.\n" +
			"Refused unless the step awaits approval. Needs the verb approve on the Rollout.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.rejectStep(cmd, args[0], rejectStep, rejectReason)
		},
	}
	reject.Flags().StringVar(&rejectStep, "step", "", "the step whose plans to reject (required)")
	reject.Flags().StringVar(&rejectReason, "reason", "", "why (required)")
	_ = reject.MarkFlagRequired("step")
	_ = reject.MarkFlagRequired("reason")
	var driftStep, workspace string
	acceptDrift := &cobra.Command{
		Use:   "accept-drift ROLLOUT (--workspace CLUSTER/NAMESPACE/NAME | --step STEP)",
		Short: "Accept the drift of Workspaces, so that a step whose drift is block goes on",
		Long: "Accept the drift a Workspace's last drift check found at the commit it applied: the\n" +
			"acceptance (spec.driftAcceptances) names the Workspace and the digest of that check's plan,\n" +
			"read from the hub's mirror, in your user name. A step whose drift is block then no longer\n" +
			"waits for that Workspace, and the step's status no longer lists it as drifted. A later check\n" +
			"that finds other drift (another digest) blocks again. With --step, accept the drift of every\n" +
			"Workspace the step's status lists as drifted. Refused for a Workspace that has not drifted\n" +
			"and for one the hub does not mirror.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.acceptDrift(cmd, args[0], workspace, driftStep)
		},
	}
	acceptDrift.Flags().StringVar(&workspace, "workspace", "", "the Workspace whose drift to accept, as CLUSTER/NAMESPACE/NAME")
	acceptDrift.Flags().StringVar(&driftStep, "step", "", "accept the drift of every Workspace the step lists as drifted")
	acceptDrift.MarkFlagsOneRequired("workspace", "step")
	acceptDrift.MarkFlagsMutuallyExclusive("workspace", "step")
	var to, reason string
	var cancel bool
	rollback := &cobra.Command{
		Use:   "rollback ROLLOUT [--to COMMIT] [--reason TEXT] | --cancel",
		Short: "Roll an earlier commit back out, last step first",
		Long: "Roll an earlier commit back out (spec.rollback): every Workspace of the Rollout that is not\n" +
			"at it runs it again, step by step in reverse order (the last step first), through the same\n" +
			"grants, previews, approvals and verification as a change; the agents plan the commit named,\n" +
			"not their ref's head. Without --to, each source goes back to the newest commit every one of\n" +
			"its Workspaces had applied before the one rolled out now, as the hub's mirrors record them.\n" +
			"--to names a commit (a full SHA, or a prefix of at least 7 characters) that some Workspace\n" +
			"applied. The Rollout holds the sources at that commit until --cancel, which removes\n" +
			"spec.rollback: the refs' newest commits then roll out again in step order.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cancel {
				if to != "" || reason != "" {
					return fmt.Errorf("--cancel takes neither --to nor --reason")
				}
				return o.cancelRollback(cmd, args[0])
			}
			return o.rollback(cmd, args[0], to, reason)
		},
	}
	rollback.Flags().StringVar(&to, "to", "", "the commit to roll back to (default: the last one every Workspace applied)")
	rollback.Flags().StringVar(&reason, "reason", "", "why, for the Rollout's status and Events")
	rollback.Flags().BoolVar(&cancel, "cancel", false, "stop holding the sources at the commit rolled back to")
	cmd.AddCommand(status, pause, resume, approve, reject, acceptDrift, rollback)
	return cmd
}

// rolloutNamed reads Rollout name of the namespace in force, with the client that read it.
func (o *Options) rolloutNamed(ctx context.Context, name string) (client.Client, *magosv1.Rollout, error) {
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return nil, nil, err
	}
	r := &magosv1.Rollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
		return nil, nil, fmt.Errorf("rollout %s/%s: %w", ns, name, err)
	}
	return c, r, nil
}

// approveStep writes the approval of the plans step of Rollout name waits with, in the name of
// the user the API server knows the caller as (steer.Approve).
func (o *Options) approveStep(cmd *cobra.Command, name, step string) error {
	ctx := contextFor(cmd)
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return err
	}
	user, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	a, err := steer.Approve(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, step, user, o.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "rollout %s/%s: step %s approved by %s (%d plan(s)):\n", ns, name, step, a.ApprovedBy, len(a.Plans))
	for _, p := range a.Plans {
		fmt.Fprintf(o.Out, "  %s  plan %s of commit %s\n", p.Workspace, p.Digest, shortSHA(p.Revision))
	}
	return nil
}

// rejectStep writes the rejection of the plans step of Rollout name waits with, for reason, in
// the name of the user the API server knows the caller as (steer.Reject).
func (o *Options) rejectStep(cmd *cobra.Command, name, step, reason string) error {
	ctx := contextFor(cmd)
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return err
	}
	user, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	x, err := steer.Reject(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, step, reason, user, o.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "rollout %s/%s: step %s rejected by %s (%d plan(s)): %s\n", ns, name, step, x.RejectedBy, len(x.Plans), x.Reason)
	for _, p := range x.Plans {
		fmt.Fprintf(o.Out, "  %s  plan %s of commit %s\n", p.Workspace, p.Digest, shortSHA(p.Revision))
	}
	return nil
}

// acceptDrift writes the acceptance of the current drift of a Workspace (workspace), or of every
// Workspace step lists as drifted, into spec.driftAcceptances of Rollout name, in the name of
// the user the API server knows the caller as.
func (o *Options) acceptDrift(cmd *cobra.Command, name, workspace, step string) error {
	ctx := contextFor(cmd)
	c, r, err := o.rolloutNamed(ctx, name)
	if err != nil {
		return err
	}
	ns := r.Namespace
	targets := []string{workspace}
	if step != "" {
		if targets, err = driftedOf(r, step); err != nil {
			return fmt.Errorf("rollout %s/%s: %w", ns, name, err)
		}
	}
	var accepted []magosv1.DriftAcceptance
	for _, key := range targets {
		a, err := driftAcceptance(ctx, c, r, key)
		if err != nil {
			return fmt.Errorf("rollout %s/%s: %w", ns, name, err)
		}
		accepted = append(accepted, a)
	}
	user, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	at := metav1.NewTime(o.Now().Truncate(time.Second))
	for _, a := range accepted {
		a.AcceptedBy, a.AcceptedAt = user, at
		r.Spec.DriftAcceptances = append(slices.DeleteFunc(r.Spec.DriftAcceptances,
			func(x magosv1.DriftAcceptance) bool { return x.Workspace == a.Workspace }), a)
	}
	if err := steer.Update(ctx, c, r, "accepting drift (its Workspaces may have drifted anew)"); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "rollout %s/%s: drift of %d Workspace(s) accepted by %s:\n", ns, name, len(accepted), user)
	for _, a := range accepted {
		fmt.Fprintf(o.Out, "  %s  drift %s\n", a.Workspace, a.Digest)
	}
	return nil
}

// driftedOf is the Workspaces step of r lists as drifted; a step that lists none is an error.
func driftedOf(r *magosv1.Rollout, step string) ([]string, error) {
	if _, err := steer.StepOf(r, step); err != nil {
		return nil, err
	}
	st, err := steer.DecidedStatus(r, step)
	if err != nil {
		return nil, err
	}
	if st == nil || len(st.Drifted) == 0 {
		return nil, fmt.Errorf("step %s lists no drifted Workspace", step)
	}
	return st.Drifted, nil
}

// driftAcceptance is the acceptance of the current drift of the Workspace key
// (cluster/namespace/name) of r, read from the hub's mirror of it (acceptedBy and acceptedAt left
// for the caller). It refuses a Workspace the hub does not mirror, one of another Project, and
// one that has not drifted at the commit it applied (decision.Workspace.Drifted).
func driftAcceptance(ctx context.Context, c client.Client, r *magosv1.Rollout, key string) (magosv1.DriftAcceptance, error) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || slices.Contains(parts, "") {
		return magosv1.DriftAcceptance{}, fmt.Errorf("workspace %q: want CLUSTER/NAMESPACE/NAME", key)
	}
	cluster, ns, name := parts[0], parts[1], parts[2]
	if ns != r.Namespace {
		return magosv1.DriftAcceptance{}, fmt.Errorf("workspace %s is not of the Rollout: its Workspaces live in namespace %s", key, r.Namespace)
	}
	m, err := steer.Mirror(ctx, c, cluster, ns, name)
	if err != nil {
		return magosv1.DriftAcceptance{}, err
	}
	w := decision.FromWorkspace(cluster, m)
	switch d := m.Status.Drift; {
	case !w.MemberOf(r.Namespace, r.Spec.ProjectRef):
		return magosv1.DriftAcceptance{}, fmt.Errorf("workspace %s belongs to Project %q, not to the Rollout's %q", key, w.ProjectRef, r.Spec.ProjectRef)
	case d == nil:
		return magosv1.DriftAcceptance{}, fmt.Errorf("workspace %s is not drifted: no drift check has run (spec.driftDetection)", key)
	case !w.Drifted:
		return magosv1.DriftAcceptance{}, fmt.Errorf("workspace %s is not drifted at the commit it applied (%s): its last drift check says %s of commit %s",
			key, orDash(shortSHA(m.Status.ObservedRevision)), d.Result, orDash(shortSHA(d.Revision)))
	case w.DriftDigest == "":
		return magosv1.DriftAcceptance{}, fmt.Errorf("workspace %s drifted, but its drift check recorded no plan digest to accept", key)
	}
	return magosv1.DriftAcceptance{Workspace: key, Digest: w.DriftDigest}, nil
}

// rollback writes spec.rollback on Rollout name: the commits of decision.RollbackTargets, from
// the hub's mirrors of the Rollout's Workspaces, in the caller's user name.
func (o *Options) rollback(cmd *cobra.Command, name, to, reason string) error {
	ctx := contextFor(cmd)
	c, r, err := o.rolloutNamed(ctx, name)
	if err != nil {
		return err
	}
	ns := r.Namespace
	if rb := r.Spec.Rollback; rb != nil {
		return fmt.Errorf("rollout %s/%s already rolls back (requested by %s at %s): magosctl rollout rollback %s --cancel first",
			ns, name, rb.RequestedBy, rb.RequestedAt.UTC().Format(time.RFC3339), name)
	}
	var mirrors magosv1.WorkspaceList
	if err := c.List(ctx, &mirrors, client.InNamespace(""), client.MatchingLabelsSelector{Selector: mirror.OnlyMirrors()}); err != nil {
		return fmt.Errorf("listing the hub's mirrors: %w", err)
	}
	in := decision.Input{Namespace: ns, Project: r.Spec.ProjectRef, Clusters: map[string]decision.Cluster{}}
	for i := range mirrors.Items {
		cluster, ok := mirror.ClusterOf(mirrors.Items[i].Namespace)
		if !ok {
			continue
		}
		in.Clusters[cluster] = decision.Cluster{Name: cluster}
		in.Workspaces = append(in.Workspaces, decision.FromWorkspace(cluster, &mirrors.Items[i]))
	}
	targets, err := decision.RollbackTargets(in, r.Status.Revisions, to)
	if err != nil {
		return fmt.Errorf("rollout %s/%s: %w", ns, name, err)
	}
	user, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	r.Spec.Rollback = &magosv1.RolloutRollback{Commits: targets, RequestedBy: user,
		RequestedAt: metav1.NewTime(o.Now().Truncate(time.Second)), Reason: reason}
	if err := steer.Update(ctx, c, r, "asking for the rollback"); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "rollout %s/%s: rolling back, last step first, as requested by %s:\n", ns, name, user)
	for _, t := range targets {
		fmt.Fprintf(o.Out, "  %s@%s  to commit %s\n", t.RepoURL, t.TargetRevision, t.Commit)
	}
	return nil
}

// cancelRollback removes spec.rollback from Rollout name.
func (o *Options) cancelRollback(cmd *cobra.Command, name string) error {
	ctx := contextFor(cmd)
	c, r, err := o.rolloutNamed(ctx, name)
	if err != nil {
		return err
	}
	ns := r.Namespace
	if r.Spec.Rollback == nil {
		return fmt.Errorf("rollout %s/%s does not roll back", ns, name)
	}
	r.Spec.Rollback = nil
	if err := steer.Update(ctx, c, r, "cancelling the rollback"); err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.Out, "rollout %s/%s: rollback cancelled; the refs' newest commits roll out again in step order\n", ns, name)
	return err
}

// setPaused pauses or resumes Rollout name in the caller's name (steer.SetPaused).
func (o *Options) setPaused(cmd *cobra.Command, name string, paused bool) error {
	ctx := contextFor(cmd)
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return err
	}
	user, err := whoAmI(ctx, c)
	if err != nil {
		return err
	}
	if err := steer.SetPaused(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, paused, user); err != nil {
		return err
	}
	verb := "resumed"
	if paused {
		verb = "paused"
	}
	_, err = fmt.Fprintf(o.Out, "rollout %s/%s %s by %s\n", ns, name, verb, user)
	return err
}

// WatchOptions tunes WatchRollout.
type WatchOptions struct {
	// Redraw is how often the status is rendered again from memory with no event, for what
	// changes with time alone (a soak's time left). Default 1s.
	Redraw time.Duration
}

// WatchRollout redraws the Rollout's status on w whenever it changes, until the Rollout
// completes (nil), halts (ErrRolloutFailed) or ctx ends. It watches the hub: one list and one
// watch each of the Rollout, the Clusters and the mirrors, then renders from memory on every
// event (and every Redraw), so a watch costs the hub nothing per redraw whatever the number of
// mirrors.
func WatchRollout(ctx context.Context, cfg *rest.Config, key client.ObjectKey, w io.Writer, opts WatchOptions) error {
	if opts.Redraw <= 0 {
		opts.Redraw = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	informers, err := cache.New(cfg, cache.Options{
		Scheme: scheme.New(),
		ByObject: map[client.Object]cache.ByObject{
			&magosv1.Rollout{}: {Namespaces: map[string]cache.Config{key.Namespace: {}},
				Field: fields.OneTermEqualSelector("metadata.name", key.Name)},
			&magosv1.Workspace{}: {Label: mirror.OnlyMirrors()},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("watching the hub: %w", err)
	}
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	for _, obj := range []client.Object{&magosv1.Rollout{}, &magosv1.Cluster{}, &magosv1.Workspace{}} {
		inf, err := informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("watching the hub: %w", err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { signal() },
			UpdateFunc: func(any, any) { signal() },
			DeleteFunc: func(any) { signal() },
		}); err != nil {
			return fmt.Errorf("watching the hub: %w", err)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- informers.Start(ctx) }()
	defer func() { cancel(); <-stopped }()
	if !informers.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("watching the hub: the watches did not sync")
	}

	redraw := time.NewTicker(opts.Redraw)
	defer redraw.Stop()
	last := ""
	for {
		text, r, err := RolloutStatus(ctx, informers, key)
		if err != nil && ctx.Err() == nil {
			text = "error: " + err.Error() + "\n"
		}
		if text != last {
			if last != "" {
				_, _ = io.WriteString(w, "\n")
			}
			if _, werr := io.WriteString(w, text); werr != nil {
				return werr
			}
			last = text
		}
		if r != nil && r.Status.ObservedGeneration == r.Generation {
			switch info := magosv1.InfoOf(r.Status.Phase, r.Status.Reason); {
			case info.Succeeded:
				return nil
			case info.Failed:
				return fmt.Errorf("%w: %s: %s", ErrRolloutFailed, r.Status.Reason, r.Status.Message)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-redraw.C:
		}
	}
}

// RolloutStatus renders where a Rollout stands: its phase and message, then one row per step
// and Workspace with the Workspace's cluster, phase and revision. It reads the Rollout, the
// Cluster objects and the mirrors from c: the hub, or a cache of it.
func RolloutStatus(ctx context.Context, c client.Reader, key client.ObjectKey) (string, *magosv1.Rollout, error) {
	var r magosv1.Rollout
	if err := c.Get(ctx, key, &r); err != nil {
		return "", nil, fmt.Errorf("rollout %s: %w", key, err)
	}
	var clusters magosv1.ClusterList
	if err := c.List(ctx, &clusters); err != nil {
		return "", nil, fmt.Errorf("listing clusters: %w", err)
	}
	var mirrors magosv1.WorkspaceList
	if err := c.List(ctx, &mirrors, client.MatchingLabelsSelector{Selector: mirror.OnlyMirrors()}); err != nil {
		return "", nil, fmt.Errorf("listing workspaces: %w", err)
	}
	return renderRollout(&r, clusters.Items, mirrors.Items, time.Now()), &r, nil
}

type row struct {
	step, state, cluster, workspace, phase, revision, drift string
}

func renderRollout(r *magosv1.Rollout, clusters []magosv1.Cluster, mirrors []magosv1.Workspace, now time.Time) string {
	g := rolloutgrid.Build(r, clusters, mirrors, now)

	var b bytes.Buffer
	fmt.Fprintf(&b, "Rollout %s/%s: %s", g.Namespace, g.Name, g.Phase)
	if g.Reason != "" {
		fmt.Fprintf(&b, " (%s)", g.Reason)
	}
	fmt.Fprintf(&b, ", %d/%d Workspaces applied", g.Applied, g.Total)
	if g.Paused {
		b.WriteString(", paused")
	}
	b.WriteString("\n")
	if g.Message != "" {
		fmt.Fprintf(&b, "  %s\n", g.Message)
	}
	if rb := r.Spec.Rollback; rb != nil {
		for _, c := range rb.Commits {
			fmt.Fprintf(&b, "  rolling back to commit %s of %s (%s), requested by %s at %s\n",
				shortSHA(c.Commit), c.RepoURL, c.TargetRevision, rb.RequestedBy, rb.RequestedAt.UTC().Format(time.RFC3339))
		}
	}
	for _, rev := range g.Revisions {
		verb := "rolling out"
		if r.Spec.Rollback != nil {
			verb = "the ref's commit:"
		}
		fmt.Fprintf(&b, "  %s commit %s of %s (%s) since %s\n",
			verb, shortSHA(rev.Commit), rev.RepoURL, rev.TargetRevision, rev.Since.UTC().Format(time.RFC3339))
		if len(rev.Spellings) > 1 {
			fmt.Fprintf(&b, "    one source spelled %d ways by the Workspaces: %s\n", len(rev.Spellings), strings.Join(rev.Spellings, ", "))
		}
	}
	if g.NextWindowAt != nil {
		fmt.Fprintf(&b, "  next change window opens at %s\n", g.NextWindowAt.Format(time.RFC3339))
	}
	for _, s := range r.Status.Steps {
		if s.Phase == magosv1.StepAwaitingApproval {
			fmt.Fprintf(&b, "  step %s awaits approval of %d plan(s) (magosctl rollout approve %s --step %s):\n", s.Name, len(s.Plans), r.Name, s.Name)
			for _, p := range s.Plans {
				fmt.Fprintf(&b, "    %s  plan %s of commit %s: %d to add, %d to change, %d to destroy\n",
					p.Workspace, p.Digest, shortSHA(p.Revision), p.Add, p.Change, p.Destroy)
			}
		}
		if a := s.Approval; a != nil {
			fmt.Fprintf(&b, "  step %s: %d plan(s) approved by %s at %s\n", s.Name, len(a.Plans), a.ApprovedBy, a.ApprovedAt.UTC().Format(time.RFC3339))
		}
		if len(s.Drifted) > 0 {
			fmt.Fprintf(&b, "  step %s: %d Workspace(s) drifted from the commit they applied: %s", s.Name, len(s.Drifted), strings.Join(s.Drifted, ", "))
			if s.Phase == magosv1.StepDriftBlocked {
				fmt.Fprintf(&b, " (blocked: magosctl rollout accept-drift %s --step %s)", r.Name, s.Name)
			}
			b.WriteString("\n")
		}
	}
	if r.Spec.PlanFirst {
		renderPreview(&b, r)
	}
	if g.Halted != "" {
		fmt.Fprintf(&b, "  %s\n", g.Halted)
	}
	if g.Stale {
		b.WriteString("  (status is for an older generation of the Rollout; the hub has not caught up yet)\n")
	}

	var rows []row
	for _, s := range g.Steps {
		switch {
		case s.InvalidSelector:
			rows = append(rows, row{s.Name, "InvalidSelector", "-", "-", "-", "-", "-"})
		case len(s.Workspaces) == 0:
			rows = append(rows, row{s.Name, s.State, "-", "(no Workspace matches)", "-", "-", "-"})
		}
		for _, w := range s.Workspaces {
			phase := orDash(w.Phase)
			if w.Late {
				phase += " (late: joins with the next change)"
			}
			rows = append(rows, row{s.Name, s.State, w.Cluster, w.Namespace + "/" + w.Name, phase, orDash(shortSHA(w.Revision)), orDash(w.Drift)})
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATE\tCLUSTER\tWORKSPACE\tPHASE\tREVISION\tDRIFT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.step, r.state, r.cluster, r.workspace, r.phase, r.revision, r.drift)
	}
	_ = tw.Flush()
	return b.String()
}

// renderPreview prints, for a Rollout with spec.planFirst, each step's preview by cluster, and
// the plans that changed since they were previewed.
func renderPreview(b *bytes.Buffer, r *magosv1.Rollout) {
	if !slices.ContainsFunc(r.Status.Steps, func(s magosv1.StepStatus) bool { return len(s.Preview) > 0 }) {
		b.WriteString("  preview of the change (planFirst): not decided yet\n")
		return
	}
	b.WriteString("  preview of the change (planFirst), by step and cluster:\n")
	for _, s := range r.Status.Steps {
		for _, c := range rolloutgrid.Previews(s) {
			fmt.Fprintf(b, "    step %s, cluster %s: %d/%d planned: %d to add, %d to change, %d to destroy%s",
				s.Name, c.Cluster, c.Planned, c.Workspaces, c.Add, c.Change, c.Destroy, revertsDrift(c.DriftReverted))
			if len(c.PolicyViolations) > 0 {
				fmt.Fprintf(b, "; breaks a policy: %s", strings.Join(c.PolicyViolations, ", "))
			}
			if len(c.Failed) > 0 {
				fmt.Fprintf(b, "; failed: %s", strings.Join(c.Failed, ", "))
			}
			b.WriteString("\n")
		}
		if s.PreviewOmitted > 0 {
			fmt.Fprintf(b, "    step %s: %d more Workspace(s) not listed (the preview lists at most 4000 across the steps)\n", s.Name, s.PreviewOmitted)
		}
		for _, p := range s.Preview {
			if v := p.Previewed; v != nil {
				now := "planning again"
				if p.Digest != "" {
					now = fmt.Sprintf("now plan %s (+%d ~%d -%d%s)", p.Digest, p.Add, p.Change, p.Destroy, revertsDrift(p.DriftReverted))
				}
				fmt.Fprintf(b, "    step %s: the plan of %s changed since the preview: previewed plan %s (+%d ~%d -%d%s), %s\n",
					s.Name, p.Workspace, v.Digest, v.Add, v.Change, v.Destroy, revertsDrift(v.DriftReverted), now)
			}
		}
	}
}

// revertsDrift says how many of a plan's changes revert drift (", N revert drift"), or nothing
// when none does.
func revertsDrift(n int32) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", %d revert drift", n)
}

// shortSHA shortens a commit SHA to 12 characters.
func shortSHA(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
