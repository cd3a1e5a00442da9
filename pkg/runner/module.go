package runner

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// Files the runner writes into the module.
const (
	// BackendFile configures the state backend when the module has none.
	BackendFile = "zz_magos_backend.tf"
	// VariablesFile holds the HCL variables (MAGOS_HCL_VAR_<name>). Being an .auto.tfvars file
	// that sorts last, it wins over TF_VAR_ and the module's own tfvars files, and loses to
	// the Workspace's tfvarsPath (-var-file).
	VariablesFile = "zz_magos_variables.auto.tfvars"
)

// moduleBackend returns how the module in dir configures its state ("backend \"s3\"", "cloud"),
// or "" when it does not.
func moduleBackend(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("reading the module: %w", err)
	}
	parser := hclparse.NewParser()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == BackendFile {
			continue
		}
		var file *hcl.File
		var diags hcl.Diagnostics
		switch {
		case strings.HasSuffix(name, ".tf"), strings.HasSuffix(name, ".tofu"):
			file, diags = parser.ParseHCLFile(filepath.Join(dir, name))
		case strings.HasSuffix(name, ".tf.json"), strings.HasSuffix(name, ".tofu.json"):
			file, diags = parser.ParseJSONFile(filepath.Join(dir, name))
		default:
			continue
		}
		if diags.HasErrors() {
			return "", fmt.Errorf("parsing the module: %s", diags.Error())
		}
		content, _, _ := file.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "terraform"}}})
		for _, block := range content.Blocks {
			inner, _, _ := block.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
				{Type: "backend", LabelNames: []string{"type"}},
				{Type: "cloud"},
			}})
			for _, b := range inner.Blocks {
				if b.Type == "cloud" {
					return "cloud", nil
				}
				return fmt.Sprintf("backend %q", b.Labels[0]), nil
			}
		}
	}
	return "", nil
}

// writeBackend writes BackendFile for b into dir.
func writeBackend(dir string, b Backend) error {
	f := hclwrite.NewEmptyFile()
	body := f.Body().AppendNewBlock("terraform", nil).Body()
	switch {
	case b.Kubernetes != nil:
		be := body.AppendNewBlock("backend", []string{"kubernetes"}).Body()
		be.SetAttributeValue("secret_suffix", cty.StringVal(b.Kubernetes.SecretSuffix))
		be.SetAttributeValue("namespace", cty.StringVal(b.Kubernetes.Namespace))
		if b.Kubernetes.ConfigPath != "" {
			be.SetAttributeValue("config_path", cty.StringVal(b.Kubernetes.ConfigPath))
		} else {
			be.SetAttributeValue("in_cluster_config", cty.True)
		}
	case b.LocalPath != "":
		if err := os.MkdirAll(filepath.Dir(b.LocalPath), 0o700); err != nil {
			return fmt.Errorf("creating the folder of the local state: %w", err)
		}
		body.AppendNewBlock("backend", []string{"local"}).Body().SetAttributeValue("path", cty.StringVal(b.LocalPath))
	default:
		return fmt.Errorf("the module configures no backend and the run spec gives none: want backend.kubernetes or backend.localPath, or a backend in the module (state would be lost)")
	}
	header := "# Written by the Magos runner: the module configures no backend of its own.\n"
	if err := os.WriteFile(filepath.Join(dir, BackendFile), append([]byte(header), f.Bytes()...), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", BackendFile, err)
	}
	return nil
}

// writeHCLVariables writes VariablesFile into dir from the MAGOS_HCL_VAR_<name>=<expression>
// entries of env; it writes nothing when there are none. Values are never shown in errors:
// they may be secret.
func writeHCLVariables(dir string, env []string) error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		name, isVar := strings.CutPrefix(k, EnvHCLVariablePrefix)
		if !ok || !isVar {
			continue
		}
		if !hclsyntax.ValidIdentifier(name) {
			return fmt.Errorf("%s%s: %q is not a variable name: want letters, digits, '_' and '-', starting with a letter", EnvHCLVariablePrefix, name, name)
		}
		// Parse it alone, so a value cannot smuggle in more assignments.
		if _, diags := hclsyntax.ParseExpression([]byte(v), EnvHCLVariablePrefix+name, hcl.InitialPos); diags.HasErrors() {
			return fmt.Errorf("%s%s is not an HCL expression: %s", EnvHCLVariablePrefix, name, summaries(diags))
		}
		vars[name] = v
	}
	if len(vars) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("# Written by the Magos runner from the Workspace's HCL variables.\n")
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		fmt.Fprintf(&b, "%s = %s\n", name, vars[name])
	}
	if err := os.WriteFile(filepath.Join(dir, VariablesFile), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", VariablesFile, err)
	}
	return nil
}

// summaries renders diagnostics without their source snippets (which would show the value).
func summaries(diags hcl.Diagnostics) string {
	var parts []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			parts = append(parts, d.Summary)
		}
	}
	return strings.Join(parts, "; ")
}
