package workspace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/credentials"
	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/variables"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/policy"
	"github.com/magosfleet/magos/pkg/runner"
)

// PolicyGVK is the kind of Kyverno ValidatingPolicies the agent reads; PolicyListGVK its list.
var (
	PolicyGVK     = schema.GroupVersionKind{Group: policy.Group, Version: "v1", Kind: policy.Kind}
	PolicyListGVK = schema.GroupVersionKind{Group: policy.Group, Version: "v1", Kind: policy.Kind + "List"}
)

// prepare builds the run of op for the Workspace's current run ID at revision, the commit the
// caller decided (a starting plan's granted commit, runStart; a started run's commit,
// startedRevision), resolved when empty (resolveRevision). A plan or a destroy is checked
// against the Workspace's policies (spec.Policies). prepare reads no grant. A *runFailure error
// is the user's to fix; any other error is transient.
func (r *Reconciler) prepare(ctx context.Context, ws *magosv1.Workspace, op runner.Operation, revision string) (*execution.Run, error) {
	return r.prepareRun(ctx, ws, op, revision, op == runner.OperationPlan || op == runner.OperationDestroy)
}

// prepareRun is prepare, with the Workspace's policies resolved into the run only when checked:
// a run that applies nothing (a drift check) needs none, and reads none.
func (r *Reconciler) prepareRun(ctx context.Context, ws *magosv1.Workspace, op runner.Operation, revision string, checked bool) (*execution.Run, error) {
	creds, err := credentials.Find(ctx, r.client, ws.Namespace, ws.Spec.Source.RepoURL)
	if err != nil {
		return nil, transient(ReasonAPIError, err)
	}
	if revision == "" {
		if revision, err = r.resolveRevision(ctx, ws, creds); err != nil {
			return nil, err
		}
	}
	project, err := r.project(ctx, ws)
	if err != nil {
		return nil, err
	}
	env, sensitive, err := variables.Build(ctx, r.reader, ws, project)
	if err != nil {
		if variables.IsConfigError(err) {
			return nil, planFailure("%s", err.Error())
		}
		return nil, transient(ReasonAPIError, err)
	}
	env = append(env, creds.EnvVars()...)

	spec := runner.Spec{
		Operation:  op,
		RunID:      ws.Status.CurrentRunID,
		Namespace:  ws.Namespace,
		Name:       ws.Name,
		RepoURL:    ws.Spec.Source.RepoURL,
		Revision:   revision,
		Path:       ws.Spec.Source.Path,
		TfvarsPath: ws.Spec.Terraform.TfvarsPath,
		Binary:     ws.Spec.Terraform.Binary,
		Version:    ws.Spec.Terraform.Version,
	}
	if spec.Path == "" {
		spec.Path = "."
	}
	if spec.Binary == "" {
		spec.Binary = magosv1.BinaryOpenTofu
	}
	overrides := ws.Spec.Apply
	if op == runner.OperationPlan {
		overrides = ws.Spec.Plan
	}
	if checked {
		// A destroy is checked against the same policies as a plan: the runner plans it and
		// destroys only if the destroy plan passes them.
		if spec.Policies, err = r.policies(ctx, ws, project); err != nil {
			return nil, err
		}
	}
	annotations := maps.Clone(ws.Spec.Annotations)
	var timeout time.Duration
	if overrides != nil {
		if annotations == nil && len(overrides.Annotations) > 0 {
			annotations = map[string]string{}
		}
		maps.Copy(annotations, overrides.Annotations)
		if overrides.TimeoutSeconds != nil {
			timeout = time.Duration(*overrides.TimeoutSeconds) * time.Second
		}
	}
	return &execution.Run{
		Workspace:          ws,
		Spec:               spec,
		Env:                env,
		Sensitive:          sensitive,
		Timeout:            timeout,
		PodAnnotations:     annotations,
		ServiceAccountName: ws.Spec.ServiceAccountName,
	}, nil
}

