// Package mirror defines how a spoke Workspace is mirrored on the hub: the namespace and name
// of the mirror, the labels that record its origin, and which annotations travel up (from the
// spoke) and down (the hub's decisions). The agent writes mirrors and the hub reads them, both
// through this package.
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

// ClusterOf is the cluster whose mirrors a hub namespace holds: the inverse of Namespace. A
// mirror's cluster is where it lives, never what its labels say (an agent writes those).
func ClusterOf(namespace string) (string, bool) {
	cluster, ok := strings.CutPrefix(namespace, keys.ClusterNamespacePrefix)
	return cluster, ok && cluster != ""
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
	if claimed := ws.Labels[keys.Cluster]; claimed != cluster {
		return fmt.Errorf("mirror %s/%s lives in cluster %s's namespace but its label %s claims cluster %q", ws.Namespace, ws.Name, cluster, keys.Cluster, claimed)
	}
	ns, name := ws.Labels[keys.OriginNamespace], ws.Labels[keys.OriginName]
	if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("mirror %s/%s names no valid origin (%s=%q, %s=%q)", ws.Namespace, ws.Name, keys.OriginNamespace, ns, keys.OriginName, name)
	}
	if want := Name(ns, name); ws.Name != want {
		return fmt.Errorf("mirror %s/%s claims origin %s/%s, whose mirror is named %s", ws.Namespace, ws.Name, ns, name, want)
	}
	return nil
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

// IsMirror reports whether o is a hub mirror: labelled magosproject.io/mirror "true". This is
// the one definition every cache, predicate and check uses.
func IsMirror(o metav1.Object) bool { return o.GetLabels()[keys.Mirror] == "true" }

// NotMirrors selects the objects that are not mirrors (IsMirror false), for caches and lists.
func NotMirrors() labels.Selector {
	r, err := labels.NewRequirement(keys.Mirror, selection.NotEquals, []string{"true"})
	if err != nil {
		panic(err) // a constant key and value: cannot fail
	}
	return labels.NewSelector().Add(*r)
}

// OnlyMirrors selects the mirrors (IsMirror true).
func OnlyMirrors() labels.Selector { return labels.SelectorFromSet(labels.Set{keys.Mirror: "true"}) }

// NotMirror is a predicate that passes the objects that are not mirrors.
func NotMirror() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return !IsMirror(o) })
}

// Labels returns the mirror's labels: the spoke Workspace's own, plus the origin labels.
func Labels(cluster string, ws *magosv1.Workspace) map[string]string {
	out := make(map[string]string, len(ws.Labels)+4)
	maps.Copy(out, ws.Labels)
	out[keys.Mirror] = "true"
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
	if IsMirror(ws) {
		o := Origin{Cluster: cluster, Namespace: ws.Labels[keys.OriginNamespace], Name: ws.Labels[keys.OriginName]}
		if ws.Status.Origin != nil {
			o.Generation = ws.Status.Origin.Generation
		}
		return o
	}
	return Origin{Cluster: cluster, Namespace: ws.Namespace, Name: ws.Name, Generation: ws.Generation}
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
}

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
	return w
}
