package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/steer"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/scheme"
)

// The dashboard's actions are requests a person makes of the hub (package steer), written with
// the person's own token: the hub's API server's RBAC and the magos-hub chart's admission policy
// decide, exactly as for magosctl, and the dashboard never acts with rights of its own. The page
// offers only the actions GET .../permissions says the person may take, which it asks the API
// server with the person's token (SelfSubjectAccessReview).

// ActionRequest is the body of POST .../rollouts/{name}/approve and .../reject.
type ActionRequest struct {
	// Step is the step whose plans to approve or reject.
	Step string `json:"step"`
	// Reason says why (reject only, required there).
	Reason string `json:"reason,omitempty"`
}

// ActionResult is the answer of an action that succeeded.
type ActionResult struct {
	// Message says what was done, in the words of magosctl.
	Message string `json:"message"`
	// By is the user it was done as.
	By string `json:"by"`
	// Plans are the plans an approval or rejection names.
	Plans []magosv1.ApprovedPlan `json:"plans,omitempty"`
	// Run is the run a retry was asked of.
	Run string `json:"run,omitempty"`
}

// Permissions is the answer of GET .../rollouts/{name}/permissions: what the caller may do to
// the Rollout and to the Workspaces of each of its clusters, as the hub's API server says
// (SelfSubjectAccessReview with the caller's token).
type Permissions struct {
	// Approve: approve and reject the plans of its steps (update and approve on the Rollout).
	Approve bool `json:"approve"`
	// Pause: pause and resume it (patch on the Rollout).
	Pause bool `json:"pause"`
	// Retry says, for each cluster the request names (?cluster=C), whether the caller may ask its
	// Workspaces for a retry (patch and retry on workspaces in the cluster's hub namespace).
	Retry map[string]bool `json:"retry"`
}

// actionRoutes adds the action endpoints to mux.
func (s *Server) actionRoutes(mux *http.ServeMux) {
	rollout := "/api/v1/namespaces/{namespace}/rollouts/{name}/"
	mux.HandleFunc("GET "+rollout+"permissions", s.authenticated(s.json(s.permissions)))
	mux.HandleFunc("POST "+rollout+"approve", s.authenticated(s.action(s.approve)))
	mux.HandleFunc("POST "+rollout+"reject", s.authenticated(s.action(s.reject)))
	mux.HandleFunc("POST "+rollout+"pause", s.authenticated(s.action(s.pause(true))))
	mux.HandleFunc("POST "+rollout+"resume", s.authenticated(s.action(s.pause(false))))
	mux.HandleFunc("POST /api/v1/clusters/{cluster}/namespaces/{namespace}/workspaces/{name}/retry", s.authenticated(s.action(s.retry)))
}

// action answers an action: only a JSON request from the dashboard's own origin (a form or a
// page of another site cannot make one), acted with the caller's own token.
func (s *Server) action(a func(ctx context.Context, c client.Client, u user.Info, r *http.Request) (ActionResult, error)) func(http.ResponseWriter, *http.Request, user.Info) {
	return func(w http.ResponseWriter, r *http.Request, u user.Info) {
		if err := sameOrigin(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		c, err := s.callerClient(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		res, err := a(r.Context(), c, u, r)
		if err != nil {
			s.writeError(w, r, actionError(err))
			return
		}
		res.By = u.GetName()
		s.opts.Logger.Info("dashboard action", "user", u.GetName(), "path", r.URL.Path, "message", res.Message)
		writeJSON(w, http.StatusOK, res)
	}
}

// sameOrigin refuses a request that is not JSON, or whose Origin (when the browser sends one)
// is another site's.
func sameOrigin(r *http.Request) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, "an action takes a JSON body (Content-Type: application/json)")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errorf(http.StatusForbidden, "an action must come from the dashboard's own page (Origin %q)", o)
		}
	}
	return nil
}

// actionError answers with what the API server or steer said: a request the object cannot take
// is 409, a refusal by RBAC or the admission policy 403 with the API server's message (which says
// what is missing), and any other answer of the API server its own status.
func actionError(err error) error {
	var status apierrors.APIStatus
	switch {
	case steer.IsRefusal(err):
		return errorf(http.StatusConflict, "%s", err.Error())
	case errors.As(err, &status) && status.Status().Code >= 400 && status.Status().Code < 500:
		return errorf(int(status.Status().Code), "%s", err.Error())
	}
	return err
}

// readAction reads an ActionRequest body (at most 64 KiB).
func readAction(r *http.Request) (ActionRequest, error) {
	var a ActionRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return a, errorf(http.StatusBadRequest, "reading the request: %v", err)
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &a); err != nil {
			return a, errorf(http.StatusBadRequest, "the request is not a JSON object with step and reason: %v", err)
		}
	}
	return a, nil
}

func rolloutKey(r *http.Request) client.ObjectKey {
	return client.ObjectKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
}

func (s *Server) approve(ctx context.Context, c client.Client, u user.Info, r *http.Request) (ActionResult, error) {
	req, err := readAction(r)
	if err != nil {
		return ActionResult{}, err
	}
	if req.Step == "" {
		return ActionResult{}, errorf(http.StatusBadRequest, "name the step to approve (step)")
	}
	key := rolloutKey(r)
	a, err := steer.Approve(ctx, c, key, req.Step, u.GetName(), s.opts.Now())
	if err != nil {
		return ActionResult{}, err
	}
	return ActionResult{Message: fmt.Sprintf("rollout %s: step %s approved by %s (%d plan(s))", key, req.Step, a.ApprovedBy, len(a.Plans)), Plans: a.Plans}, nil
}

