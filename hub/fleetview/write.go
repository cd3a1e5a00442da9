package fleetview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
)

// Event reasons written by the writer on the object that decided.
const (
	EventGranted = "Granted"
	EventRevoked = "Revoked"
)

// DefaultWriteConcurrency is how many Workspaces are written at once.
const DefaultWriteConcurrency = 8

// WriteOptions configures Snapshot.Write.
type WriteOptions struct {
	// By is the value of magosproject.io/granted-by: keys.GrantedByRollout or
	// keys.GrantedByProject.
	By string
	// Recorder, when set, records an Event on Regarding for every grant and every revocation
	// written (a decision revokes only grants that could still start a run).
	Recorder events.EventRecorder
	// Regarding is the Rollout or Project that decided.
	Regarding runtime.Object
	// Concurrency bounds parallel writes (default DefaultWriteConcurrency).
	Concurrency int
	// Leader is the deciding hub replica's identity in the leader Lease (decider.ControllerOptions.Leader),
	// written as keys.DecidedBy with every grant and revocation; empty writes none.
	Leader string
	// RequestedBy is the hub's own user name, which the retry requests of a rollback
	// (decision.Decision.Retries) name as magosproject.io/requested-by: the magos-workspace-requests
	// admission policy wants a request to name its writer.
	RequestedBy string
}

// Outcome is what a write pass did.
type Outcome struct {
	// Granted and Revoked are the changes actually written.
	Granted []decision.Change
	Revoked []decision.Change
	// Retried are the retry requests actually written.
	Retried []decision.Change
	// Refused are the writes the API server refused as forbidden (RBAC, or an admission
	// policy such as magos-workspace-requests that wants the verb grant), sorted by key.
	Refused []WriteRefusal
}

// WriteRefusal is a decision the API server of a cluster refused to let the hub write.
type WriteRefusal struct {
	// Key is the Workspace.
	Key decision.Key
	// Message is the API server's reason (it names the missing verb or permission).
	Message string
}

// String says what was refused, for the Event and the Degraded condition alike.
func (r WriteRefusal) String() string {
	return fmt.Sprintf("The API server refused the hub's decision for %s: %s", r.Key, r.Message)
}

// EventGrantRefused is the reason of the Warning Event, and of the Degraded condition, on the
// Rollout or Project whose decision an API server refused as forbidden.
const EventGrantRefused = "GrantRefused"

// SetRefusedCondition keeps the Degraded condition of refused writes on a Rollout's or
// Project's conditions: True, reason GrantRefused, naming the first refused Workspace and the
// API server's words, while any write of the pass was refused; removed once none is (a Degraded
// condition of another reason is left alone).
func SetRefusedCondition(conditions *[]metav1.Condition, out Outcome, generation int64) {
	if len(out.Refused) == 0 {
		if c := meta.FindStatusCondition(*conditions, magosv1.ConditionDegraded); c != nil && c.Reason == EventGrantRefused {
			meta.RemoveStatusCondition(conditions, magosv1.ConditionDegraded)
		}
		return
	}
	msg := out.Refused[0].String()
	if n := len(out.Refused) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more Workspace(s))", n)
	}
	meta.SetStatusCondition(conditions, metav1.Condition{Type: magosv1.ConditionDegraded, Status: metav1.ConditionTrue,
		Reason: EventGrantRefused, Message: msg, ObservedGeneration: generation})
}

