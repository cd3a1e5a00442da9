package runoutput_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// planLines renders n resources as tofu prints a plan.
func planLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  # aws_route53_record.edge[%d] will be created\n  + resource \"aws_route53_record\" \"edge\" {\n      + name    = \"edge-%d.example.com\"\n      + ttl     = 300\n      + records = (known after apply)\n    }\n\n", i, i)
	}
	return b.String()
}

func TestRoundTrip(t *testing.T) {
	out, err := runner.ReadOutput(strings.NewReader("init\n"+runner.PlanTextBegins+"\n"+planLines(3)+runner.PlanTextEnds+"\n"), runner.OutputLimits{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := runoutput.New("ns", "edge", "20261205T010203-abcdef01", runner.OperationPlan, out, "")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "edge-20261205t010203-abcdef01-plan" || s.Labels["magosproject.io/run-id"] != "20261205T010203-abcdef01" || !*s.Immutable {
		t.Fatalf("secret %s labels %v", s.Name, s.Labels)
	}
	got, err := runoutput.Read(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.PlanText != out.PlanText || got.Log != out.Log || got.OutputBytes != out.Bytes || got.PlanTruncated || got.LogTruncated {
		t.Fatalf("read %+v, want what was written", got)
	}
	s.Type = "Opaque"
	if _, err := runoutput.Read(s); err == nil {
		t.Fatal("an Opaque Secret was read as an output")
	}
	u, _ := runoutput.New("ns", "edge", "r", runner.OperationApply, runner.Output{}, "the Pod is gone")
	if got, err := runoutput.Read(u); err != nil || got.Unavailable != "the Pod is gone" || len(u.Data) != 0 {
		t.Fatalf("unavailable output read as %+v, %v", got, err)
	}
}

// BenchmarkStoredBytes reports the bytes an output Secret stores (its data, gzipped) for a
// typical plan, a plan at the caps, and incompressible output at the caps (the worst case, which
// must stay well under the 1 MiB a Secret may hold).
func BenchmarkStoredBytes(b *testing.B) {
	random := func(n int) string {
		raw := make([]byte, n)
		_, _ = rand.Read(raw)
		lines := base64.StdEncoding.EncodeToString(raw)
		var sb strings.Builder
		for len(lines) > 100 {
			sb.WriteString(lines[:100] + "\n")
			lines = lines[100:]
		}
		return sb.String()
	}
	for _, tc := range []struct {
		name      string
		plan, log string
	}{
		{"typical-20-resources", planLines(20), strings.Repeat("Initializing the backend...\n", 30)},
		{"capped-5000-resources", planLines(5000), planLines(5000)},
		{"capped-incompressible", random(1 << 20), random(1 << 20)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := tc.log + runner.PlanTextBegins + "\n" + tc.plan + runner.PlanTextEnds + "\n"
			var stored int
			for b.Loop() {
				out, err := runner.ReadOutput(strings.NewReader(in), runner.OutputLimits{})
				if err != nil {
					b.Fatal(err)
				}
				s, err := runoutput.New("ns", "edge", "r", runner.OperationPlan, out, "")
				if err != nil {
					b.Fatal(err)
				}
				stored = 0
				for _, v := range s.Data {
					stored += len(v)
				}
			}
			b.ReportMetric(float64(len(in)), "output-bytes")
			b.ReportMetric(float64(stored), "stored-bytes")
		})
	}
}

// TestCopy: the copy for a mirror reads back as the original, under the mirror's name and labels,
// with its owner; what is not an output Secret is refused.
func TestCopy(t *testing.T) {
	out, err := runner.ReadOutput(strings.NewReader("init\n"+runner.PlanTextBegins+"\n"+planLines(2)+runner.PlanTextEnds+"\n"), runner.OutputLimits{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := runoutput.New("ns", "edge", "20261205T010203-abcdef01", runner.OperationPlan, out, "")
	if err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "magosproject.io/v1alpha1", Kind: "Workspace", Name: "ns-edge-1a2b3c4d", UID: "u-1"}
	c, err := runoutput.Copy(s, "magos-cluster-east", "ns-edge-1a2b3c4d", owner)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "magos-cluster-east" || c.Name != "ns-edge-1a2b3c4d-20261205t010203-abcdef01-plan" ||
		c.Labels["magosproject.io/workspace"] != "ns-edge-1a2b3c4d" || c.Labels["magosproject.io/run-id"] != "20261205T010203-abcdef01" ||
		len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != "u-1" || !*c.Immutable {
		t.Fatalf("copy %s/%s labels %v owners %v", c.Namespace, c.Name, c.Labels, c.OwnerReferences)
	}
	got, err := runoutput.Read(c)
	if err != nil {
		t.Fatal(err)
	}
	if got.PlanText != out.PlanText || got.Log != out.Log || got.OutputBytes != out.Bytes {
		t.Fatalf("the copy reads %+v, want what the original holds", got)
	}
	c.Data["log.gz"][0] ^= 0xff // the copy shares no bytes with the original
	if again, err := runoutput.Read(s); err != nil || again.Log != out.Log {
		t.Fatalf("changing the copy changed the original: %v", err)
	}
	s.Type = corev1.SecretTypeOpaque
	if _, err := runoutput.Copy(s, "magos-cluster-east", "x", owner); err == nil {
		t.Fatal("an Opaque Secret was copied as run output")
	}
}