// resolveRevision returns the commit to run when the grant names none (a commit the grant
// names, the one the hub's Rollout is rolling out whatever the ref points at meanwhile, is
// decided by the caller: runStart, startedRevision): the detected revision when the ref watcher
// saw one, else the target revision resolved now.
func (r *Reconciler) resolveRevision(ctx context.Context, ws *magosv1.Workspace, creds *credentials.Credentials) (string, error) {
	if d := ws.Annotations[keys.DetectedRevision]; gitrepo.IsSHA(d) {
		return strings.ToLower(d), nil
	}
	ref := ws.Spec.Source.TargetRevision
	if gitrepo.IsSHA(ref) {
		return strings.ToLower(ref), nil
	}
	var auth gitrepo.Auth
	if creds != nil {
		auth = creds.Auth
	}
	rctx, cancel := context.WithTimeout(ctx, r.opts.GitTimeout)
	defer cancel()
	sha, err := r.opts.ResolveRevision(rctx, gitrepo.ResolveOptions{URL: ws.Spec.Source.RepoURL, Ref: ref, Auth: auth})
	if err != nil {
		if userGitError(err) {
			return "", planFailure("resolving %q: %s", ref, err.Error())
		}
		return "", transient(ReasonGitUnavailable, fmt.Errorf("resolving %q: %w", ref, err))
	}
	return sha, nil
}