// Write puts a decision on the Workspaces: every grant in d.Grants (all three decision
// annotations) and every revocation in d.Revokes (all three removed), each with one JSON
// merge patch on the object the hub sees, and nothing else: no read-modify-write. A write that
// would change nothing is skipped: when the snapshot already shows the decision, and when the
// View wrote that same decision on the same version of the Workspace in an earlier pass whose
// write the cache has not shown yet (so a replayed event neither writes nor counts a grant
// twice). A grant names the run the snapshot shows; if the Workspace moved to another run
// meanwhile, the spoke ignores the grant and the next pass grants the new run. Writes to
// clusters that did not answer in this pass are left for a later pass. All errors are joined
// and returned after every write was tried.
func (s *Snapshot) Write(ctx context.Context, d decision.Decision, opts WriteOptions) (Outcome, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultWriteConcurrency
	}
	noticeErr := s.writeNotices(ctx, opts)
	var retryErr error
	out0 := Outcome{}
	out0.Retried, retryErr = s.writeRetries(ctx, d.Retries, opts)
	noticeErr = errors.Join(noticeErr, retryErr)
	type job struct {
		change decision.Change
		grant  bool
	}
	var jobs []job
	for _, g := range d.Grants {
		jobs = append(jobs, job{g, true})
	}
	for _, r := range d.Revokes {
		jobs = append(jobs, job{r, false})
	}
	if len(jobs) == 0 {
		return out0, noticeErr
	}
	reacted := s.newestChange(d.Members)

	var (
		mu   sync.Mutex
		out  = out0
		errs []error
		wg   sync.WaitGroup
		// written are the Workspaces as the patches returned them, for the Events.
		written = map[decision.Key]*magosv1.Workspace{}
	)
	sem := make(chan struct{}, opts.Concurrency)
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ws, err := s.writeOne(ctx, j.change, j.grant, opts)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case apierrors.IsForbidden(err):
				out.Refused = append(out.Refused, WriteRefusal{Key: j.change.Key, Message: apiMessage(err)})
				errs = append(errs, err)
			case err != nil:
				errs = append(errs, err)
			case ws != nil && j.grant:
				out.Granted = append(out.Granted, j.change)
				written[j.change.Key] = ws
			case ws != nil:
				out.Revoked = append(out.Revoked, j.change)
				written[j.change.Key] = ws
			}
		})
	}
	wg.Wait()
	sortChanges(out.Granted)
	sortChanges(out.Revoked)
	slices.SortFunc(out.Refused, func(a, b WriteRefusal) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	for _, r := range out.Refused {
		recordEvent(opts, nil, corev1.EventTypeWarning, EventGrantRefused, "Grant", "%s", r.String())
	}

	now := time.Now()
	for range out.Granted {
		grantsTotal.WithLabelValues(opts.By).Inc()
		if !reacted.IsZero() {
			decisionLatency.WithLabelValues(opts.By).Observe(max(now.Sub(reacted), 0).Seconds())
		}
	}
	for range out.Revoked {
		revokesTotal.WithLabelValues(opts.By).Inc()
	}
	for _, note := range GrantNotes(out.Granted) {
		recordEvent(opts, related(written, out.Granted), corev1.EventTypeNormal, EventGranted, "Grant", "%s", note)
	}
	for _, note := range RevokeNotes(out.Revoked) {
		recordEvent(opts, related(written, out.Revoked), corev1.EventTypeNormal, EventRevoked, "Revoke", "%s", note)
	}
	return out, errors.Join(append(errs, noticeErr)...)
}

// maxEventNote bounds the note of one Granted or Revoked Event: the API server refuses an
// Event whose note passes 1 kB (events.k8s.io/v1).
const maxEventNote = 1000

// GrantNotes are the notes of the Granted Events of one write pass: one Event for the pass, not
// one per grant (a step of 500 Workspaces granted at once is a handful of Events, not 500 writes
// on the hub's API server). One grant reads "Granted run R to C/NS/NAME"; several read
// "Granted 3 runs: run R1 to K1, run R2 to K2, run R3 to K3", continued in as many Events as the
// note's size limit asks, so that every grant is named. Each Workspace's own annotations hold
// its grant.
func GrantNotes(granted []decision.Change) []string {
	items := make([]string, len(granted))
	for i, g := range granted {
		items[i] = fmt.Sprintf("run %s to %s", g.Run, g.Key)
	}
	return passNotes(items, "Granted ", func(n int) string { return fmt.Sprintf("Granted %d runs: ", n) })
}

// RevokeNotes are the notes of the Revoked Events of one write pass, as GrantNotes: "Revoked
// the grant of C/NS/NAME", or "Revoked 2 grants: C/NS/A, C/NS/B".
func RevokeNotes(revoked []decision.Change) []string {
	items := make([]string, len(revoked))
	for i, r := range revoked {
		items[i] = r.Key.String()
	}
	return passNotes(items, "Revoked the grant of ", func(n int) string { return fmt.Sprintf("Revoked %d grants: ", n) })
}

// passNotes joins items into notes of at most maxEventNote bytes: one item after single, or
// several after many(count of the note's items).
func passNotes(items []string, single string, many func(int) string) []string {
	var notes []string
	for len(items) > 0 {
		n, size := 0, len(many(len(items)))
		for n < len(items) && (n == 0 || size+2+len(items[n]) <= maxEventNote) {
			size += 2 + len(items[n])
			n++
		}
		if n == 1 {
			notes = append(notes, single+items[0])
		} else {
			notes = append(notes, many(n)+strings.Join(items[:n], ", "))
		}
		items = items[n:]
	}
	return notes
}

