package cli

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// runsOf is a Workspace whose run history magosctl reads: a spoke Workspace, whose output
// Secrets are in its own namespace, or a hub mirror, beside which the agent keeps copies of them.
type runsOf struct {
	ws *magosv1.Workspace
	// what names the Workspace in messages.
	what string
	// cluster is the mirror's cluster; empty for a spoke Workspace.
	cluster string
}

// findRuns finds Workspace name of namespace ns: with cluster, the hub's mirror of it; without,
// the Workspace of that name in the current context's cluster if it is not a mirror, else the
// hub's only mirror of it (a name that several clusters hold needs --cluster).
func (o *Options) findRuns(ctx context.Context, c client.Client, ns, name, cluster string) (*runsOf, error) {
	if cluster != "" {
		m := &magosv1.Workspace{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name(ns, name)}, m); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("workspace %s/%s of cluster %s: the hub has no mirror of it (is %s an agent cluster, and does the Workspace exist there?)", ns, name, cluster, cluster)
			}
			return nil, fmt.Errorf("workspace %s/%s of cluster %s: %w", ns, name, cluster, err)
		}
		return &runsOf{ws: m, what: fmt.Sprintf("workspace %s/%s of cluster %s", ns, name, cluster), cluster: cluster}, nil
	}
	ws := &magosv1.Workspace{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ws)
	switch {
	case err == nil && !mirror.IsMirror(ws):
		return &runsOf{ws: ws, what: fmt.Sprintf("workspace %s/%s", ns, name)}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("workspace %s/%s: %w", ns, name, err)
	}
	mirrors := &magosv1.WorkspaceList{}
	sel, err := mirror.MirrorsOf(ns, name)
	if err != nil {
		return nil, fmt.Errorf("workspace %s/%s: looking for it on the hub: %w", ns, name, err)
	}
	if err := c.List(ctx, mirrors, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("workspace %s/%s: looking for it on the hub: %w", ns, name, err)
	}
	var clusters []string
	for i := range mirrors.Items {
		if cl, ok := mirror.ClusterOf(mirrors.Items[i].Namespace); ok {
			clusters = append(clusters, cl)
		}
	}
	sort.Strings(clusters)
	switch len(clusters) {
	case 0:
		return nil, fmt.Errorf("workspace %s/%s not found here, nor mirrored on a hub here", ns, name)
	case 1:
		return o.findRuns(ctx, c, ns, name, clusters[0])
	}
	return nil, fmt.Errorf("workspace %s/%s lives in clusters %s: name one with --cluster", ns, name, strings.Join(clusters, ", "))
}

// runsOfArg finds the Workspace that runs, plan and logs name, and returns the client too.
func (o *Options) runsOfArg(cmd *cobra.Command, name, cluster string) (client.Client, *runsOf, error) {
	c, ns, err := o.clientInNamespace()
	if err != nil {
		return nil, nil, err
	}
	r, err := o.findRuns(contextFor(cmd), c, ns, name, cluster)
	return c, r, err
}

func newRunsCommand(o *Options) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "runs WORKSPACE [--cluster CLUSTER]",
		Short: "List a Workspace's recent runs",
		Long: "List a Workspace's recent runs, newest first (status.runs: at most spec.runHistory.limit,\n" +
			"default 10). Against a spoke it reads the Workspace; from the hub its mirror (--cluster\n" +
			"names the cluster when several hold a Workspace of that name). magosctl plan and\n" +
			"magosctl logs show a run's plan text and log.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, r, err := o.runsOfArg(cmd, args[0], cluster)
			if err != nil {
				return err
			}
			runs := r.ws.Status.Runs
			if runs == nil {
				runs = []magosv1.RunRecord{}
			}
			ids := make([]string, len(runs))
			for i, rec := range runs {
				ids[i] = rec.RunID
			}
			if done, err := o.print(runs, ids...); done {
				return err
			}
			if len(runs) == 0 {
				_, err := fmt.Fprintf(o.ErrOut, "%s has no recorded run\n", r.what)
				return err
			}
			return o.printRuns(runs)
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the registered cluster the Workspace lives in (from the hub)")
	return cmd
}

