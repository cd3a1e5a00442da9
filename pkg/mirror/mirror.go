// Package mirror defines how a spoke Workspace is mirrored on the hub: the namespace and name
// of the mirror, the labels that record its origin, which annotations travel up (from the
// spoke) and down (the hub's decisions), and who a Workspace read on the hub is (Identity: a
// mirror or not, its cluster and its origin, and whether to believe it). The agent writes
// mirrors and the hub reads them, both through this package.
package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
)

// GrantKeys are the annotations of a grant, which the hub's controllers write (grant.Keys).
var GrantKeys = grant.Keys

// RequestKeys are the annotations of the requests people write on a mirror (a retry or an
// approval from the hub).
var RequestKeys = []string{keys.RetryRun, keys.ApproveRun, keys.RequestedBy}

// NoticeKeys are the annotations by which the hub tells a spoke why it takes no part of a
// Workspace (keys.HubRefusal).
var NoticeKeys = []string{keys.HubRefusal}

// DecisionKeys are the annotations decided on the hub: grants, requests and notices. They
// travel down, from the mirror to the spoke Workspace, and never up.
var DecisionKeys = slices.Concat(GrantKeys, RequestKeys, NoticeKeys)

// Namespace is the hub namespace that holds the mirrors of a cluster.
func Namespace(cluster string) string { return keys.ClusterNamespace(cluster) }

// ClusterOf is the cluster whose mirrors a hub namespace holds: the inverse of Namespace ("" and
// false for a namespace that is no cluster's). A mirror's cluster is where it lives, never what
// its labels say (an agent writes those).
func ClusterOf(namespace string) (string, bool) {
	cluster, ok := strings.CutPrefix(namespace, keys.ClusterNamespacePrefix)
	if !ok || cluster == "" {
		return "", false
	}
	return cluster, true
}

// Check reports why the hub must not believe a mirror read in cluster's hub namespace: it is
// not a mirror, lives in another cluster's namespace, claims another cluster, or names an
// origin whose mirror would have another name (so two mirrors can never speak for one spoke
// Workspace). An agent writes mirrors with its own credentials; the hub takes nothing from
// one that fails this check. nil means the mirror is what it says it is.
func Check(cluster string, ws *magosv1.Workspace) error {
	if !IsMirror(ws) {
		return fmt.Errorf("%s/%s is not labelled %s=true", ws.Namespace, ws.Name, keys.Mirror)
	}
	if want := Namespace(cluster); ws.Namespace != want {
		return fmt.Errorf("mirror %s/%s is not in cluster %s's namespace %s", ws.Namespace, ws.Name, cluster, want)
	}
	_, err := Verify(ws)
	return err
}

// Identity is who a Workspace read on the hub is: a mirror or not and, for a mirror, the
// cluster it comes from and the spoke Workspace it mirrors (its origin). It is the one
// definition of these facts: IdentityOf reads it, Verify says whether to believe it.
type Identity struct {
	// Mirror is IsMirror: the Workspace is labelled magosproject.io/mirror "true".
	Mirror bool
	// Cluster is the cluster whose hub namespace the Workspace lives in (ClusterOf), empty
	// outside every cluster namespace. Only that cluster's agent may write there, so this is
	// the mirror's cluster; its magosproject.io/cluster label, which the agent writes, never is.
	Cluster string
	// Namespace and Name are the origin: for a mirror, the spoke Workspace its origin labels
	// name (an agent writes them: believe them only when Verify returns no error, which holds
	// them to the mirror's name); for any other Workspace, its own namespace and name.
	Namespace, Name string
}

// IdentityOf returns the identity of a Workspace read on the hub, as it stands: for a mirror,
// the origin it claims, which is what routes its events and names it in messages. It is cheap
// (no validation); Verify, and Check, say whether the hub may believe it. A Workspace that is
// not a mirror is its own origin.
func IdentityOf(o metav1.Object) Identity {
	id := Identity{Mirror: IsMirror(o), Namespace: o.GetNamespace(), Name: o.GetName()}
	id.Cluster, _ = ClusterOf(o.GetNamespace())
	if id.Mirror {
		l := o.GetLabels()
		id.Namespace, id.Name = l[keys.OriginNamespace], l[keys.OriginName]
	}
	return id
}