// related is the Workspace an Event of a pass concerns when the pass wrote one change only.
func related(written map[decision.Key]*magosv1.Workspace, changes []decision.Change) *magosv1.Workspace {
	if len(changes) != 1 {
		return nil
	}
	return written[changes[0].Key]
}

// EventRetryRequested is the reason of the Event on the Rollout for every retry request a
// rollback writes, and for each a person writes on a mirror (the Rollout controller records
// those, naming the person).
const EventRetryRequested = "RetryRequested"

// writeRetries writes each retry request of a rollback (magosproject.io/retry-run naming the
// run, and requested-by) on the Workspace as the hub sees it, fenced to the version it was
// decided on: a Workspace that moved on meanwhile is decided again. A request already there is
// not written again.
func (s *Snapshot) writeRetries(ctx context.Context, retries []decision.Change, opts WriteOptions) ([]decision.Change, error) {
	var (
		done []decision.Change
		errs []error
	)
	for _, r := range retries {
		t, ok := s.Targets[r.Key]
		if !ok {
			errs = append(errs, fmt.Errorf("asking %s for a new run: the Workspace is not in the snapshot", r.Key))
			continue
		}
		cl, ok := s.engaged[t.Cluster]
		if !ok || t.Workspace.Annotations[keys.RetryRun] == r.Run || t.Workspace.Status.CurrentRunID != r.Run {
			continue
		}
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": t.Workspace.ResourceVersion,
			"annotations":     map[string]string{keys.RetryRun: r.Run, keys.RequestedBy: opts.RequestedBy},
		}})
		if err != nil {
			return done, err
		}
		ws := &magosv1.Workspace{}
		ws.Namespace, ws.Name = t.Namespace, t.Name
		if err := cl.GetClient().Patch(ctx, ws, client.RawPatch(types.MergePatchType, body)); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue // gone or changed: that change triggers a new decision
			}
			errs = append(errs, fmt.Errorf("asking Workspace %s in cluster %s for a new run: %w", t.Name, t.Cluster, err))
			continue
		}
		done = append(done, r)
		recordEvent(opts, ws, corev1.EventTypeNormal, EventRetryRequested, "Retry",
			"Asked %s for a new run to roll back: its run %s ended at another commit", r.Key.String(), r.Run)
	}
	return done, errors.Join(errs...)
}

// writeNotices tells what the hub refuses: a Warning Event on each refused Workspace and, where
// its cluster is not bound to the namespace, keys.HubRefusal on it (with any grant it held
// removed); a Workspace counted again loses its keys.HubRefusal. The Events API folds the
// Event of every pass into one series per Workspace.
func (s *Snapshot) writeNotices(ctx context.Context, opts WriteOptions) error {
	var errs []error
	for _, r := range s.Refused {
		if opts.Recorder != nil {
			opts.Recorder.Eventf(r.Target.Workspace, opts.Regarding, corev1.EventTypeWarning, r.Reason, "Refuse", "%s", r.Message)
		}
		if r.Reason != ReasonClusterNotBound || refusalShown(r.Target.Workspace, r.Message) {
			continue
		}
		annotations := decided(grant.Grant{}, opts.Leader) // the grant it held is revoked
		annotations[keys.HubRefusal] = r.Message
		errs = append(errs, s.patchAnnotations(ctx, r.Target, annotations))
	}
	for _, t := range s.readmitted {
		errs = append(errs, s.patchAnnotations(ctx, t, map[string]any{keys.HubRefusal: nil}))
	}
	return errors.Join(errs...)
}

// refusalShown reports whether ws already carries the refusal message and no grant.
func refusalShown(ws *magosv1.Workspace, message string) bool {
	a := ws.GetAnnotations()
	return a[keys.HubRefusal] == message && !grant.Carried(a)
}

// patchAnnotations merges annotations (nil values remove) into the Workspace of t.
func (s *Snapshot) patchAnnotations(ctx context.Context, t Target, annotations map[string]any) error {
	cl, ok := s.engaged[t.Cluster]
	if !ok {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return fmt.Errorf("encoding the annotations of %s/%s: %w", t.Namespace, t.Name, err)
	}
	ws := &magosv1.Workspace{}
	ws.Namespace, ws.Name = t.Namespace, t.Name
	if err := cl.GetClient().Patch(ctx, ws, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching Workspace %s/%s in cluster %s: %w", t.Namespace, t.Name, t.Cluster, err)
	}
	return nil
}

