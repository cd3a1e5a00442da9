package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TokenCookie is the cookie the page keeps the caller's token in after POST /login: the
// browser's EventSource cannot send an Authorization header.
const TokenCookie = "magos-dashboard-token"

// Cache lifetimes of the hub's answers about callers: a revoked token or a removed RoleBinding
// takes at most this long to shut a caller out.
const (
	tokenCacheTTL = 30 * time.Second
	allowCacheTTL = 30 * time.Second
	denyCacheTTL  = 5 * time.Second
)

// access decides who the caller is (TokenReview) and what they may read (SubjectAccessReview),
// both asked of the hub's API server and cached briefly.
type access struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

func newAccess(cfg *rest.Config) (*access, error) {
	authnClient, err := authenticationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dashboard: the TokenReview client: %w", err)
	}
	authzClient, err := authorizationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dashboard: the SubjectAccessReview client: %w", err)
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  authnClient,
		TokenAccessReviewTimeout: 10 * time.Second,
		CacheTTL:                 tokenCacheTTL,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("dashboard: the authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient,
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("dashboard: the authorizer: %w", err)
	}
	return &access{authn: authn, authz: authz}, nil
}

// authenticate returns the caller of req, from its Authorization header or else its token
// cookie; nil when neither holds a token the API server accepts.
func (a *access) authenticate(req *http.Request) user.Info {
	token := bearerToken(req)
	if token == "" {
		return nil
	}
	// A copy: the authenticator strips the Authorization header from the request it reads, and
	// the handler may need the token yet (callerClient).
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+token)
	// A token the API server rejects is an error to the authenticator; to the caller it is the
	// same as no token.
	res, ok, err := a.authn.AuthenticateRequest(req)
	if err != nil || !ok {
		return nil
	}
	return res.User
}

// can asks whether u may verb the resource (a kind of magosproject.io) in namespace (empty:
// cluster-scoped or every namespace), named name (empty: any).
func (a *access) can(ctx context.Context, u user.Info, verb, resource, namespace, name string) (bool, error) {
	d, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: magosv1.GroupVersion.Group, APIVersion: magosv1.GroupVersion.Version,
		Resource: resource, Namespace: namespace, Name: name, ResourceRequest: true,
	})
	if err != nil {
		return false, fmt.Errorf("asking the API server whether %s may %s %s: %w", u.GetName(), verb, resource, err)
	}
	return d == authorizer.DecisionAllow, nil
}

// bearerToken is the token req carries: its Authorization header's bearer token, else its token
// cookie's; empty when it carries neither.
func bearerToken(req *http.Request) string {
	if h := req.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return ""
		}
		return strings.TrimSpace(token)
	}
	if c, err := req.Cookie(TokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// callerClient returns a client of the hub's API server that authenticates with the caller's
// own token (from req), so that the API server's RBAC decides what it may read: the dashboard
// reads Secrets this way, never with the hub's credentials (the hub may read none in the
// namespaces of agent clusters).
func callerClient(cfg *rest.Config, req *http.Request) (corev1client.CoreV1Interface, error) {
	token := bearerToken(req)
	if token == "" {
		return nil, errorf(http.StatusUnauthorized, "no token to read with")
	}
	c := rest.AnonymousClientConfig(cfg)
	c.BearerToken = token
	return corev1client.NewForConfig(c)
}
