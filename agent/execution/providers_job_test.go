package execution_test

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
)

// TestJobProviderMirror: by default a run's Job names no provider source (the runner image's
// MAGOS_PROVIDER_MIRROR applies) and mounts no provider volume; with JobOptions.ProviderVolume
// and ProviderNetworkMirror, the Job stored on the API server mounts the volume read-only at
// ProviderMirrorMountPath, lists that folder before the image's mirror, and names the network
// mirror. Either way Kubernetes providers default to the Pod's ServiceAccount
// (KUBE_LOAD_CONFIG_FILE=false).
func TestJobProviderMirror(t *testing.T) {
	t.Parallel()
	const ns = "providers"
	c, cl, ws := startCluster(t, localcluster.Options{NoHub: true, Spokes: []string{ns}}, ns)
	ctx := context.Background()
	volume := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "provider-mirror"}}
	const url = "https://mirror.example/providers/"
	for i, tt := range []struct {
		name string
		opts execution.JobOptions
		// env are the provider entries the runner container must have (absent: "").
		mirror, network string
		volume          *corev1.VolumeSource
	}{
		{name: "the image's mirror only", opts: execution.JobOptions{Image: "runner"}},
		{name: "a volume and a network mirror", opts: execution.JobOptions{Image: "runner", ProviderVolume: &volume, ProviderNetworkMirror: url},
			mirror: execution.ProviderMirrorMountPath + ":" + runner.ImageProviderMirror, network: url, volume: &volume},
	} {
		t.Run(tt.name, func(t *testing.T) {
			launcher, err := execution.NewJobLauncher(cl, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			run := &execution.Run{
				Workspace: ws,
				Spec: runner.Spec{Operation: runner.OperationPlan, RunID: "20260101T000000-0000cafe" + string(rune('a'+i)),
					Namespace: ns, Name: ws.Name, Revision: strings.Repeat("c", 40)},
			}
			if err := launcher.Start(ctx, run); err != nil {
				t.Fatal(err)
			}
			job := &batchv1.Job{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: execution.JobName(ws.Name, runner.OperationPlan, run.Spec.RunID)}, job); err != nil {
				t.Fatalf("the Job: %v", err)
			}
			pod := job.Spec.Template.Spec
			env := map[string]string{}
			for _, e := range pod.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if env[runner.EnvProviderMirror] != tt.mirror || env[runner.EnvProviderNetworkMirror] != tt.network {
				t.Errorf("%s=%q %s=%q; want %q and %q", runner.EnvProviderMirror, env[runner.EnvProviderMirror],
					runner.EnvProviderNetworkMirror, env[runner.EnvProviderNetworkMirror], tt.mirror, tt.network)
			}
			if env[runner.EnvKubeLoadConfigFile] != "false" {
				t.Errorf("%s=%q; want false (Kubernetes providers use the Pod's ServiceAccount)", runner.EnvKubeLoadConfigFile, env[runner.EnvKubeLoadConfigFile])
			}
			var got *corev1.VolumeSource
			for _, v := range pod.Volumes {
				if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == volume.PersistentVolumeClaim.ClaimName {
					got = &v.VolumeSource
					mounted := false
					for _, m := range pod.Containers[0].VolumeMounts {
						if m.Name == v.Name {
							mounted = m.MountPath == execution.ProviderMirrorMountPath && m.ReadOnly
						}
					}
					if !mounted {
						t.Errorf("volume %s mounts %+v; want read-only at %s", v.Name, pod.Containers[0].VolumeMounts, execution.ProviderMirrorMountPath)
					}
				}
			}
			if (got == nil) != (tt.volume == nil) || (got != nil && !equality.Semantic.DeepEqual(*got, *tt.volume)) {
				t.Errorf("provider volume %+v; want %+v", got, tt.volume)
			}
		})
	}
}

// TestParseProviderVolume: the agent's --runner-provider-volume is one Kubernetes volume source
// as JSON; anything else is refused, saying why.
func TestParseProviderVolume(t *testing.T) {
	for _, tt := range []struct {
		raw, want, err string
	}{
		{raw: `{"persistentVolumeClaim":{"claimName":"providers","readOnly":true}}`, want: "persistentVolumeClaim"},
		{raw: `{"image":{"reference":"registry.example/magos-providers:1","pullPolicy":"IfNotPresent"}}`, want: "image"},
		{raw: `{"nfs":{"server":"nfs.example","path":"/providers"}}`, want: "nfs"},
		{raw: ``, err: "not a volume source"},
		{raw: `[]`, err: "not a volume source"},
		{raw: `{"pvc":{"claimName":"providers"}}`, err: `unknown field "pvc"`},
		{raw: `{}`, err: "0 volume sources set (): want exactly one"},
		{raw: `{"emptyDir":{},"persistentVolumeClaim":{"claimName":"p"}}`, err: "2 volume sources set (emptyDir, persistentVolumeClaim): want exactly one"},
		{raw: `{"emptyDir":{}} {"emptyDir":{}}`, err: "more than one JSON value"},
	} {
		vs, err := execution.ParseProviderVolume(tt.raw)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseProviderVolume(%s) = %v; want an error containing %q", tt.raw, err, tt.err)
			}
		case err != nil:
			t.Errorf("ParseProviderVolume(%s): %v", tt.raw, err)
		default:
			if set := setSources(vs); set != tt.want {
				t.Errorf("ParseProviderVolume(%s) sets %s; want %s", tt.raw, set, tt.want)
			}
		}
	}
}

// setSources names the sources a volume source sets, among those TestParseProviderVolume uses.
func setSources(vs *corev1.VolumeSource) string {
	var set []string
	if vs.PersistentVolumeClaim != nil {
		set = append(set, "persistentVolumeClaim")
	}
	if vs.Image != nil {
		set = append(set, "image")
	}
	if vs.NFS != nil {
		set = append(set, "nfs")
	}
	if vs.EmptyDir != nil {
		set = append(set, "emptyDir")
	}
	return strings.Join(set, ",")
}