// recordEvent records an Event on the deciding object, related to the Workspace as the hub sees it.
// The related object matters: the events API folds Events with the same regarding object,
// reason, action and related object into one series and keeps only the first note.
func recordEvent(opts WriteOptions, ws *magosv1.Workspace, kind, reason, action, note string, args ...any) {
	if opts.Recorder == nil || opts.Regarding == nil {
		return
	}
	var related runtime.Object
	if ws != nil {
		related = ws
	}
	opts.Recorder.Eventf(opts.Regarding, related, kind, reason, action, note, args...)
}

// writeOne writes one grant (run != "") or revocation and returns the Workspace as patched,
// or nil when nothing was written.
func (s *Snapshot) writeOne(ctx context.Context, c decision.Change, isGrant bool, opts WriteOptions) (*magosv1.Workspace, error) {
	by := opts.By
	t, ok := s.Targets[c.Key]
	if !ok {
		return nil, fmt.Errorf("writing decision for %s: the Workspace is not in the snapshot", c.Key)
	}
	if carries(t.Workspace, isGrant, c, by) {
		return nil, nil
	}
	cl, ok := s.engaged[t.Cluster]
	if !ok {
		// The cluster did not answer in this pass: nothing can be written there now.
		return nil, nil
	}
	want := pending{resourceVersion: t.Workspace.ResourceVersion, isGrant: isGrant, decided: c.Grant(by)}
	if s.view.pending(c.Key, want) {
		// This very decision was written on this very version of the Workspace, and the
		// cache has not caught up with the write yet: writing again would change nothing.
		return nil, nil
	}
	var g grant.Grant // a revocation
	if isGrant {
		g = want.decided
	}
	metadata := map[string]any{"annotations": decided(g, opts.Leader)}
	if isGrant {
		// A grant is fenced to the version of the Workspace it was decided on: if the Workspace
		// changed since (another run, another spec), the API server refuses the write and the
		// change that moved it triggers a new decision.
		metadata["resourceVersion"] = t.Workspace.ResourceVersion
	}
	body, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return nil, fmt.Errorf("encoding decision for %s: %w", c.Key, err)
	}
	ws := &magosv1.Workspace{}
	ws.Namespace, ws.Name = t.Namespace, t.Name
	if err := cl.GetClient().Patch(ctx, ws, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil, nil // gone or changed: that change triggers a new decision
		}
		return nil, fmt.Errorf("patching the decision of Workspace %s in cluster %s: %w", t.Name, t.Cluster, err)
	}
	s.view.wrote(c.Key, want)
	return ws, nil
}

// apiMessage is the API server's own message of a refused request, without the client's
// framing.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if m := status.Status().Message; m != "" {
			return m
		}
	}
	return err.Error()
}

// decided is the annotations patch that writes g (grant.Grant{}: a revocation) as decided by the
// hub replica leader: keys.DecidedBy, which the magos-hub-leader admission policy checks against
// the leader Lease, is set with every change of a grant, so that a replica that no longer leads
// can change none.
func decided(g grant.Grant, leader string) map[string]any {
	annotations := g.Patch()
	if leader != "" {
		annotations[keys.DecidedBy] = leader
	}
	return annotations
}

// carries reports whether ws already carries the decision: the exact grant (grant.Equal), or
// (for a revocation) none of the grant annotations.
func carries(ws *magosv1.Workspace, isGrant bool, c decision.Change, by string) bool {
	if isGrant {
		return grant.Of(ws).Equal(c.Grant(by))
	}
	return !grant.Carried(ws.GetAnnotations())
}

// newestChange is the time of the newest status change among the decided Workspaces: the
// latest Ready condition transition. Decision latency is measured from it.
func (s *Snapshot) newestChange(members []decision.Key) time.Time {
	var newest time.Time
	for _, k := range members {
		t, ok := s.Targets[k]
		if !ok {
			continue
		}
		if c := meta.FindStatusCondition(t.Workspace.Status.Conditions, magosv1.ConditionReady); c != nil && c.LastTransitionTime.After(newest) {
			newest = c.LastTransitionTime.Time
		}
	}
	return newest
}

func sortChanges(cs []decision.Change) {
	slices.SortFunc(cs, func(a, b decision.Change) int { return strings.Compare(a.Key.String(), b.Key.String()) })
}
