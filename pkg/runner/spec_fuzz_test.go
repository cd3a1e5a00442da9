package runner_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/runner"
)

// FuzzDecodeSpec: the run spec (MAGOS_RUN_SPEC) is input to the runner; no value may crash it.
// DecodeSpec runs nothing, so no input can run tofu here. Whatever the bytes, a spec it accepts
// has what the runner relies on: a known operation, a commit SHA, a module path and tfvars path
// that stay inside the checkout, a known binary, an absolute plan file for plan and apply, and
// at most one backend, each usable; and it survives encoding and decoding unchanged.
func FuzzDecodeSpec(f *testing.F) {
	sha := strings.Repeat("a", 40)
	for _, seed := range []string{
		"",
		"{}",
		"null",
		`{"operation":"plan","runID":"r1","namespace":"team","name":"network","repoURL":"file:///repo","revision":"` + sha + `","path":".","binary":"tofu","planFile":"/data/r1.tfplan","backend":{"kubernetes":{"namespace":"team","secretSuffix":"network"}}}`,
		`{"operation":"apply","repoURL":"https://git.example/x.git","revision":"` + sha + `","path":"modules/vpc","tfvarsPath":"env/prod.tfvars","binary":"terraform","version":"1.10.6","planFile":"/p","backend":{"localPath":"/state/terraform.tfstate"}}`,
		`{"operation":"destroy","repoURL":"r","revision":"` + sha + `","path":"../etc","backend":{"localPath":"rel"}}`,
		`{"operation":"plan","repoURL":"r","revision":"` + sha + `","path":"a/../../b","planFile":"/p","policies":[{"name":"p","validations":[{"expression":"true"}]}]}`,
		`{"operation":"plan","repoURL":"r","revision":"` + sha + `","path":"/abs","planFile":"p","backend":{"kubernetes":{"namespace":"Team","secretSuffix":""},"localPath":"/x"}}`,
		`{"operation":"plan","operation":"apply"}`,
		`[1,2,3]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		spec, err := runner.DecodeSpec(raw)
		if err != nil {
			if !strings.Contains(err.Error(), runner.EnvSpec) && !strings.HasPrefix(err.Error(), "invalid run spec: ") {
				t.Errorf("error %q does not say what is wrong with the run spec", err)
			}
			return
		}
		if !slices.Contains([]runner.Operation{runner.OperationPlan, runner.OperationApply, runner.OperationDestroy}, spec.Operation) {
			t.Errorf("accepted operation %q", spec.Operation)
		}
		if spec.RepoURL == "" || !gitrepo.IsSHA(spec.Revision) {
			t.Errorf("accepted repoURL %q revision %q", spec.RepoURL, spec.Revision)
		}
		for field, p := range map[string]string{"path": spec.Path, "tfvarsPath": spec.TfvarsPath} {
			if joined := filepath.Join("/checkout", p); joined != "/checkout" && !strings.HasPrefix(joined, "/checkout/") {
				t.Errorf("accepted %s %q, which leaves the checkout (%s)", field, p, joined)
			}
		}
		if !slices.Contains([]string{"", runner.BinaryTofu, runner.BinaryTerraform}, spec.Binary) {
			t.Errorf("accepted binary %q", spec.Binary)
		}
		if (spec.Operation == runner.OperationPlan || spec.Operation == runner.OperationApply) && !filepath.IsAbs(spec.PlanFile) {
			t.Errorf("accepted %s with plan file %q", spec.Operation, spec.PlanFile)
		}
		b := spec.Backend
		if b.Kubernetes != nil && b.LocalPath != "" {
			t.Errorf("accepted two backends %+v", b)
		}
		if b.LocalPath != "" && !filepath.IsAbs(b.LocalPath) {
			t.Errorf("accepted local state %q", b.LocalPath)
		}
		if k := b.Kubernetes; k != nil && (len(validation.IsDNS1123Label(k.Namespace)) > 0 || len(validation.IsDNS1123Subdomain("tfstate-default-"+k.SecretSuffix)) > 0) {
			t.Errorf("accepted kubernetes backend %+v", k)
		}
		encoded, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("encoding an accepted spec: %v", err)
		}
		again, err := runner.DecodeSpec(string(encoded))
		if err != nil {
			t.Fatalf("an accepted spec, encoded, is refused: %v\n%s", err, encoded)
		}
		if reencoded, _ := json.Marshal(again); string(reencoded) != string(encoded) {
			t.Errorf("an accepted spec does not survive encoding:\n%s\n%s", encoded, reencoded)
		}
	})
}
