package mirror_test

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// FuzzMirrorReader: mirrors and heartbeat Leases are written by agents, with their own
// credentials, and read by the hub; no content may crash the hub or make it believe a mirror
// speaks for another cluster. Whatever the Workspace JSON and the Lease annotations:
//   - OriginOf and decision.FromWorkspace key the Workspace by the cluster the hub read it in;
//   - FromWorkspace hides the mirror bookkeeping labels from selectors;
//   - a mirror that Check accepts lives in its cluster's namespace and names a valid origin
//     whose mirror name is its own;
//   - WatermarkOf never fails, and a watermark read back from what it writes is unchanged.
func FuzzMirrorReader(f *testing.F) {
	good := mirror.Labels("eu-west-1", &magosv1.Workspace{})
	good[keys.OriginNamespace], good[keys.OriginName] = "payments", "network"
	ws := magosv1.Workspace{}
	ws.Namespace, ws.Name, ws.Labels = mirror.Namespace("eu-west-1"), mirror.Name("payments", "network"), good
	ws.Annotations = map[string]string{keys.DetectedAt: "2026-01-02T03:04:05Z", keys.ExecutionAllowed: "true", keys.GrantedRun: "r1"}
	ws.Status.Origin = &magosv1.WorkspaceOrigin{Generation: 3}
	valid, err := json.Marshal(ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("eu-west-1", valid, "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.123456789Z", "12")
	f.Add("us-east-1", valid, "", "", "")
	f.Add("eu-west-1", []byte(`{"metadata":{"namespace":"magos-cluster-eu-west-1","name":"x","labels":{"magosproject.io/mirror":"true","magosproject.io/cluster":"us-east-1"}}}`), "yesterday", "2026-13-40T99:99:99Z", "-1")
	f.Add("", []byte(`{"metadata":{"labels":{"magosproject.io/mirror":"true"}},"status":{"origin":null,"resourceChanges":{"add":-1}}}`), "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "99999999999999999999")
	f.Add("a", []byte(`null`), "", "", "")
	f.Fuzz(func(t *testing.T, cluster string, raw []byte, since, at, mirrored string) {
		w := mirror.WatermarkOf(map[string]string{keys.SyncedSince: since, keys.SyncedAt: at, keys.Mirrored: mirrored})
		if inYears(w.Since) && inYears(w.At) {
			w.Since = w.Since.UTC().Truncate(time.Second)
			w.At = w.At.UTC()
			if again := mirror.WatermarkOf(w.Annotations()); !again.Since.Equal(w.Since) || !again.At.Equal(w.At) || again.Mirrored != w.Mirrored {
				t.Errorf("watermark %+v reads back as %+v", w, again)
			}
		}

		var ws magosv1.Workspace
		if err := json.Unmarshal(raw, &ws); err != nil {
			return
		}
		labels := maps.Clone(ws.Labels)
		o := mirror.OriginOf(cluster, &ws)
		if o.Cluster != cluster {
			t.Errorf("OriginOf in cluster %q says cluster %q", cluster, o.Cluster)
		}
		d := decision.FromWorkspace(cluster, &ws)
		if d.Key != (decision.Key{Cluster: o.Cluster, Namespace: o.Namespace, Name: o.Name}) || d.Generation != o.Generation {
			t.Errorf("FromWorkspace key %+v generation %d, want the origin %+v", d.Key, d.Generation, o)
		}
		if mirror.IsMirror(&ws) {
			for _, k := range []string{keys.Mirror, keys.Cluster, keys.OriginNamespace, keys.OriginName} {
				if _, ok := d.Labels[k]; ok {
					t.Errorf("FromWorkspace kept the mirror label %s", k)
				}
			}
		}
		if !maps.Equal(labels, ws.Labels) {
			t.Errorf("reading the Workspace changed its labels: %v, was %v", ws.Labels, labels)
		}
		if err := mirror.Check(cluster, &ws); err == nil {
			if c, ok := mirror.ClusterOf(ws.Namespace); !ok || c != cluster {
				t.Errorf("Check accepted a mirror in namespace %q for cluster %q", ws.Namespace, cluster)
			}
			if len(validation.IsDNS1123Label(o.Namespace)) > 0 || len(validation.IsDNS1123Subdomain(o.Name)) > 0 || mirror.Name(o.Namespace, o.Name) != ws.Name {
				t.Errorf("Check accepted mirror %s/%s with origin %+v", ws.Namespace, ws.Name, o)
			}
		}
	})
}

// inYears reports whether t, in UTC, has a four-digit year, which RFC 3339 can write.
func inYears(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}
