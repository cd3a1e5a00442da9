package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// imageBinaries returns the binaries each target of the root Dockerfile copies, by target
// (hub, agent, runner), as their paths in the image.
func imageBinaries(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	stage := ""
	from := regexp.MustCompile(`^FROM \S+ AS (\S+)$`)
	for _, line := range strings.Split(string(raw), "\n") {
		if m := from.FindStringSubmatch(line); m != nil {
			stage = m[1]
			continue
		}
		if fields := strings.Fields(line); len(fields) > 2 && fields[0] == "COPY" && strings.HasPrefix(fields[1], "bin/") {
			dest := fields[len(fields)-1]
			for _, src := range fields[1 : len(fields)-1] {
				out[stage] = append(out[stage], filepath.Join(dest, filepath.Base(src)))
			}
		}
	}
	return out
}

// TestHelmTestPods checks the charts' `helm test` Pods: a test hook, the chart's own image and
// pull policy, a command the image holds, the check subcommand, non-root with a read-only root
// filesystem, and labels no Service or PodDisruptionBudget of the chart selects.
func TestHelmTestPods(t *testing.T) {
	binaries := imageBinaries(t)
	cases := []struct {
		chart, target string
		values        map[string]any
		wantArgs      []string
		wantMount     string
	}{
		{"magos-hub", "hub", map[string]any{"leaderElection": map[string]any{"enabled": false}, "replicaCount": 1},
			[]string{"check", "--config=/etc/magos/config.yaml", "--leader-elect=false", "--timeout=2m"}, "/etc/magos"},
		{"magos-agent", "agent", map[string]any{"clusterName": "eu-west-1", "hub": map[string]any{"kubeconfigSecret": map[string]any{"name": "hub-kc", "key": "kc"}}},
			[]string{"check", "--cluster-name=eu-west-1", "--hub-kubeconfig=/etc/magos/hub/kc", "--hub-token-secret=magos-agent-hub-token",
				"--hub-token-secret-namespace=" + namespace, "--leader-elect=true", "--timeout=2m"}, "/etc/magos/hub"},
		{"magos-agent", "agent", map[string]any{"clusterName": "local"},
			[]string{"check", "--cluster-name=local", "--leader-elect=true", "--timeout=2m"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.chart+" "+strings.Join(tc.wantArgs[1:3], " "), func(t *testing.T) {
			tc.values["image"] = map[string]any{"pullPolicy": "Always"}
			objs := render(t, tc.chart, tc.values)
			pod := as[corev1.Pod](t, objs["Pod/"+tc.chart+"-test"])
			if pod.Annotations["helm.sh/hook"] != "test" {
				t.Errorf("annotations %v: not a helm test hook", pod.Annotations)
			}
			d := as[appsv1.Deployment](t, objs["Deployment/"+tc.chart])
			c := pod.Spec.Containers[0]
			if c.Image != d.Spec.Template.Spec.Containers[0].Image || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %s (%s), want the chart's %s with image.pullPolicy Always", c.Image, c.ImagePullPolicy, d.Spec.Template.Spec.Containers[0].Image)
			}
			if len(c.Command) != 1 || !slices.Contains(binaries[tc.target], c.Command[0]) {
				t.Errorf("command %v: the %s image holds %v", c.Command, tc.target, binaries[tc.target])
			}
			if !slices.Equal(c.Args, tc.wantArgs) {
				t.Errorf("args %v, want %v", c.Args, tc.wantArgs)
			}
			if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ServiceAccountName != tc.chart {
				t.Errorf("restartPolicy %s, serviceAccountName %s", pod.Spec.RestartPolicy, pod.Spec.ServiceAccountName)
			}
			assertPodHardened(t, pod.Name, &pod.Spec)
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("resources %v", c.Resources)
			}
			var mounts []string
			for _, m := range c.VolumeMounts {
				mounts = append(mounts, m.MountPath)
			}
			if tc.wantMount != "" && !slices.Contains(mounts, tc.wantMount) || tc.wantMount == "" && len(mounts) > 0 {
				t.Errorf("mounts %v, want %q", mounts, tc.wantMount)
			}
			if labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)) {
				t.Errorf("the test Pod's labels %v match the Deployment's selector (its Service and PDB would count it)", pod.Labels)
			}
		})
	}
}