func (s *Server) reject(ctx context.Context, c client.Client, u user.Info, r *http.Request) (ActionResult, error) {
	req, err := readAction(r)
	if err != nil {
		return ActionResult{}, err
	}
	if req.Step == "" {
		return ActionResult{}, errorf(http.StatusBadRequest, "name the step whose plans to reject (step)")
	}
	if strings.TrimSpace(req.Reason) == "" {
		return ActionResult{}, errorf(http.StatusBadRequest, "say why you reject the plans (reason)")
	}
	key := rolloutKey(r)
	x, err := steer.Reject(ctx, c, key, req.Step, req.Reason, u.GetName(), s.opts.Now())
	if err != nil {
		return ActionResult{}, err
	}
	return ActionResult{Message: fmt.Sprintf("rollout %s: step %s rejected by %s (%d plan(s)): %s", key, req.Step, x.RejectedBy, len(x.Plans), x.Reason), Plans: x.Plans}, nil
}

func (s *Server) pause(paused bool) func(ctx context.Context, c client.Client, u user.Info, r *http.Request) (ActionResult, error) {
	return func(ctx context.Context, c client.Client, u user.Info, r *http.Request) (ActionResult, error) {
		key := rolloutKey(r)
		if err := steer.SetPaused(ctx, c, key, paused, u.GetName()); err != nil {
			return ActionResult{}, err
		}
		verb := "resumed"
		if paused {
			verb = "paused"
		}
		return ActionResult{Message: fmt.Sprintf("rollout %s %s by %s", key, verb, u.GetName())}, nil
	}
}

func (s *Server) retry(ctx context.Context, c client.Client, u user.Info, r *http.Request) (ActionResult, error) {
	cluster, ns, name := r.PathValue("cluster"), r.PathValue("namespace"), r.PathValue("name")
	run, err := steer.RequestRun(ctx, c, cluster, ns, name, keys.RetryRun, u.GetName())
	if err != nil {
		return ActionResult{}, err
	}
	return ActionResult{Run: run, Message: fmt.Sprintf("workspace %s/%s of cluster %s: retry of run %s requested by %s; the agent of %s carries it down",
		ns, name, cluster, run, u.GetName(), cluster)}, nil
}

// permissions asks the hub's API server, with the caller's token, what the caller may do to the
// Rollout and to the Workspaces of the clusters the request names.
func (s *Server) permissions(ctx context.Context, u user.Info, r *http.Request) (any, error) {
	key := rolloutKey(r)
	if err := s.require(ctx, u, "get", "rollouts", key.Namespace, key.Name); err != nil {
		return nil, err
	}
	cfg, err := s.callerConfig(r)
	if err != nil {
		return nil, err
	}
	az, err := authorizationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the SelfSubjectAccessReview client: %w", err)
	}
	may := func(verb, resource, namespace, name string) (bool, error) {
		review, err := az.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: magosv1.GroupVersion.Group, Resource: resource, Verb: verb, Namespace: namespace, Name: name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("asking whether %s may %s %s (SelfSubjectAccessReview): %w", u.GetName(), verb, resource, err)
		}
		return review.Status.Allowed, nil
	}
	all := func(checks ...[4]string) (bool, error) {
		for _, c := range checks {
			ok, err := may(c[0], c[1], c[2], c[3])
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	}
	var p Permissions
	if p.Approve, err = all([4]string{"update", "rollouts", key.Namespace, key.Name}, [4]string{"approve", "rollouts", key.Namespace, key.Name}); err != nil {
		return nil, err
	}
	if p.Pause, err = all([4]string{"patch", "rollouts", key.Namespace, key.Name}); err != nil {
		return nil, err
	}
	// Retry, only for the clusters asked (?cluster=C, repeated): a page asks for the cluster of
	// the Workspace it shows, so a Rollout over a thousand clusters costs no thousand reviews.
	p.Retry = map[string]bool{}
	for _, name := range r.URL.Query()["cluster"] {
		var c magosv1.Cluster
		if err := s.opts.Cache.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil || c.Spec.Transport != magosv1.TransportAgent || !c.Binds(key.Namespace) {
			p.Retry[name] = false
			continue
		}
		ns := mirror.Namespace(name)
		if p.Retry[name], err = all([4]string{"patch", "workspaces", ns, ""}, [4]string{"retry", "workspaces", ns, ""}); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// actionScheme holds the kinds the dashboard's actions read and write.
var actionScheme = scheme.New()

// callerConfig is a config of the hub's API server that authenticates with the caller's own
// token, and nothing of the hub's.
func (s *Server) callerConfig(r *http.Request) (*rest.Config, error) {
	token := bearerToken(r)
	if token == "" {
		return nil, errorf(http.StatusUnauthorized, "no token to act with")
	}
	c := rest.AnonymousClientConfig(s.opts.RestConfig)
	c.BearerToken = token
	return c, nil
}

// callerClient is a client of the hub's API server that acts as the caller (callerConfig).
func (s *Server) callerClient(r *http.Request) (client.Client, error) {
	cfg, err := s.callerConfig(r)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: actionScheme, Mapper: s.mapper})
	if err != nil {
		return nil, fmt.Errorf("a client acting as the caller: %w", err)
	}
	return c, nil
}
