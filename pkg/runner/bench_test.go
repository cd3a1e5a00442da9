package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/pkg/gitrepo/gitrepotest"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// BenchmarkPlanApply measures one plan+apply cycle of a trivial module (one terraform_data whose
// input changes every cycle, so every apply changes something): clone, init, plan, show -json,
// then clone, init, apply. It reports cycles per minute, with local state and with the
// kubernetes backend on a real API server.
func BenchmarkPlanApply(b *testing.B) {
	tofuPath := tofu(b)
	repo := gitrepotest.New(b)
	sha := repo.Commit(b, "module", map[string]string{"main.tf": module})
	ctx := log.IntoContext(context.Background(), logr.Discard())

	fleet := testenv.Start(b, localcluster.Options{NoHub: true, Spokes: []string{"spoke"}})
	spoke := fleet.Spokes["spoke"]
	if err := spoke.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		b.Fatalf("creating namespace: %v", err)
	}

	backends := []struct {
		name    string
		backend func(dir string) runner.Backend
	}{
		{name: "local", backend: func(dir string) runner.Backend {
			return runner.Backend{LocalPath: filepath.Join(dir, "terraform.tfstate")}
		}},
		{name: "kubernetes", backend: func(string) runner.Backend {
			return runner.Backend{Kubernetes: &runner.KubernetesBackend{Namespace: "bench", SecretSuffix: "bench", ConfigPath: spoke.Kubeconfig}}
		}},
	}
	for _, bb := range backends {
		b.Run(bb.name, func(b *testing.B) {
			dir := b.TempDir()
			spec := runner.Spec{
				RunID: "bench", Namespace: "bench", Name: "bench",
				RepoURL: repo.URL(), Revision: sha, Path: ".",
				Binary: runner.BinaryTofu, BinaryPath: tofuPath,
				PlanFile: filepath.Join(dir, "bench.tfplan"),
				Backend:  bb.backend(dir),
			}
			i := 0
			for b.Loop() {
				i++
				opts := runner.Options{Env: append(os.Environ(), fmt.Sprintf("TF_VAR_input=v%d", i))}
				spec.Operation = runner.OperationPlan
				if res := runner.Run(ctx, spec, opts); res.Outcome != runner.OutcomeSucceeded || !res.HasChanges {
					b.Fatalf("plan %d: %+v", i, res)
				}
				spec.Operation = runner.OperationApply
				if res := runner.Run(ctx, spec, opts); res.Outcome != runner.OutcomeSucceeded {
					b.Fatalf("apply %d: %+v", i, res)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Minutes(), "runs/min")
		})
	}
}
