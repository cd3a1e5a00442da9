package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/hub/rolloutgrid"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// Error is the body of every answer that is not a success: {"error": "..."}.
type Error struct {
	Error string `json:"error"`
}

// statusError is an error with the HTTP status it answers with.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

// answer computes what a request returns, for u.
type answer func(ctx context.Context, u user.Info, r *http.Request) (any, error)

// authenticated runs h for the request's caller, or answers 401.
func (s *Server) authenticated(h func(http.ResponseWriter, *http.Request, user.Info)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := s.access.authenticate(r)
		if u == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="magos-hub"`)
			writeJSON(w, http.StatusUnauthorized, Error{"a Kubernetes token of the hub's API server is required (Authorization: Bearer, or POST /login)"})
			return
		}
		h(w, r, u)
	}
}

// json answers with what a computes, as JSON.
func (s *Server) json(a answer) func(http.ResponseWriter, *http.Request, user.Info) {
	return func(w http.ResponseWriter, r *http.Request, u user.Info) {
		v, err := a(r.Context(), u, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var se *statusError
	if errors.As(err, &se) {
		writeJSON(w, se.status, Error{se.msg})
		return
	}
	s.opts.Logger.Error(err, "dashboard request failed", "path", r.URL.Path)
	writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// require answers 403 unless u may verb the resource.
func (s *Server) require(ctx context.Context, u user.Info, verb, resource, namespace, name string) error {
	ok, err := s.access.can(ctx, u, verb, resource, namespace, name)
	if err != nil {
		return err
	}
	if !ok {
		what := resource
		if name != "" {
			what += " " + name
		}
		where := ""
		if namespace != "" {
			where = " in namespace " + namespace
		}
		return errorf(http.StatusForbidden, "%s may not %s %s.%s%s", u.GetName(), verb, what, magosv1.GroupVersion.Group, where)
	}
	return nil
}

// listableIn returns whether u may list the resource in a namespace, asking the API server
// once per namespace for one answer.
func (s *Server) listableIn(u user.Info, resource string) func(ctx context.Context, namespace string) (bool, error) {
	seen := map[string]bool{}
	return func(ctx context.Context, namespace string) (bool, error) {
		if ok, done := seen[namespace]; done {
			return ok, nil
		}
		ok, err := s.access.can(ctx, u, "list", resource, namespace, "")
		if err != nil {
			return false, err
		}
		seen[namespace] = ok
		return ok, nil
	}
}

// Whoami is the caller as the hub's API server knows them.
type Whoami struct {
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, u user.Info) {
	writeJSON(w, http.StatusOK, Whoami{User: u.GetName(), Groups: u.GetGroups()})
}

// RolloutList is the answer of GET /api/v1/rollouts.
type RolloutList struct {
	Items []RolloutSummary `json:"items"`
}

// RolloutSummary is one Rollout in the list.
type RolloutSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	// Tone is how the dashboard colours the phase (rolloutgrid.Tone).
	Tone        string `json:"tone"`
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	CurrentStep string `json:"currentStep,omitempty"`
	Steps       int    `json:"steps"`
	Applied     int32  `json:"applied"`
	Total       int32  `json:"total"`
	Paused      bool   `json:"paused,omitempty"`
}

// rollouts lists the Rollouts of every namespace where u may list Rollouts.
func (s *Server) rollouts(ctx context.Context, u user.Info, _ *http.Request) (any, error) {
	var list magosv1.RolloutList
	if err := s.opts.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing rollouts: %w", err)
	}
	allowed := s.listableIn(u, "rollouts")
	out := RolloutList{Items: []RolloutSummary{}}
	for i := range list.Items {
		r := &list.Items[i]
		if ok, err := allowed(ctx, r.Namespace); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		phase := string(r.Status.Phase)
		if phase == "" {
			phase = "Unknown"
		}
		out.Items = append(out.Items, RolloutSummary{
			Namespace: r.Namespace, Name: r.Name, Phase: phase, Tone: rolloutgrid.Tone(r.Status.Phase, r.Status.Reason),
			Reason: r.Status.Reason, Message: r.Status.Message,
			CurrentStep: r.Status.CurrentStepName, Steps: len(r.Spec.Strategy.Steps),
			Applied: r.Status.AppliedWorkspaces, Total: r.Status.TotalWorkspaces, Paused: r.Spec.Paused,
		})
	}
	sort.Slice(out.Items, func(i, j int) bool {
		a, b := out.Items[i], out.Items[j]
		return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
	})
	return out, nil
}

// grid is one Rollout's grid (rolloutgrid.Grid), for a caller who may get the Rollout and
// list the Workspaces of its namespace.
func (s *Server) grid(ctx context.Context, u user.Info, r *http.Request) (any, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if err := s.require(ctx, u, "get", "rollouts", ns, name); err != nil {
		return nil, err
	}
	if err := s.require(ctx, u, "list", "workspaces", ns, ""); err != nil {
		return nil, err
	}
	var ro magosv1.Rollout
	if err := s.opts.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ro); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errorf(http.StatusNotFound, "rollout %s/%s not found", ns, name)
		}
		return nil, fmt.Errorf("reading rollout %s/%s: %w", ns, name, err)
	}
	var clusters magosv1.ClusterList
	if err := s.opts.Cache.List(ctx, &clusters, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	var mirrors magosv1.WorkspaceList
	if err := s.opts.Cache.List(ctx, &mirrors, client.UnsafeDisableDeepCopy,
		client.MatchingFields{fleetview.ProjectIndex: fleetview.ProjectIndexValue(ns, ro.Spec.ProjectRef)}); err != nil {
		return nil, fmt.Errorf("listing the mirrors of project %s/%s: %w", ns, ro.Spec.ProjectRef, err)
	}
	return rolloutgrid.Build(&ro, clusters.Items, mirrors.Items, s.opts.Now()), nil
}

// ClusterList is the answer of GET /api/v1/clusters.
type ClusterList struct {
	Items []ClusterSummary `json:"items"`
}

// ClusterSummary is one registered cluster.
type ClusterSummary struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Transport is agent (its Workspaces mirrored to the hub) or direct.
	Transport string `json:"transport"`
	// Namespaces are the hub namespaces the cluster is bound to.
	Namespaces []string `json:"namespaces,omitempty"`
	// Workspaces is the number of Workspaces the hub sees in the cluster.
	Workspaces        int32              `json:"workspaces"`
	LastHeartbeatTime *metav1.Time       `json:"lastHeartbeatTime,omitempty"`
	Conditions        []metav1.Condition `json:"conditions,omitempty"`
}

func (s *Server) clusters(ctx context.Context, u user.Info, _ *http.Request) (any, error) {
	if err := s.require(ctx, u, "list", "clusters", "", ""); err != nil {
		return nil, err
	}
	var list magosv1.ClusterList
	if err := s.opts.Cache.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	out := ClusterList{Items: []ClusterSummary{}}
	for _, c := range list.Items {
		out.Items = append(out.Items, ClusterSummary{
			Name: c.Name, Labels: c.Labels, Transport: c.Spec.Transport, Namespaces: c.Spec.Namespaces,
			Workspaces: c.Status.Workspaces, LastHeartbeatTime: c.Status.LastHeartbeatTime, Conditions: c.Status.Conditions,
		})
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Name < out.Items[j].Name })
	return out, nil
}

// WorkspaceList is the answer of GET /api/v1/clusters/{cluster}/workspaces.
type WorkspaceList struct {
	Cluster string             `json:"cluster"`
	Items   []WorkspaceSummary `json:"items"`
}

// WorkspaceSummary is one Workspace of a cluster, as its hub mirror shows it.
type WorkspaceSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Project   string `json:"project,omitempty"`
	// Bound is false when the cluster is not bound to the Workspace's namespace: no Project or
	// Rollout of the hub takes it in.
	Bound bool   `json:"bound"`
	Phase string `json:"phase,omitempty"`
	// Tone is how the dashboard colours the phase (rolloutgrid.Tone).
	Tone     string `json:"tone"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	Revision string `json:"revision,omitempty"`
	RunID    string `json:"runID,omitempty"`
}