// Verify returns IdentityOf(o) and, for a mirror, why the hub must not believe it: it lives
// outside every cluster namespace, its cluster label claims another cluster than its
// namespace's, or its origin labels name no valid origin or one whose mirror would have
// another name (so two mirrors can never speak for one spoke Workspace). nil means the mirror
// is what it says it is; Check further holds it to the cluster it was read in. A Workspace that
// is not a mirror is its own origin, with no error.
func Verify(o metav1.Object) (Identity, error) {
	id := IdentityOf(o)
	if !id.Mirror {
		return id, nil
	}
	ns, name := o.GetNamespace(), o.GetName()
	if id.Cluster == "" {
		return id, fmt.Errorf("mirror %s/%s is in no cluster's namespace (%s<cluster>)", ns, name, keys.ClusterNamespacePrefix)
	}
	if claimed := o.GetLabels()[keys.Cluster]; claimed != id.Cluster {
		return id, fmt.Errorf("mirror %s/%s lives in cluster %s's namespace but its label %s claims cluster %q", ns, name, id.Cluster, keys.Cluster, claimed)
	}
	if len(validation.IsDNS1123Label(id.Namespace)) > 0 || len(validation.IsDNS1123Subdomain(id.Name)) > 0 {
		return id, fmt.Errorf("mirror %s/%s names no valid origin (%s=%q, %s=%q)", ns, name, keys.OriginNamespace, id.Namespace, keys.OriginName, id.Name)
	}
	if want := Name(id.Namespace, id.Name); name != want {
		return id, fmt.Errorf("mirror %s/%s claims origin %s/%s, whose mirror is named %s", ns, name, id.Namespace, id.Name, want)
	}
	return id, nil
}

// Name is the mirror's name for a spoke Workspace: readable, unique per namespace/name, and
// valid under every rule for Workspace names (at most 63 characters).
func Name(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := hex.EncodeToString(sum[:])[:8]
	base := namespace + "-" + name
	if len(base) > 54 {
		base = base[:54]
	}
	for len(base) > 0 && (base[len(base)-1] == '-' || base[len(base)-1] == '.') {
		base = base[:len(base)-1]
	}
	return base + "-" + suffix
}

// IsMirror reports whether o is a hub mirror: labelled magosproject.io/mirror exactly "true".
// This is the one definition every cache, predicate, list and check uses. Any other value
// ("false", "", "True") or no label at all is not a mirror: such a Workspace is a spoke's own,
// which an agent runs and the hub reads in a direct cluster. The selectors OnlyMirrors and
// NotMirrors select exactly the objects IsMirror is true and false for (a NotMirrors selector
// written as "label does not exist" would drop a Workspace labelled "false" from a direct
// cluster's view while its agent runs it).
func IsMirror(o metav1.Object) bool { return o.GetLabels()[keys.Mirror] == mirrorValue }

// mirrorValue is the value of keys.Mirror on a mirror.
const mirrorValue = "true"

// NotMirrors selects the objects that are not mirrors (IsMirror false: no mirror label, or any
// value but "true"), for caches and lists.
func NotMirrors() labels.Selector {
	r, err := labels.NewRequirement(keys.Mirror, selection.NotEquals, []string{mirrorValue})
	if err != nil {
		panic(err) // a constant key and value: cannot fail
	}
	return labels.NewSelector().Add(*r)
}

// OnlyMirrors selects the mirrors (IsMirror true), for caches and lists.
func OnlyMirrors() labels.Selector {
	return labels.SelectorFromSet(labels.Set{keys.Mirror: mirrorValue})
}

// MirrorsOf selects the mirrors whose origin labels name the spoke Workspace namespace/name,
// in every cluster: what each says of itself, to be held to Verify or Check before it is
// believed. It fails when namespace or name is no valid label value.
func MirrorsOf(namespace, name string) (labels.Selector, error) {
	sel, err := labels.ValidatedSelectorFromSet(labels.Set{keys.Mirror: mirrorValue, keys.OriginNamespace: namespace, keys.OriginName: name})
	if err != nil {
		return nil, fmt.Errorf("selecting the mirrors of %s/%s: %w", namespace, name, err)
	}
	return sel, nil
}

// NotMirror is a predicate that passes the objects that are not mirrors.
func NotMirror() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return !IsMirror(o) })
}

// LabelKeys are the labels Labels adds to a mirror (keys.Mirror and the origin labels): the
// mirror's bookkeeping, not the spoke Workspace's own labels.
var LabelKeys = []string{keys.Mirror, keys.Cluster, keys.OriginNamespace, keys.OriginName}

// Labels returns the mirror's labels: the spoke Workspace's own, plus the origin labels.
func Labels(cluster string, ws *magosv1.Workspace) map[string]string {
	out := make(map[string]string, len(ws.Labels)+4)
	maps.Copy(out, ws.Labels)
	out[keys.Mirror] = mirrorValue
	out[keys.Cluster] = cluster
	out[keys.OriginNamespace] = ws.Namespace
	out[keys.OriginName] = ws.Name
	return out
}

