package mirror_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

func TestNameIsAValidDistinctWorkspaceName(t *testing.T) {
	cases := [][2]string{
		{"default", "api"},
		{"payments", strings.Repeat("w", 63)},
		{strings.Repeat("n", 63), strings.Repeat("w", 63)},
		{"a-", "-b"},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		n := mirror.Name(c[0], c[1])
		if len(n) > 63 {
			t.Errorf("%v: %q is %d characters", c, n, len(n))
		}
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%v: %q: %v", c, n, errs)
		}
		if seen[n] {
			t.Errorf("%v: %q is not unique", c, n)
		}
		seen[n] = true
	}
	// Same prefix after truncation, different Workspaces: different names.
	long := strings.Repeat("x", 60)
	if mirror.Name("ns", long+"a") == mirror.Name("ns", long+"b") {
		t.Error("truncated names collide")
	}
}

func TestOriginOfMirrorAndDirect(t *testing.T) {
	spoke := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{
		Namespace: "payments", Name: "api", Generation: 3,
		Labels:      map[string]string{"env": "prod"},
		Annotations: map[string]string{keys.ExecutionAllowed: "true", keys.GrantedRun: "r1", keys.ReconcileRequest: "now"},
	}}
	if o := mirror.OriginOf("lab", spoke); o != (mirror.Origin{Cluster: "lab", Namespace: "payments", Name: "api", Generation: 3}) {
		t.Fatalf("direct origin = %+v", o)
	}
	m := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{
		Namespace: mirror.Namespace("us-east-1"), Name: mirror.Name("payments", "api"), Generation: 9,
		Labels: mirror.Labels("us-east-1", spoke),
	}}
	m.Status.Origin = &magosv1.WorkspaceOrigin{Cluster: "us-east-1", Namespace: "payments", Name: "api", Generation: 3}
	if !mirror.IsMirror(m) || mirror.IsMirror(spoke) {
		t.Fatal("IsMirror wrong")
	}
	if o := mirror.OriginOf("us-east-1", m); o != (mirror.Origin{Cluster: "us-east-1", Namespace: "payments", Name: "api", Generation: 3}) {
		t.Fatalf("mirror origin = %+v", o)
	}
	if m.Labels["env"] != "prod" {
		t.Error("mirror lost the Workspace's labels")
	}
	up := mirror.UpAnnotations(spoke)
	if _, ok := up[keys.ExecutionAllowed]; ok {
		t.Error("a decision travelled up")
	}
	if up[keys.ReconcileRequest] != "now" {
		t.Error("reconcile-request did not travel up")
	}
	if d := mirror.Decisions(spoke); len(d) != 2 || d[keys.GrantedRun] != "r1" {
		t.Errorf("decisions = %v", d)
	}
}

// TestWatermarkRoundTrip: what the agent writes on its Lease the hub reads back, synced-since
// to the second and synced-at to the nanosecond; missing or malformed fields read as zero.
func TestWatermarkRoundTrip(t *testing.T) {
	since := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := since.Add(1500 * time.Millisecond)
	w := mirror.Watermark{Since: since, At: at, Mirrored: 42}
	got := mirror.WatermarkOf(w.Annotations())
	if !got.Since.Equal(since) || !got.At.Equal(at) || got.Mirrored != 42 {
		t.Fatalf("read back %+v, want %+v", got, w)
	}
	if a := (mirror.Watermark{Mirrored: 1}).Annotations(); a[keys.SyncedSince] != "" || a[keys.SyncedAt] != "" || a[keys.MirrorsBehind] != "" || a[keys.MirrorLag] != "" {
		t.Fatalf("zero times or lag written: %v", a)
	}
	// How far behind: read back to the millisecond; a count that is not positive reads as none.
	behind := mirror.Watermark{Mirrored: 5, Behind: 2, Lag: 25*time.Second + 1234567*time.Nanosecond}
	if got := mirror.WatermarkOf(behind.Annotations()); got.Behind != 2 || got.Lag != 25001*time.Millisecond {
		t.Fatalf("lag read back as %d behind by %s, want 2 by 25.001s", got.Behind, got.Lag)
	}
	if got := mirror.WatermarkOf(map[string]string{keys.MirrorsBehind: "0", keys.MirrorLag: "3s"}); got.Behind != 0 || got.Lag != 0 {
		t.Fatalf("no mirror behind read as %+v", got)
	}
	if got := mirror.WatermarkOf(map[string]string{keys.SyncedAt: "soon", keys.Mirrored: "many"}); !got.At.IsZero() || got.Mirrored != 0 {
		t.Fatalf("malformed fields read as %+v", got)
	}
	for _, n := range []string{"-3", "99999999999999999999", "2147483648"} {
		if got := mirror.WatermarkOf(map[string]string{keys.Mirrored: n}); got.Mirrored != 0 {
			t.Errorf("mirrored %q read as %d, want 0", n, got.Mirrored)
		}
	}
}

// TestCheck: the hub believes a mirror only where it lives (its cluster's namespace), when its
// labels claim that same cluster and its name is the one its origin's mirror has.
func TestCheck(t *testing.T) {
	spoke := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "api"}}
	good := func() *magosv1.Workspace {
		return &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{
			Namespace: mirror.Namespace("eu-1"), Name: mirror.Name("payments", "api"), Labels: mirror.Labels("eu-1", spoke)}}
	}
	cases := map[string]struct {
		edit func(*magosv1.Workspace)
		want string
	}{
		"genuine":           {func(*magosv1.Workspace) {}, ""},
		"not a mirror":      {func(m *magosv1.Workspace) { delete(m.Labels, keys.Mirror) }, "is not labelled"},
		"other namespace":   {func(m *magosv1.Workspace) { m.Namespace = mirror.Namespace("us-1") }, "is not in cluster eu-1's namespace"},
		"claims a cluster":  {func(m *magosv1.Workspace) { m.Labels[keys.Cluster] = "us-1" }, `claims cluster "us-1"`},
		"claims no cluster": {func(m *magosv1.Workspace) { delete(m.Labels, keys.Cluster) }, `claims cluster ""`},
		"other origin name": {func(m *magosv1.Workspace) { m.Labels[keys.OriginName] = "db" }, "claims origin payments/db"},
		"other origin ns":   {func(m *magosv1.Workspace) { m.Labels[keys.OriginNamespace] = "billing" }, "claims origin billing/api"},
		"no origin":         {func(m *magosv1.Workspace) { delete(m.Labels, keys.OriginNamespace) }, "names no valid origin"},
		"invalid origin":    {func(m *magosv1.Workspace) { m.Labels[keys.OriginName] = "A/B" }, "names no valid origin"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m := good()
			c.edit(m)
			err := mirror.Check("eu-1", m)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check refused a genuine mirror: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Check = %v, want an error containing %q", err, c.want)
			}
		})
	}
	if c, ok := mirror.ClusterOf(mirror.Namespace("eu-1")); !ok || c != "eu-1" {
		t.Errorf("ClusterOf(Namespace(eu-1)) = %q, %v", c, ok)
	}
	for _, ns := range []string{"payments", keys.ClusterNamespacePrefix} {
		if c, ok := mirror.ClusterOf(ns); ok {
			t.Errorf("ClusterOf(%q) = %q, want none", ns, c)
		}
	}
}