// clusterWorkspaces lists an agent cluster's Workspaces (its mirrors on the hub) in the
// namespaces where u may list Workspaces.
func (s *Server) clusterWorkspaces(ctx context.Context, u user.Info, r *http.Request) (any, error) {
	name := r.PathValue("cluster")
	if err := s.require(ctx, u, "get", "clusters", "", name); err != nil {
		return nil, err
	}
	var c magosv1.Cluster
	if err := s.opts.Cache.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errorf(http.StatusNotFound, "cluster %s is not registered", name)
		}
		return nil, fmt.Errorf("reading cluster %s: %w", name, err)
	}
	if c.Spec.Transport != magosv1.TransportAgent {
		return nil, errorf(http.StatusNotFound, "cluster %s is a direct cluster: the hub keeps no mirrors of its Workspaces", name)
	}
	var list magosv1.WorkspaceList
	if err := s.opts.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy, client.InNamespace(mirror.Namespace(name))); err != nil {
		return nil, fmt.Errorf("listing the mirrors of cluster %s: %w", name, err)
	}
	allowed := s.listableIn(u, "workspaces")
	out := WorkspaceList{Cluster: name, Items: []WorkspaceSummary{}}
	for i := range list.Items {
		m := &list.Items[i]
		if mirror.Check(name, m) != nil {
			continue
		}
		o := mirror.OriginOf(name, m)
		if ok, err := allowed(ctx, o.Namespace); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		out.Items = append(out.Items, WorkspaceSummary{
			Namespace: o.Namespace, Name: o.Name, Project: m.Spec.ProjectRef.Name, Bound: c.Binds(o.Namespace),
			Phase: string(m.Status.Phase), Tone: rolloutgrid.Tone(m.Status.Phase, m.Status.Reason),
			Reason: m.Status.Reason, Message: m.Status.Message, Revision: m.Status.ObservedRevision, RunID: m.Status.CurrentRunID,
		})
	}
	sort.Slice(out.Items, func(i, j int) bool {
		return strings.Compare(out.Items[i].Namespace+"/"+out.Items[i].Name, out.Items[j].Namespace+"/"+out.Items[j].Name) < 0
	})
	return out, nil
}

