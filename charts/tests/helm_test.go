package tests

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// helmClient runs Helm's own install, upgrade and uninstall (what the helm command runs) against
// one API server, with releases stored as Secrets in the release namespace like `helm` does.
type helmClient struct {
	t   *testing.T
	cfg *action.Configuration
}

func newHelmClient(t *testing.T, kubeconfig string) *helmClient {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	ns := namespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		t.Fatalf("helm: %v", err)
	}
	return &helmClient{t: t, cfg: cfg}
}

func loadChart(t *testing.T, name string) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// install is `helm install release chart -n magos-system` (no --wait: nothing runs the Pods).
func (h *helmClient) install(ctx context.Context, release string, ch *chart.Chart, values map[string]any) (*release.Release, error) {
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace, in.Timeout = release, namespace, time.Minute
	return in.RunWithContext(ctx, ch, values)
}

// upgrade is `helm upgrade release chart -n magos-system`.
func (h *helmClient) upgrade(ctx context.Context, release string, ch *chart.Chart, values map[string]any) (*release.Release, error) {
	up := action.NewUpgrade(h.cfg)
	up.Namespace, up.Timeout = namespace, time.Minute
	return up.RunWithContext(ctx, release, ch, values)
}

// uninstall is `helm uninstall release -n magos-system`; it returns what Helm kept.
func (h *helmClient) uninstall(release string) (string, error) {
	un := action.NewUninstall(h.cfg)
	un.Timeout = time.Minute
	res, err := un.Run(release)
	if err != nil {
		return "", err
	}
	return res.Info, nil
}
