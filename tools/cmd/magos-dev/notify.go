package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/magosfleet/magos/tools/devfleet"
)

// webhookSecret is the hub Secret that holds the demo webhook's URL.
const webhookSecret = "magos-demo-webhook"

// webhook is a receiver on loopback standing for a team's chat: the demo's hub sends it a
// CloudEvent for each step started, completed or awaiting approval, each failure and the
// Rollout's completion (docs/operations.md#notifications), and it prints one line for each.
type webhook struct {
	srv *http.Server
	url string
	out io.Writer
	mu  sync.Mutex
	// last is closed when a notification that ends a Rollout (completed or failed) arrives.
	last     chan struct{}
	lastOnce sync.Once
}

// startWebhook listens on a free loopback port and prints what arrives to out.
func startWebhook(out io.Writer) (*webhook, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the demo's webhook: %w", err)
	}
	w := &webhook{url: "http://" + l.Addr().String() + "/notifications", out: out, last: make(chan struct{})}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve)}
	go func() { _ = w.srv.Serve(l) }()
	return w, nil
}

// serve prints one CloudEvent.
func (w *webhook) serve(rw http.ResponseWriter, r *http.Request) {
	var ce struct {
		Type string `json:"type"`
		Data struct {
			Namespace, Rollout, Step, Message string
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ce); err != nil {
		http.Error(rw, "not a CloudEvent", http.StatusBadRequest)
		return
	}
	where := ce.Data.Namespace + "/" + ce.Data.Rollout
	if ce.Data.Step != "" {
		where += ", step " + ce.Data.Step
	}
	w.mu.Lock()
	fmt.Fprintf(w.out, "notification: %s (%s): %s\n", strings.TrimPrefix(ce.Type, "io.magosproject.rollout."), where, ce.Data.Message)
	w.mu.Unlock()
	if t := strings.TrimPrefix(ce.Type, "io.magosproject.rollout."); t == "RolloutCompleted" || t == "RolloutFailed" {
		w.lastOnce.Do(func() { close(w.last) })
	}
	rw.WriteHeader(http.StatusNoContent)
}

// waitForLast waits up to timeout for the notification that ends the Rollout: the hub holds
// each for a moment before it sends it, so it arrives just after the Rollout's status says so.
func (w *webhook) waitForLast(ctx context.Context, timeout time.Duration) {
	select {
	case <-w.last:
	case <-ctx.Done():
	case <-time.After(timeout):
		fmt.Fprintf(w.out, "notifications: none said the Rollout ended within %s\n", timeout)
	}
}

// config is the hub config's notifications section for the webhook.
func (w *webhook) config() map[string]any {
	return map[string]any{"webhooks": []any{map[string]any{
		"name": "demo", "urlSecretRef": map[string]any{"namespace": corev1.NamespaceDefault, "name": webhookSecret},
		"events": []any{"StepStarted", "StepAwaitingApproval", "StepCompleted", "RolloutCompleted", "RolloutFailed", "RollbackStarted", "DriftDetected"},
	}}}
}

// register writes the webhook's URL into the hub Secret the config names.
func (w *webhook) register(ctx context.Context, fleet *devfleet.Fleet) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceDefault, Name: webhookSecret},
		StringData: map[string]string{"url": w.url}}
	if err := fleet.Client("hub").Create(ctx, s); err != nil {
		return fmt.Errorf("the demo webhook's Secret: %w", err)
	}
	return nil
}

// stop stops the receiver.
func (w *webhook) stop() { _ = w.srv.Close() }
