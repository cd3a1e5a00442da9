package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// notifier tells the streams that something they may show changed: a Rollout, a Cluster or a
// mirror in the hub's cache. Each stream takes the channel before it reads, and reads again
// once the channel is closed.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

// next is closed at the next change.
func (n *notifier) next() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

// watch subscribes n to the cache's Rollouts, Clusters and Workspaces (the hub caches mirrors
// only), and to the Rollouts' Events (watchEvents).
func (n *notifier) watch(ctx context.Context, c cache.Informers) error {
	if err := n.watchEvents(ctx, c); err != nil {
		return err
	}
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.notify() },
		UpdateFunc: func(any, any) { n.notify() },
		DeleteFunc: func(any) { n.notify() },
	}
	for _, obj := range []client.Object{&magosv1.Rollout{}, &magosv1.Cluster{}, &magosv1.Workspace{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	return nil
}

// stream answers with server-sent events: an "update" event with what a computes (as JSON)
// at once and after every change that alters it, until the caller goes or loses access (an
// "error" event with the Error, then the end of the stream). The caller's access is asked
// again for every event (the answers are cached for seconds, see allowCacheTTL).
func (s *Server) stream(a answer) func(http.ResponseWriter, *http.Request, user.Info) {
	return func(w http.ResponseWriter, r *http.Request, u user.Info) {
		ctx := r.Context()
		rc := http.NewResponseController(w)
		first := true
		var last []byte
		keepalive := time.NewTicker(s.opts.Keepalive)
		defer keepalive.Stop()
		for {
			changed := s.changes.next()
			v, err := a(ctx, u, r)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				var se *statusError
				if first && errors.As(err, &se) {
					// Refused before the stream began: an ordinary HTTP error.
					s.writeError(w, r, err)
					return
				}
				if !errors.As(err, &se) {
					s.opts.Logger.Error(err, "dashboard stream failed", "path", r.URL.Path)
				}
				body, _ := json.Marshal(Error{err.Error()})
				_ = writeEvent(w, "error", body)
				_ = rc.Flush()
				return
			}
			body, err := json.Marshal(v)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if first {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("X-Accel-Buffering", "no")
				w.WriteHeader(http.StatusOK)
				first = false
			}
			if !bytes.Equal(body, last) {
				if err := writeEvent(w, "update", body); err != nil {
					return
				}
				last = body
			}
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-keepalive.C:
				if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
					return
				}
			}
			// Changes come in bursts (a status write per Workspace): one event per burst.
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.opts.MinInterval):
			}
		}
	}
}

func writeEvent(w io.Writer, event string, data []byte) error {
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
	return err
}

// maxTokenBytes bounds the body of POST /login.
const maxTokenBytes = 64 << 10

// login checks the token of the form field "token" with the API server and, when it is good,
// keeps it in the TokenCookie (HttpOnly, SameSite=Strict, Secure over HTTPS). The page posts
// the form with fetch and gets the caller as JSON; a browser that posts it itself (the form's
// method is POST, so the token never lands in a URL) is sent back to the page.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenBytes)
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{"the form could not be read: " + err.Error()})
		return
	}
	token := r.PostForm.Get("token")
	if token == "" {
		writeJSON(w, http.StatusBadRequest, Error{"the form field token is empty"})
		return
	}
	check := r.Clone(r.Context())
	check.Header.Set("Authorization", "Bearer "+token)
	u := s.access.authenticate(check)
	if u == nil {
		writeJSON(w, http.StatusUnauthorized, Error{"the hub's API server does not accept this token"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: token, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		// The form submitted by a browser without the page's script: back to the page.
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, Whoami{User: u.GetName(), Groups: u.GetGroups()})
}

// logout forgets the TokenCookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}