func (o *Options) printRuns(runs []magosv1.RunRecord) error {
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	header := "RUN\tPHASE\tREASON\tREVISION\tTRIGGER\tCHANGES\tPOLICY\tSTARTED\tDURATION"
	if o.wide() {
		header += "\tGENERATION\tPLAN DIGEST\tOPERATIONS"
	}
	fmt.Fprintln(w, header)
	for _, rec := range runs {
		changes := "-"
		if rc := rec.ResourceChanges; rc != nil {
			changes = fmt.Sprintf("+%d ~%d -%d", rc.Add, rc.Change, rc.Destroy)
		}
		started, took := "-", "-"
		if rec.StartedAt != nil {
			started = duration.HumanDuration(o.Now().Sub(rec.StartedAt.Time)) + " ago"
			if rec.FinishedAt != nil {
				took = duration.HumanDuration(rec.FinishedAt.Sub(rec.StartedAt.Time))
			}
		}
		policy := orDash(rec.Policy)
		if rec.PolicyViolations > 0 {
			policy = fmt.Sprintf("%s (%d)", rec.Policy, rec.PolicyViolations)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", rec.RunID, orDash(string(rec.Phase)), orDash(rec.Reason),
			orDash(shortSHA(rec.Revision)), orDash(rec.Trigger), changes, policy, started, took)
		if o.wide() {
			ops := make([]string, len(rec.Operations))
			for i, op := range rec.Operations {
				ops[i] = op.Operation + ":" + op.Outcome
			}
			fmt.Fprintf(w, "\t%d\t%s\t%s", rec.Generation, orDash(shortSHA(rec.PlanDigest)), orDash(strings.Join(ops, ",")))
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// runOutput is what magosctl plan and magosctl logs print with -o json or yaml.
type runOutput struct {
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	Workspace string `json:"workspace"`
	RunID     string `json:"runID"`
	Operation string `json:"operation"`
	Outcome   string `json:"outcome"`
	// Text is the plan text (magosctl plan) or the log (magosctl logs).
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
}

func newPlanCommand(o *Options) *cobra.Command {
	var cluster, run string
	cmd := &cobra.Command{
		Use:   "plan WORKSPACE [--run ID] [--cluster CLUSTER]",
		Short: "Show the plan text of a Workspace's run",
		Long: "Show the plan text of a Workspace's run: the output of its plan, with the values tofu\n" +
			"marks sensitive masked. Without --run, the newest recorded run that planned. From the hub\n" +
			"it reads the copy the agent keeps there (unless the Workspace sets\n" +
			"spec.runHistory.copyToHub: false); against a spoke, the Workspace's own.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.showOutput(cmd, args[0], cluster, run, string(runner.OperationPlan), true)
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the registered cluster the Workspace lives in (from the hub)")
	cmd.Flags().StringVar(&run, "run", "", "the run ID (default: the newest run that planned)")
	return cmd
}

func newLogsCommand(o *Options) *cobra.Command {
	var cluster, run, operation string
	cmd := &cobra.Command{
		Use:   "logs WORKSPACE [--run ID] [--operation plan|apply|verify] [--cluster CLUSTER]",
		Short: "Show the log of a Workspace's run",
		Long: "Show the log of a Workspace's run: the end of what its plan or apply printed (at most\n" +
			"128 KiB, marked when cut), or of its verification's check Job. Without --run, the newest recorded run that ran; without\n" +
			"--operation, the run's last operation. From the hub it reads the agent's copy, as\n" +
			"magosctl plan does.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch operation {
			case "", string(runner.OperationPlan), string(runner.OperationApply), string(runner.OperationVerify):
			default:
				return fmt.Errorf("--operation %q: want plan, apply or verify", operation)
			}
			return o.showOutput(cmd, args[0], cluster, run, operation, false)
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the registered cluster the Workspace lives in (from the hub)")
	cmd.Flags().StringVar(&run, "run", "", "the run ID (default: the newest run that ran)")
	cmd.Flags().StringVar(&operation, "operation", "", "plan, apply or verify (default: the run's last operation)")
	return cmd
}

// showOutput prints the plan text (plan) or the log of one operation of a recorded run.
func (o *Options) showOutput(cmd *cobra.Command, name, cluster, runID, operation string, plan bool) error {
	c, r, err := o.runsOfArg(cmd, name, cluster)
	if err != nil {
		return err
	}
	rec, op, err := pickOperation(r, runID, operation)
	if err != nil {
		return err
	}
	// A spoke Workspace names its output Secret; a mirror stands for the agent's copy of it.
	secretName := op.OutputSecret
	if r.cluster != "" {
		if !r.ws.Spec.CopiesRunOutputToHub() {
			return fmt.Errorf("the output of run %s of %s is kept in cluster %s only (spec.runHistory.copyToHub: false): run this against that cluster (its kubeconfig, or --context)",
				rec.RunID, r.what, r.cluster)
		}
		secretName = runoutput.SecretName(r.ws.Name, rec.RunID, runner.Operation(op.Operation))
	}
	secret := &corev1.Secret{}
	if err := c.Get(contextFor(cmd), client.ObjectKey{Namespace: r.ws.Namespace, Name: secretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			if r.cluster != "" {
				return fmt.Errorf("the %s of run %s of %s: the hub has no copy of its output (Secret %s/%s): the run left the history meanwhile, or the agent could not copy it; its cluster %s may still have it",
					op.Operation, rec.RunID, r.what, r.ws.Namespace, secretName, r.cluster)
			}
			return fmt.Errorf("the %s of run %s of %s: its output Secret %s is gone (deleted, or the run left the history meanwhile)", op.Operation, rec.RunID, r.what, secretName)
		}
		return fmt.Errorf("the %s of run %s of %s: %w", op.Operation, rec.RunID, r.what, err)
	}
	got, err := runoutput.Read(secret)
	if err != nil {
		return err
	}
	if got.Unavailable != "" {
		return fmt.Errorf("the %s of run %s of %s left no output: %s", op.Operation, rec.RunID, r.what, got.Unavailable)
	}
	text, truncated := got.Log, got.LogTruncated
	if plan {
		text, truncated = got.PlanText, got.PlanTruncated
	}
	ns, wsName := r.ws.Namespace, r.ws.Name
	if origin := r.ws.Status.Origin; origin != nil {
		ns, wsName = origin.Namespace, origin.Name
	}
	if done, err := o.print(runOutput{Cluster: r.cluster, Namespace: ns, Workspace: wsName, RunID: rec.RunID,
		Operation: op.Operation, Outcome: op.Outcome, Text: text, Truncated: truncated}); done {
		return err
	}
	if plan && text == "" {
		return fmt.Errorf("the plan of run %s of %s printed no plan text (it %s before planning)", rec.RunID, r.what, strings.ToLower(op.Outcome))
	}
	if _, err := fmt.Fprint(o.Out, text); err != nil {
		return err
	}
	if truncated {
		_, err = fmt.Fprintf(o.ErrOut, "(the %s of run %s was cut at its size limit: see the mark above)\n", op.Operation, rec.RunID)
	}
	return err
}

// pickOperation chooses the recorded run (runID, else the newest with an operation that kept
// output, of kind operation when given) and its operation (operation, else the run's last).
func pickOperation(r *runsOf, runID, operation string) (magosv1.RunRecord, magosv1.RunOperation, error) {
	usable := func(op magosv1.RunOperation) bool {
		return op.OutputSecret != "" && (operation == "" || op.Operation == operation)
	}
	for _, rec := range r.ws.Status.Runs {
		if runID != "" && !strings.EqualFold(rec.RunID, runID) {
			continue
		}
		ops := slices.Clone(rec.Operations)
		slices.Reverse(ops) // last operation first
		for _, op := range ops {
			if usable(op) {
				return rec, op, nil
			}
		}
		if runID != "" {
			what := "no operation that kept output"
			if operation != "" {
				what = "no " + operation + " that kept output"
			}
			return magosv1.RunRecord{}, magosv1.RunOperation{}, fmt.Errorf("run %s of %s has %s", rec.RunID, r.what, what)
		}
	}
	if runID != "" {
		ids := make([]string, 0, len(r.ws.Status.Runs))
		for _, rec := range r.ws.Status.Runs {
			ids = append(ids, rec.RunID)
		}
		return magosv1.RunRecord{}, magosv1.RunOperation{}, fmt.Errorf("%s has no recorded run %s (its runs: %s)", r.what, runID, orDash(strings.Join(ids, ", ")))
	}
	what := "run"
	if operation != "" {
		what = operation
	}
	return magosv1.RunRecord{}, magosv1.RunOperation{}, fmt.Errorf("%s has no recorded %s with output yet", r.what, what)
}