// TestDisruptionAndLeaderElection checks the PodDisruptionBudgets and that more than one replica
// is refused without leader election.
func TestDisruptionAndLeaderElection(t *testing.T) {
	for _, chartName := range []string{"magos-hub", "magos-agent"} {
		t.Run(chartName, func(t *testing.T) {
			values := func(extra map[string]any) map[string]any {
				v := map[string]any{}
				if chartName == "magos-agent" {
					v["clusterName"] = "x"
				}
				for k, e := range extra {
					v[k] = e
				}
				return v
			}
			objs := render(t, chartName, values(nil))
			pdb := as[policyv1.PodDisruptionBudget](t, objs["PodDisruptionBudget/"+chartName])
			d := as[appsv1.Deployment](t, objs["Deployment/"+chartName])
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
				!labels.Equals(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("PDB %+v, want maxUnavailable 1 over the Deployment's Pods", pdb.Spec)
			}
			if *d.Spec.Replicas != 2 || !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
				t.Errorf("replicas %d, args %v: want two replicas electing a leader", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Args)
			}
			c := d.Spec.Template.Spec.Containers[0]
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Error("no probes")
			}
			assertPodHardened(t, d.Name, &d.Spec.Template.Spec)
			if off := render(t, chartName, values(map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}})); off["PodDisruptionBudget/"+chartName] != nil {
				t.Error("PDB rendered although disabled")
			}
			three := values(map[string]any{"replicaCount": 3})
			d = as[appsv1.Deployment](t, render(t, chartName, three)["Deployment/"+chartName])
			if *d.Spec.Replicas != 3 {
				t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
			}
			_, err := tryRender(chartName, values(map[string]any{"replicaCount": 2, "leaderElection": map[string]any{"enabled": false}}))
			if err == nil || !strings.Contains(err.Error(), "replicaCount is 2 but leaderElection.enabled is false") {
				t.Errorf("two replicas without leader election: %v, want refused", err)
			}
			if _, err := tryRender(chartName, values(map[string]any{"replicaCount": 1, "leaderElection": map[string]any{"enabled": false}})); err != nil {
				t.Errorf("one replica without leader election: %v", err)
			}
		})
	}
}

// TestNotes checks that both charts tell the next step, and that the agent's notes follow its
// hub setting.
func TestNotes(t *testing.T) {
	hub := renderNotes(t, "magos-hub", nil)
	for _, want := range []string{"helm test magos-hub -n magos-system", "magosctl agent-kubeconfig NAME", "--set crds.install=false"} {
		if !strings.Contains(hub, want) {
			t.Errorf("hub NOTES lack %q:\n%s", want, hub)
		}
	}
	withHub := renderNotes(t, "magos-agent", map[string]any{"clusterName": "eu-west-1", "workspaceNamespaces": []any{"payments", "cdn"},
		"hub": map[string]any{"kubeconfigSecret": map[string]any{"name": "hub-kc"}}})
	for _, want := range []string{"for cluster eu-west-1", "Workspaces can run in: payments, cdn", "helm test magos-agent -n magos-system",
		"its heartbeat on the hub is live", "magosctl --context HUB clusters"} {
		if !strings.Contains(withHub, want) {
			t.Errorf("agent NOTES lack %q:\n%s", want, withHub)
		}
	}
	alone := renderNotes(t, "magos-agent", map[string]any{"clusterName": "local"})
	if !strings.Contains(alone, "No hub Secret is set") || !strings.Contains(alone, "magosctl agent-kubeconfig local") {
		t.Errorf("agent NOTES without a hub:\n%s", alone)
	}
}

func assertPodHardened(t *testing.T, name string, spec *corev1.PodSpec) {
	t.Helper()
	ps := spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil {
		t.Errorf("%s: pod security context %+v", name, ps)
	}
	for _, c := range spec.Containers {
		cs := c.SecurityContext
		if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
			cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.Capabilities == nil ||
			!slices.Contains(cs.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s security context %+v", name, c.Name, cs)
		}
		if c.Resources.Requests == nil {
			t.Errorf("%s: container %s has no resource requests", name, c.Name)
		}
	}
}