// UpAnnotations returns the spoke Workspace's annotations that travel up to the mirror: all
// but the hub's decisions and kubectl's bookkeeping.
func UpAnnotations(ws *magosv1.Workspace) map[string]string {
	out := make(map[string]string, len(ws.Annotations))
	for k, v := range ws.Annotations {
		if isDecision(k) || k == "kubectl.kubernetes.io/last-applied-configuration" {
			continue
		}
		out[k] = v
	}
	return out
}

// Decisions returns the decision annotations of a Workspace (mirror or spoke).
func Decisions(ws *magosv1.Workspace) map[string]string {
	out := map[string]string{}
	for _, k := range DecisionKeys {
		if v, ok := ws.Annotations[k]; ok {
			out[k] = v
		}
	}
	return out
}

func isDecision(k string) bool {
	for _, d := range DecisionKeys {
		if k == d {
			return true
		}
	}
	return false
}

// Origin is where a Workspace seen by the hub really lives.
type Origin struct {
	Cluster    string
	Namespace  string
	Name       string
	Generation int64
}

// OriginOf returns the origin of a Workspace the hub sees in the named cluster: for a mirror,
// what the agent recorded; for a Workspace read directly from a spoke (direct clusters), the
// Workspace itself.
func OriginOf(cluster string, ws *magosv1.Workspace) Origin {
	id := IdentityOf(ws)
	o := Origin{Cluster: cluster, Namespace: id.Namespace, Name: id.Name}
	switch {
	case !id.Mirror:
		o.Generation = ws.Generation
	case ws.Status.Origin != nil:
		o.Generation = ws.Status.Origin.Generation
	}
	return o
}

// Watermark is an agent's sync watermark, carried in the annotations of its heartbeat Lease on
// the hub: the agent writes it, the hub's registry and fleet view read it, both through this
// type (the one place its annotation format is defined).
type Watermark struct {
	// Since is when the agent's current uninterrupted in-sync period began
	// (magosproject.io/synced-since; zero before its first complete sync).
	Since time.Time
	// At is the completeness watermark (magosproject.io/synced-at): every change of every spoke
	// Workspace made before it is mirrored (zero: unknown).
	At time.Time
	// Mirrored is how many spoke Workspaces the agent mirrors (magosproject.io/mirrored).
	Mirrored int
	// Behind is how many mirrors were out of sync at the agent's last audit
	// (magosproject.io/mirrors-behind), and Lag how long the one furthest behind had been
	// (magosproject.io/mirror-lag): how far behind the agent is.
	Behind int
	Lag    time.Duration
}

// WatermarkKeys are the Lease annotations a Watermark is written in: a renewal sets those its
// watermark has and removes the others.
var WatermarkKeys = []string{keys.SyncedSince, keys.SyncedAt, keys.Mirrored, keys.MirrorsBehind, keys.MirrorLag}

// Annotations returns the watermark as Lease annotations: synced-since to the second and
// synced-at to the nanosecond, RFC 3339 UTC; a zero time is left out.
func (w Watermark) Annotations() map[string]string {
	out := map[string]string{keys.Mirrored: strconv.Itoa(w.Mirrored)}
	if !w.Since.IsZero() {
		out[keys.SyncedSince] = w.Since.UTC().Format(time.RFC3339)
	}
	if !w.At.IsZero() {
		out[keys.SyncedAt] = w.At.UTC().Format(time.RFC3339Nano)
	}
	if w.Behind > 0 {
		out[keys.MirrorsBehind] = strconv.Itoa(w.Behind)
		out[keys.MirrorLag] = w.Lag.Round(time.Millisecond).String()
	}
	return out
}

// WatermarkOf reads a watermark from Lease annotations; a missing or malformed field is zero,
// and so is a count that is negative or too large for the Cluster's status.
func WatermarkOf(annotations map[string]string) Watermark {
	var w Watermark
	w.Since, _ = time.Parse(time.RFC3339Nano, annotations[keys.SyncedSince])
	w.At, _ = time.Parse(time.RFC3339Nano, annotations[keys.SyncedAt])
	// An agent writes the count: anything but a count an int32 holds reads as zero.
	if n, err := strconv.ParseInt(annotations[keys.Mirrored], 10, 32); err == nil && n >= 0 {
		w.Mirrored = int(n)
	}
	if n, err := strconv.ParseInt(annotations[keys.MirrorsBehind], 10, 32); err == nil && n > 0 {
		w.Behind = int(n)
		if d, err := time.ParseDuration(annotations[keys.MirrorLag]); err == nil && d > 0 {
			w.Lag = d
		}
	}
	return w
}
