package release

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// PackageChart packages the chart in dir into outDir as Helm's `helm package` does, with
// version set to the release's chart version (ChartVersion) and appVersion to the release
// version itself, which is also the images' tag the chart defaults to. It returns the file.
func PackageChart(dir, version, outDir string) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	ch.Metadata.Version = ChartVersion(version)
	ch.Metadata.AppVersion = version
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	return chartutil.Save(ch, outDir)
}
