package runner

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/magosfleet/magos/pkg/gitrepo"
)

// Binaries a run can use.
const (
	BinaryTofu      = "tofu"
	BinaryTerraform = "terraform"
)

// exactVersion is what spec.Version must look like: an exact release, optionally v-prefixed.
var exactVersion = regexp.MustCompile(`^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// Validate checks that the Spec can be run, and says what is wrong with it and what is
// expected. A Spec that fails it is unusable: running it again cannot succeed.
func (s Spec) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	switch s.Operation {
	case OperationPlan, OperationApply, OperationDestroy:
	default:
		add("operation %q: want plan, apply or destroy", s.Operation)
	}
	if s.RepoURL == "" {
		add("repoURL is empty: want a git repository URL")
	}
	if !gitrepo.IsSHA(s.Revision) {
		add("revision %q: want a 40-hex commit SHA (the controller resolves refs)", s.Revision)
	}
	if err := relativeInside(s.Path); err != nil {
		add("path %q: %v", s.Path, err)
	}
	if s.TfvarsPath != "" {
		if err := relativeInside(s.TfvarsPath); err != nil {
			add("tfvarsPath %q: %v", s.TfvarsPath, err)
		}
	}
	switch s.Binary {
	case "", BinaryTofu, BinaryTerraform:
	default:
		add("binary %q: want tofu or terraform", s.Binary)
	}
	if s.Version != "" && !exactVersion.MatchString(s.Version) {
		add("version %q: want an exact version such as 1.10.6", s.Version)
	}
	if s.Operation == OperationPlan || s.Operation == OperationApply {
		if !filepath.IsAbs(s.PlanFile) {
			add("planFile %q: want an absolute path", s.PlanFile)
		}
	}
	if err := s.Backend.validate(); err != nil {
		add("backend: %v", err)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (b Backend) validate() error {
	if b.Kubernetes != nil && b.LocalPath != "" {
		return errors.New("both kubernetes and localPath are set: want at most one")
	}
	if b.LocalPath != "" && !filepath.IsAbs(b.LocalPath) {
		return fmt.Errorf("localPath %q: want an absolute path", b.LocalPath)
	}
	if k := b.Kubernetes; k != nil {
		if errs := validation.IsDNS1123Label(k.Namespace); len(errs) > 0 {
			return fmt.Errorf("kubernetes namespace %q: %s", k.Namespace, strings.Join(errs, ", "))
		}
		// The state Secret is tfstate-default-<suffix>.
		if errs := validation.IsDNS1123Subdomain("tfstate-default-" + k.SecretSuffix); k.SecretSuffix == "" || len(errs) > 0 {
			return fmt.Errorf("kubernetes secretSuffix %q: want lower-case letters, digits, '-' and '.' that make tfstate-default-<suffix> a valid Secret name", k.SecretSuffix)
		}
	}
	return nil
}

// relativeInside checks that p is a relative path that does not leave its root.
func relativeInside(p string) error {
	if filepath.IsAbs(p) {
		return errors.New("want a path relative to the repository root")
	}
	if c := filepath.Clean(p); c == ".." || strings.HasPrefix(c, "../") {
		return errors.New("leaves the repository: want a path inside it")
	}
	return nil
}