// userGitError reports git errors only the user can fix: a repository or ref that does not
// exist, credentials that are refused or unreadable, a malformed URL. Anything else (timeouts,
// connection errors) is an outage, retried.
func userGitError(err error) bool {
	for _, target := range []error{
		transport.ErrRepositoryNotFound, transport.ErrEmptyRemoteRepository,
		transport.ErrAuthenticationRequired, transport.ErrAuthorizationFailed, transport.ErrInvalidAuthMethod,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	msg := err.Error()
	for _, s := range []string{
		"not found (tried branch", // gitrepo: the ref does not exist
		"repository not found",
		"does not appear to be a git repository",
		"parsing repository URL",
		"reading the SSH private key",
		"parsing known hosts",
		"no HEAD",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// project returns the Workspace's Project in its own namespace of this cluster, or nil.
func (r *Reconciler) project(ctx context.Context, ws *magosv1.Workspace) (*magosv1.Project, error) {
	p := &magosv1.Project{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: ws.Namespace, Name: ws.Spec.ProjectRef.Name}, p)
	switch {
	case err == nil:
		return p, nil
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		return nil, nil
	default:
		return nil, transient(ReasonAPIError, fmt.Errorf("reading Project %s/%s: %w", ws.Namespace, ws.Spec.ProjectRef.Name, err))
	}
}

// policies returns the policies the plan must satisfy, sorted by name: those the effective
// policySelector selects (the Workspace's, else its Project's: upstream's rule; an empty
// selector selects every policy) and the agent's mandatory ones, which no selector narrows. It
// fails the run closed, before any plan, when a non-empty selector selects nothing
// (NoPolicyMatched), when a mandatory policy does not exist (MandatoryPolicyMissing), when the
// selector is invalid or policies cannot be read at all (no CRD), or when more than
// MaxEvaluatedPolicies would run. A policy that cannot be compiled travels with its error, so
// the runner fails the plan.
func (r *Reconciler) policies(ctx context.Context, ws *magosv1.Workspace, project *magosv1.Project) ([]runner.Policy, error) {
	byName := map[string]*unstructured.Unstructured{}
	sel, owner := effectiveSelector(ws, project)
	if sel != nil {
		selector, err := sel.AsSelector()
		if err != nil {
			return nil, &runFailure{phase: magosv1.PhaseValidationFailed, reason: magosv1.ReasonPolicyViolation,
				message:    "Plan not run: the policySelector is invalid",
				violations: []magosv1.PolicyViolation{{Policy: "policySelector", Message: fmt.Sprintf("invalid policySelector of %s: %v", owner, err)}}}
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(PolicyListGVK)
		if err := r.reader.List(ctx, list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				return nil, noPolicyCRD("a policySelector is set")
			}
			return nil, transient(ReasonAPIError, fmt.Errorf("listing ValidatingPolicies: %w", err))
		}
		if len(list.Items) == 0 && !selector.Empty() {
			return nil, &runFailure{phase: magosv1.PhaseValidationFailed, reason: magosv1.ReasonNoPolicyMatched, message: fmt.Sprintf(
				"Plan not run: spec.validation.policySelector of %s (%q) matches no ValidatingPolicy; fix the selector or create the policy (a selector that selects nothing never runs a plan unchecked)",
				owner, selector.String())}
		}
		for i := range list.Items {
			byName[list.Items[i].GetName()] = &list.Items[i]
		}
	}
	var missing []string
	for _, name := range r.opts.MandatoryPolicies {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(PolicyGVK)
		err := r.reader.Get(ctx, client.ObjectKey{Name: name}, obj)
		switch {
		case err == nil:
			byName[name] = obj
		case apimeta.IsNoMatchError(err):
			return nil, noPolicyCRD("the agent has mandatory policies")
		case apierrors.IsNotFound(err):
			missing = append(missing, name)
		default:
			return nil, transient(ReasonAPIError, fmt.Errorf("reading mandatory ValidatingPolicy %s: %w", name, err))
		}
	}
	if len(missing) > 0 {
		return nil, &runFailure{phase: magosv1.PhaseValidationFailed, reason: magosv1.ReasonMandatoryPolicyMissing, message: fmt.Sprintf(
			"Plan not run: the mandatory ValidatingPolicy %s of this cluster's agent (mandatoryPolicies) does not exist; every plan of the cluster fails until it does (fail closed)",
			strings.Join(missing, ", "))}
	}
	if len(byName) > magosv1.MaxEvaluatedPolicies {
		return nil, &runFailure{phase: magosv1.PhaseValidationFailed, reason: magosv1.ReasonPolicyViolation,
			message: fmt.Sprintf("Plan not run: %d policies selected, more than the %d a plan is checked against; narrow the policySelector of %s",
				len(byName), magosv1.MaxEvaluatedPolicies, owner)}
	}
	out := make([]runner.Policy, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		p, err := policy.FromValidatingPolicy(byName[name])
		if err != nil {
			p = runner.Policy{Name: name, Error: err.Error()}
		}
		out = append(out, p)
	}
	return out, nil
}

// effectiveSelector is the policySelector that applies to ws, and whose it is ("Workspace
// ns/name" or "Project ns/name"): the Workspace's when set, else its Project's (upstream's rule).
func effectiveSelector(ws *magosv1.Workspace, project *magosv1.Project) (*magosv1.LabelSelector, string) {
	switch {
	case ws.Spec.Validation != nil && ws.Spec.Validation.PolicySelector != nil:
		return ws.Spec.Validation.PolicySelector, "Workspace " + ws.Namespace + "/" + ws.Name
	case project != nil && project.Spec.Validation != nil && project.Spec.Validation.PolicySelector != nil:
		return project.Spec.Validation.PolicySelector, "Project " + project.Namespace + "/" + project.Name
	}
	return nil, ""
}

// noPolicyCRD fails a run whose policies cannot be read because the ValidatingPolicy CRD is not
// installed; why says what asks for policies.
func noPolicyCRD(why string) error {
	return &runFailure{phase: magosv1.PhaseValidationFailed, reason: magosv1.ReasonPolicyViolation,
		message: "Plan not run: policies are selected but cannot be read",
		violations: []magosv1.PolicyViolation{{Policy: "validatingpolicies.policies.kyverno.io",
			Message: why + " but the ValidatingPolicy CRD (policies.kyverno.io/v1) is not installed in this cluster; no plan runs unchecked (fail closed)"}}}
}

// evaluatedPolicies is status.policies of a plan checked against policies: each with its
// source, Mandatory when the agent's mandatory set names it.
func (r *Reconciler) evaluatedPolicies(policies []runner.Policy) []magosv1.EvaluatedPolicy {
	if len(policies) == 0 {
		return nil
	}
	out := make([]magosv1.EvaluatedPolicy, 0, len(policies))
	for _, p := range policies {
		source := magosv1.PolicySourceSelector
		if slices.Contains(r.opts.MandatoryPolicies, p.Name) {
			source = magosv1.PolicySourceMandatory
		}
		out = append(out, magosv1.EvaluatedPolicy{Name: p.Name, Source: source})
	}
	return out
}