// Runs is the answer of GET .../workspaces/{name}/runs: the Workspace's run records, newest
// first, as its agent mirrored them.
type Runs struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Runs      []Run  `json:"runs"`
}

// Run is a run record with how the dashboard colours its phase (rolloutgrid.Tone).
type Run struct {
	magosv1.RunRecord `json:",inline"`
	Tone              string `json:"tone"`
}

// runs reads a Workspace's run records from its mirror.
func (s *Server) runs(ctx context.Context, u user.Info, r *http.Request) (any, error) {
	m, err := s.mirrorOf(ctx, u, r)
	if err != nil {
		return nil, err
	}
	runs := make([]Run, 0, len(m.Status.Runs))
	for _, rec := range m.Status.Runs {
		runs = append(runs, Run{RunRecord: rec, Tone: rolloutgrid.Tone(rec.Phase, rec.Reason)})
	}
	return Runs{Cluster: r.PathValue("cluster"), Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Runs: runs}, nil
}

// mirrorOf reads the mirror of the Workspace the request's path names, for a caller who may get
// that Workspace. The hub's cache keeps no run records (fleet.WorkspaceTransform), so the mirror
// is read from the API server.
func (s *Server) mirrorOf(ctx context.Context, u user.Info, r *http.Request) (*magosv1.Workspace, error) {
	cluster, ns, name := r.PathValue("cluster"), r.PathValue("namespace"), r.PathValue("name")
	if err := s.require(ctx, u, "get", "workspaces", ns, name); err != nil {
		return nil, err
	}
	var m magosv1.Workspace
	key := client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name(ns, name)}
	err := s.opts.APIReader.Get(ctx, key, &m)
	if apierrors.IsNotFound(err) || (err == nil && mirror.Check(cluster, &m) != nil) {
		return nil, errorf(http.StatusNotFound, "workspace %s/%s of cluster %s: the hub has no mirror of it", ns, name, cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the mirror of workspace %s/%s of cluster %s: %w", ns, name, cluster, err)
	}
	if o := mirror.OriginOf(cluster, &m); o.Namespace != ns || o.Name != name {
		return nil, errorf(http.StatusNotFound, "workspace %s/%s of cluster %s: the hub has no mirror of it", ns, name, cluster)
	}
	return &m, nil
}

