package mirror_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
)

// The label keys and namespace prefix are spelled out here, not taken from pkg/keys or
// pkg/mirror: the table is the definition the code is checked against.
const (
	mirrorKey     = "magosproject.io/mirror"
	clusterKey    = "magosproject.io/cluster"
	originNSKey   = "magosproject.io/origin-namespace"
	originNameKey = "magosproject.io/origin-name"
	euNamespace   = "magos-cluster-eu"
)

// absent marks a label left off.
const absent = "\x00absent"

// identityCase is one Workspace as the hub reads it, and who it is.
type identityCase struct {
	name string
	// namespace and wsName are where the Workspace lives on the hub.
	namespace, wsName string
	// mirror, cluster, originNS, originName are its labels (absent: none).
	mirror, cluster, originNS, originName string

	want       mirror.Identity
	wantErr    bool
	checkIn    string // a cluster Check must accept it in ("": none)
	notChecked string // a cluster Check must refuse it in
}

// payAPI is the mirror name of the spoke Workspace payments/api (mirror.Name).
var payAPI = mirror.Name("payments", "api")

func identityCases() []identityCase {
	mirrorOf := func(name, value string, want mirror.Identity, wantErr bool) identityCase {
		return identityCase{name: name, namespace: euNamespace, wsName: payAPI, mirror: value, cluster: "eu", originNS: "payments", originName: "api", want: want, wantErr: wantErr}
	}
	spoke := func(ns string) mirror.Identity { return mirror.Identity{Namespace: ns, Name: payAPI} }
	good := mirror.Identity{Mirror: true, Cluster: "eu", Namespace: "payments", Name: "api"}
	cases := []identityCase{
		// The mirror label's value: only "true" makes a mirror.
		mirrorOf("true", "true", good, false),
		mirrorOf("false", "false", mirror.Identity{Cluster: "eu", Namespace: euNamespace, Name: payAPI}, false),
		mirrorOf("empty", "", mirror.Identity{Cluster: "eu", Namespace: euNamespace, Name: payAPI}, false),
		mirrorOf("True", "True", mirror.Identity{Cluster: "eu", Namespace: euNamespace, Name: payAPI}, false),
		mirrorOf("absent", absent, mirror.Identity{Cluster: "eu", Namespace: euNamespace, Name: payAPI}, false),
		// A spoke's own Workspaces, read directly.
		{name: "spoke, no labels", namespace: "payments", wsName: payAPI, mirror: absent, cluster: absent, originNS: absent, originName: absent, want: spoke("payments")},
		{name: "spoke labelled false", namespace: "payments", wsName: payAPI, mirror: "false", cluster: absent, originNS: absent, originName: absent, want: spoke("payments")},
		// Namespace forms: the cluster is the namespace's, never the label's.
		{name: "mirror outside cluster namespaces", namespace: "payments", wsName: payAPI, mirror: "true", cluster: "eu", originNS: "payments", originName: "api",
			want: mirror.Identity{Mirror: true, Namespace: "payments", Name: "api"}, wantErr: true},
		{name: "mirror in the bare prefix", namespace: "magos-cluster-", wsName: payAPI, mirror: "true", cluster: "", originNS: "payments", originName: "api",
			want: mirror.Identity{Mirror: true, Namespace: "payments", Name: "api"}, wantErr: true},
		{name: "prefix not at the start", namespace: "x-magos-cluster-eu", wsName: payAPI, mirror: "true", cluster: "eu", originNS: "payments", originName: "api",
			want: mirror.Identity{Mirror: true, Namespace: "payments", Name: "api"}, wantErr: true},
		{name: "label claims another cluster", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "us", originNS: "payments", originName: "api",
			want: good, wantErr: true},
		{name: "no cluster label", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: absent, originNS: "payments", originName: "api",
			want: good, wantErr: true},
		{name: "dotted cluster", namespace: "magos-cluster-eu.west", wsName: payAPI, mirror: "true", cluster: "eu.west", originNS: "payments", originName: "api",
			want: mirror.Identity{Mirror: true, Cluster: "eu.west", Namespace: "payments", Name: "api"}},
		// Origin labels: present, missing, malformed, or naming another Workspace's mirror.
		{name: "no origin namespace", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "eu", originNS: absent, originName: "api",
			want: mirror.Identity{Mirror: true, Cluster: "eu", Name: "api"}, wantErr: true},
		{name: "no origin name", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "eu", originNS: "payments", originName: absent,
			want: mirror.Identity{Mirror: true, Cluster: "eu", Namespace: "payments"}, wantErr: true},
		{name: "empty origin", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "eu", originNS: "", originName: "",
			want: mirror.Identity{Mirror: true, Cluster: "eu"}, wantErr: true},
		{name: "malformed origin namespace", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "eu", originNS: "Payments", originName: "api",
			want: mirror.Identity{Mirror: true, Cluster: "eu", Namespace: "Payments", Name: "api"}, wantErr: true},
		{name: "malformed origin name", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "eu", originNS: "payments", originName: "-api",
			want: mirror.Identity{Mirror: true, Cluster: "eu", Namespace: "payments", Name: "-api"}, wantErr: true},
		{name: "origin of another mirror's name", namespace: euNamespace, wsName: payAPI, mirror: "true", cluster: "eu", originNS: "payments", originName: "web",
			want: mirror.Identity{Mirror: true, Cluster: "eu", Namespace: "payments", Name: "web"}, wantErr: true},
	}
	for i := range cases {
		c := &cases[i]
		if c.want.Mirror && !c.wantErr {
			c.checkIn = c.want.Cluster
		}
		c.notChecked = "us"
	}
	return cases
}

