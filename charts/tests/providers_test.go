package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/magosfleet/magos/pkg/runner"
)

// TestAgentProviderValues: runner.providers reaches the agent as --runner-provider-network-mirror
// and --runner-provider-volume (the volume source as JSON, decoded back to exactly the values'
// source), none by default; the agent built from this checkout accepts the rendered flags (its
// configuration validates: it stops only at the missing cluster). Bad values are refused at
// install: a URL that is not https://, a volume of two sources or a whole Volume (with a
// name), a volume in local mode.
func TestAgentProviderValues(t *testing.T) {
	args := func(values map[string]any) []string {
		values["clusterName"] = "eu-west-1"
		return as[appsv1.Deployment](t, render(t, "magos-agent", values)["Deployment/magos-agent"]).Spec.Template.Spec.Containers[0].Args
	}
	if got := args(map[string]any{}); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--runner-provider") }) {
		t.Errorf("default args %v name a provider mirror: want the runner image's only", got)
	}

	const url = "https://mirror.example/providers/"
	got := args(map[string]any{"runner": map[string]any{"providers": map[string]any{
		"networkMirrorURL": url,
		"volume":           map[string]any{"persistentVolumeClaim": map[string]any{"claimName": "providers", "readOnly": true}},
	}}})
	if !slices.Contains(got, "--runner-provider-network-mirror="+url) {
		t.Errorf("args %v lack --runner-provider-network-mirror=%s", got, url)
	}
	var volume *corev1.VolumeSource
	for _, a := range got {
		if raw, ok := strings.CutPrefix(a, "--runner-provider-volume="); ok {
			dec := json.NewDecoder(strings.NewReader(raw))
			dec.DisallowUnknownFields()
			volume = &corev1.VolumeSource{}
			if err := dec.Decode(volume); err != nil {
				t.Fatalf("--runner-provider-volume=%s: %v", raw, err)
			}
		}
	}
	want := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "providers", ReadOnly: true}}
	if volume == nil || !equality.Semantic.DeepEqual(*volume, want) {
		t.Errorf("provider volume %+v from args %v; want %+v", volume, got, want)
	}

	// The agent parses and validates the rendered flags before it reaches for its cluster.
	agent := filepath.Join(binaries(t), "magos-agent")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	out, err := runCommand(ctx, agent, append(got, "--kubeconfig="+missing), []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()})
	if err == nil || !strings.Contains(out, "reading kubeconfig "+missing) {
		t.Errorf("magos-agent %v: %v\n%s\nwant it to accept the flags and stop at the missing kubeconfig", got, err, out)
	}

	for name, tc := range map[string]struct {
		providers map[string]any
		mode      string
		want      []string
	}{
		"an http URL":          {providers: map[string]any{"networkMirrorURL": "http://mirror.example/"}, want: []string{"at '/runner/providers/networkMirrorURL'", "does not match pattern"}},
		"a URL with a user":    {providers: map[string]any{"networkMirrorURL": "https://user:pw@mirror.example/"}, want: []string{"at '/runner/providers/networkMirrorURL'", "does not match pattern"}},
		"two volume sources":   {providers: map[string]any{"volume": map[string]any{"emptyDir": map[string]any{}, "persistentVolumeClaim": map[string]any{"claimName": "p"}}}, want: []string{"at '/runner/providers/volume'", "maxProperties"}},
		"a whole Volume":       {providers: map[string]any{"volume": map[string]any{"name": "providers"}}, want: []string{"invalid propertyName 'name'", "'persistentVolumeClaim'"}},
		"a misspelt key":       {providers: map[string]any{"networkMirror": url}, want: []string{"at '/runner/providers'", "'networkMirror' not allowed"}},
		"a volume, local mode": {providers: map[string]any{"volume": map[string]any{"emptyDir": map[string]any{}}}, mode: "local", want: []string{"runner.providers.volume is mounted into run Jobs only"}},
	} {
		runnerValues := map[string]any{"providers": tc.providers}
		if tc.mode != "" {
			runnerValues["mode"] = tc.mode
		}
		_, err := tryRender("magos-agent", map[string]any{"clusterName": "eu-west-1", "runner": runnerValues})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v; want it to say %q", name, err, w)
			}
		}
	}
}

// TestProviderVolumeSchemaNamesEveryVolumeSource: the schema of runner.providers.volume lists
// exactly the sources of a Kubernetes volume (corev1.VolumeSource's fields), so that a source
// Kubernetes adds is not refused and a typo is.
func TestProviderVolumeSchemaNamesEveryVolumeSource(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "magos-agent", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Runner struct {
				Properties struct {
					Providers struct {
						Properties struct {
							Volume struct {
								PropertyNames struct {
									Enum []string `json:"enum"`
								} `json:"propertyNames"`
							} `json:"volume"`
						} `json:"properties"`
					} `json:"providers"`
				} `json:"properties"`
			} `json:"runner"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	var sources []string
	vs := reflect.TypeFor[corev1.VolumeSource]()
	for i := range vs.NumField() {
		name, _, _ := strings.Cut(vs.Field(i).Tag.Get("json"), ",")
		sources = append(sources, name)
	}
	got := schema.Properties.Runner.Properties.Providers.Properties.Volume.PropertyNames.Enum
	slices.Sort(sources)
	if !slices.Equal(slices.Sorted(slices.Values(got)), sources) {
		t.Errorf("runner.providers.volume names %v; want the volume sources of Kubernetes %v", got, sources)
	}
}

// TestRunnerImageCarriesTheProviderMirror: the runner target of the root Dockerfile copies the
// provider mirror to runner.ImageProviderMirror and names it in MAGOS_PROVIDER_MIRROR: the
// folder the agent's Jobs list after a provider volume of their own.
func TestRunnerImageCarriesTheProviderMirror(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stage := regexp.MustCompile(`(?ms)^FROM \S+ AS runner$(.*?)(^FROM |\z)`).FindSubmatch(raw)
	if stage == nil {
		t.Fatal("the Dockerfile has no runner target")
	}
	runnerStage := string(stage[1])
	if copyLine := "COPY providers/ " + runner.ImageProviderMirror + "/"; !strings.Contains(runnerStage, copyLine) {
		t.Errorf("the runner target lacks %q:\n%s", copyLine, runnerStage)
	}
	env := regexp.MustCompile(`(?m)^ENV .*\b` + runner.EnvProviderMirror + `=(\S+)`).FindStringSubmatch(runnerStage)
	if env == nil || env[1] != runner.ImageProviderMirror {
		t.Errorf("the runner target's %s = %v; want %s", runner.EnvProviderMirror, env, runner.ImageProviderMirror)
	}
}