// RunOutput is the answer of GET .../workspaces/{name}/runs/{run}/{operation}: what one
// operation (plan or apply) of a run printed, from the copy its agent keeps on the hub.
type RunOutput struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	RunID     string `json:"runID"`
	Operation string `json:"operation"`
	Outcome   string `json:"outcome"`
	// PlanText is the plan's text, sensitive values masked (plans only).
	PlanText      string `json:"planText,omitempty"`
	PlanTruncated bool   `json:"planTruncated,omitempty"`
	// Log is the end of what the operation printed.
	Log          string `json:"log"`
	LogTruncated bool   `json:"logTruncated,omitempty"`
	// OutputBytes is the size of all the operation printed.
	OutputBytes int64 `json:"outputBytes"`
}

// runOutput answers with the plan text and log of one operation of a recorded run. The Secret
// holding them is read with the caller's own token: the API server's RBAC on Secrets of the
// cluster's hub namespace decides, on top of get on the Workspace.
func (s *Server) runOutput(ctx context.Context, u user.Info, r *http.Request) (any, error) {
	m, err := s.mirrorOf(ctx, u, r)
	if err != nil {
		return nil, err
	}
	cluster, runID, operation := r.PathValue("cluster"), r.PathValue("run"), r.PathValue("operation")
	what := fmt.Sprintf("the %s of run %s of workspace %s/%s of cluster %s", operation, runID, r.PathValue("namespace"), r.PathValue("name"), cluster)
	var op *magosv1.RunOperation
	if j := slices.IndexFunc(m.Status.Runs, func(rec magosv1.RunRecord) bool { return rec.RunID == runID }); j >= 0 {
		ops := m.Status.Runs[j].Operations
		if i := slices.IndexFunc(ops, func(o magosv1.RunOperation) bool { return o.Operation == operation }); i >= 0 {
			op = &ops[i]
		}
	}
	switch {
	case op == nil:
		return nil, errorf(http.StatusNotFound, "%s: no such recorded operation", what)
	case op.OutputSecret == "":
		return nil, errorf(http.StatusNotFound, "%s: it kept no output", what)
	case !m.Spec.CopiesRunOutputToHub():
		return nil, errorf(http.StatusNotFound, "%s: its output is kept in cluster %s only (spec.runHistory.copyToHub: false)", what, cluster)
	}
	core, err := callerClient(s.opts.RestConfig, r)
	if err != nil {
		return nil, err
	}
	name := runoutput.SecretName(m.Name, runID, runner.Operation(operation))
	secret, err := core.Secrets(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil, errorf(http.StatusForbidden, "%s: %s may not get secrets in namespace %s, where its output is kept", what, u.GetName(), m.Namespace)
	case apierrors.IsNotFound(err):
		return nil, errorf(http.StatusNotFound, "%s: the hub has no copy of its output (Secret %s/%s)", what, m.Namespace, name)
	case err != nil:
		return nil, fmt.Errorf("%s: reading Secret %s/%s: %w", what, m.Namespace, name, err)
	}
	got, err := runoutput.Read(secret)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if got.Unavailable != "" {
		return nil, errorf(http.StatusNotFound, "%s left no output: %s", what, got.Unavailable)
	}
	return RunOutput{Cluster: cluster, Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), RunID: runID,
		Operation: operation, Outcome: op.Outcome, PlanText: got.PlanText, PlanTruncated: got.PlanTruncated,
		Log: got.Log, LogTruncated: got.LogTruncated, OutputBytes: got.OutputBytes}, nil
}