func (c identityCase) workspace() *magosv1.Workspace {
	l := map[string]string{"env": "prod"}
	for k, v := range map[string]string{mirrorKey: c.mirror, clusterKey: c.cluster, originNSKey: c.originNS, originNameKey: c.originName} {
		if v != absent {
			l[k] = v
		}
	}
	return &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.wsName, Labels: l}}
}

// TestIdentity is the definition of who a Workspace read on the hub is: a mirror only when
// labelled "true"; its cluster only the namespace it lives in; its origin its origin labels,
// believed (Verify, Check) only when they are valid and name the mirror's own name.
func TestIdentity(t *testing.T) {
	for _, c := range identityCases() {
		t.Run(c.name, func(t *testing.T) {
			ws := c.workspace()
			if id := mirror.IdentityOf(ws); id != c.want {
				t.Errorf("IdentityOf = %+v, want %+v", id, c.want)
			}
			if id, err := mirror.Verify(ws); id != c.want || (err != nil) != c.wantErr {
				t.Errorf("Verify = %+v, %v; want %+v, error %v", id, err, c.want, c.wantErr)
			}
			if got := mirror.IsMirror(ws); got != c.want.Mirror {
				t.Errorf("IsMirror = %v, want %v", got, c.want.Mirror)
			}
			if c.checkIn != "" {
				if err := mirror.Check(c.checkIn, ws); err != nil {
					t.Errorf("Check(%q) = %v, want nil", c.checkIn, err)
				}
			}
			// Check accepts a Workspace only in its own cluster and only as IdentityOf does.
			for _, cl := range []string{c.notChecked, "eu", "", c.want.Cluster} {
				accepted := mirror.Check(cl, ws) == nil
				if want := c.want.Mirror && !c.wantErr && cl == c.want.Cluster && cl != ""; accepted != want {
					t.Errorf("Check(%q) accepted = %v, want %v", cl, accepted, want)
				}
			}
			o := mirror.OriginOf("eu", ws)
			if o.Cluster != "eu" || o.Namespace != c.want.Namespace || o.Name != c.want.Name {
				t.Errorf("OriginOf = %+v, want the identity's origin %s/%s", o, c.want.Namespace, c.want.Name)
			}
		})
	}
}

// TestSelectorsAgreeWithIsMirror: the label selectors that caches and lists use select exactly
// the Workspaces IsMirror and IdentityOf say they do, on every row of the definition's table.
func TestSelectorsAgreeWithIsMirror(t *testing.T) {
	for _, c := range identityCases() {
		t.Run(c.name, func(t *testing.T) {
			ws := c.workspace()
			set := labels.Set(ws.Labels)
			is := mirror.IsMirror(ws)
			if got := mirror.OnlyMirrors().Matches(set); got != is {
				t.Errorf("OnlyMirrors matches %v, IsMirror %v", got, is)
			}
			if got := mirror.NotMirrors().Matches(set); got != !is {
				t.Errorf("NotMirrors matches %v, IsMirror %v", got, is)
			}
			// The selector survives its string form (what goes to the API server).
			for _, sel := range []labels.Selector{mirror.OnlyMirrors(), mirror.NotMirrors()} {
				again, err := labels.Parse(sel.String())
				if err != nil || again.Matches(set) != sel.Matches(set) {
					t.Errorf("selector %q parsed back (%v) matches differently", sel, err)
				}
			}
			id := mirror.IdentityOf(ws)
			for _, origin := range [][2]string{{"payments", "api"}, {id.Namespace, id.Name}} {
				sel, err := mirror.MirrorsOf(origin[0], origin[1])
				if err != nil {
					if validation.IsValidLabelValue(origin[0]) == nil && validation.IsValidLabelValue(origin[1]) == nil {
						t.Errorf("MirrorsOf(%v): %v", origin, err)
					}
					continue
				}
				want := id.Mirror && id.Namespace == origin[0] && id.Name == origin[1] &&
					c.originNS != absent && c.originName != absent
				if got := sel.Matches(set); got != want {
					t.Errorf("MirrorsOf(%v) matches %v, want %v (identity %+v)", origin, got, want, id)
				}
			}
		})
	}
	if _, err := mirror.MirrorsOf("payments", "not/a-label-value"); err == nil {
		t.Error("MirrorsOf accepted a name that is no label value")
	}
}
