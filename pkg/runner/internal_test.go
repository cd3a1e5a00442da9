package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func validSpec() Spec {
	return Spec{
		Operation: OperationPlan,
		RepoURL:   "https://git.example.com/infra.git",
		Revision:  strings.Repeat("a1", 20),
		Path:      ".",
		Binary:    BinaryTofu,
		PlanFile:  "/workspace-data/run.tfplan",
		Backend:   Backend{Kubernetes: &KubernetesBackend{Namespace: "team-a", SecretSuffix: "network"}},
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Spec)
		want   string // "" for valid
	}{
		{name: "valid", change: func(*Spec) {}},
		{name: "valid destroy without plan file", change: func(s *Spec) { s.Operation, s.PlanFile = OperationDestroy, "" }},
		{name: "valid v-prefixed version", change: func(s *Spec) { s.Version = "v1.10.6" }},
		{name: "valid pre-release", change: func(s *Spec) { s.Version = "1.11.0-beta1" }},
		{name: "valid default binary", change: func(s *Spec) { s.Binary = "" }},
		{name: "valid local backend", change: func(s *Spec) { s.Backend = Backend{LocalPath: "/state/x.tfstate"} }},
		{name: "valid no backend (the module may have one)", change: func(s *Spec) { s.Backend = Backend{} }},
		{name: "operation", change: func(s *Spec) { s.Operation = "deploy" }, want: `operation "deploy": want plan, apply or destroy`},
		{name: "repo", change: func(s *Spec) { s.RepoURL = "" }, want: "repoURL is empty"},
		{name: "short SHA", change: func(s *Spec) { s.Revision = "abc123" }, want: `revision "abc123": want a 40-hex commit SHA`},
		{name: "absolute path", change: func(s *Spec) { s.Path = "/etc" }, want: `path "/etc": want a path relative`},
		{name: "path escapes", change: func(s *Spec) { s.Path = "a/../../b" }, want: `path "a/../../b": leaves the repository`},
		{name: "tfvars escapes", change: func(s *Spec) { s.TfvarsPath = "../x.tfvars" }, want: `tfvarsPath "../x.tfvars": leaves`},
		{name: "binary", change: func(s *Spec) { s.Binary = "pulumi" }, want: `binary "pulumi": want tofu or terraform`},
		{name: "version constraint", change: func(s *Spec) { s.Version = "~> 1.10" }, want: `version "~> 1.10": want an exact version`},
		{name: "relative plan file", change: func(s *Spec) { s.PlanFile = "run.tfplan" }, want: `planFile "run.tfplan": want an absolute path`},
		{name: "two backends", change: func(s *Spec) { s.Backend.LocalPath = "/x" }, want: "both kubernetes and localPath are set"},
		{name: "relative local state", change: func(s *Spec) { s.Backend = Backend{LocalPath: "x.tfstate"} }, want: `localPath "x.tfstate": want an absolute path`},
		{name: "bad namespace", change: func(s *Spec) { s.Backend.Kubernetes.Namespace = "Team_A" }, want: `kubernetes namespace "Team_A"`},
		{name: "bad secret suffix", change: func(s *Spec) { s.Backend.Kubernetes.SecretSuffix = "" }, want: `kubernetes secretSuffix ""`},
		{name: "every problem at once", change: func(s *Spec) { s.Operation, s.RepoURL = "", "" }, want: `operation "": want plan, apply or destroy; repoURL is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.change(&s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestSummarizePlan(t *testing.T) {
	tests := []struct {
		name string
		json string
		want planSummary
		msg  string
		err  string
	}{
		{name: "nothing", json: `{"format_version":"1.2","resource_changes":[{"change":{"actions":["no-op"]}},{"change":{"actions":["read"]}}],"output_changes":{"o":{"actions":["no-op"]}}}`,
			want: planSummary{}, msg: "No changes."},
		{name: "create update delete", json: `{"format_version":"1.2","resource_changes":[{"change":{"actions":["create"]}},{"change":{"actions":["update"]}},{"change":{"actions":["delete"]}}]}`,
			want: planSummary{add: 1, change: 1, destroy: 1, hasChanges: true}, msg: "Plan: 1 to add, 1 to change, 1 to destroy."},
		{name: "replace counts as add and destroy", json: `{"format_version":"1.2","resource_changes":[{"change":{"actions":["delete","create"]}},{"change":{"actions":["create","delete"]}}]}`,
			want: planSummary{add: 2, destroy: 2, hasChanges: true}},
		{name: "output change only", json: `{"format_version":"1.2","output_changes":{"o":{"actions":["update"]}}}`,
			want: planSummary{hasChanges: true}, msg: "Plan: 0 to add, 0 to change, 0 to destroy."},
		{name: "a format this reader does not know", json: `{"format_version":"2.0","resource_changes":[]}`, err: "unsupported plan format version"},
		{name: "forget", json: `{"format_version":"1.2","resource_changes":[{"change":{"actions":["forget"]}}]}`, want: planSummary{hasChanges: true}},
		// resource_drift: what the refresh found changed outside the tool. A change of a drifted
		// resource reverts drift; of another, it is the commit's own.
		{name: "a change of a drifted resource reverts drift", json: `{"format_version":"1.2",
			"resource_drift":[{"address":"a.x","change":{"actions":["update"]}}],
			"resource_changes":[{"address":"a.x","change":{"actions":["update"]}}]}`,
			want: planSummary{change: 1, driftReverts: 1, hasChanges: true}, msg: "Plan: 0 to add, 1 to change, 0 to destroy."},
		{name: "a change of a resource that did not drift", json: `{"format_version":"1.2",
			"resource_drift":[{"address":"a.x","change":{"actions":["update"]}}],
			"resource_changes":[{"address":"a.y","change":{"actions":["update"]}},{"address":"a.x","change":{"actions":["no-op"]}}]}`,
			want: planSummary{change: 1, hasChanges: true}},
		{name: "a drifted resource the plan does not touch", json: `{"format_version":"1.2",
			"resource_drift":[{"address":"a.x","change":{"actions":["delete"]}}],
			"resource_changes":[{"address":"a.y","change":{"actions":["create"]}}]}`,
			want: planSummary{add: 1, hasChanges: true}},
		{name: "no-op and read of a drifted resource", json: `{"format_version":"1.2",
			"resource_drift":[{"address":"a.x","change":{"actions":["update"]}},{"address":"data.d.x","change":{"actions":["update"]}}],
			"resource_changes":[{"address":"a.x","change":{"actions":["no-op"]}},{"address":"data.d.x","change":{"actions":["read"]}}]}`,
			want: planSummary{}, msg: "No changes."},
		{name: "drift without a change is no drift", json: `{"format_version":"1.2",
			"resource_drift":[{"address":"a.x","change":{"actions":["no-op"]}}],
			"resource_changes":[{"address":"a.x","change":{"actions":["update"]}}]}`,
			want: planSummary{change: 1, hasChanges: true}},
		{name: "mixed: a drifted resource replaced, a deleted one created again, a new one created", json: `{"format_version":"1.2",
			"resource_drift":[{"address":"a.x","change":{"actions":["update"]}},{"address":"a.z","change":{"actions":["delete"]}},{"address":"a.w","change":{"actions":["update"]}}],
			"resource_changes":[{"address":"a.x","change":{"actions":["delete","create"]}},{"address":"a.z","change":{"actions":["create"]}},{"address":"a.n","change":{"actions":["create"]}}]}`,
			want: planSummary{add: 3, destroy: 1, driftReverts: 2, hasChanges: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := summarizePlan([]byte(tt.json))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("summarizePlan = %+v, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("summarizePlan = %#v, %v; want %#v", got, err, tt.want)
			}
			if tt.msg != "" && got.String() != tt.msg {
				t.Errorf("String() = %q; want %q", got.String(), tt.msg)
			}
		})
	}
	if _, err := summarizePlan([]byte(`{`)); err == nil {
		t.Error("summarizePlan of broken JSON succeeded; want an error")
	}
}

func TestLastLines(t *testing.T) {
	long := strings.Repeat("noise line\n", 200) + "│ Error: the real reason\n│ on main.tf line 3\n"
	got := lastLines([]byte(long), MaxMessageBytes)
	if len(got) > MaxMessageBytes || !strings.HasSuffix(got, "│ Error: the real reason\n│ on main.tf line 3") || strings.HasPrefix(got, "line") {
		t.Fatalf("lastLines = %q (%d bytes); want at most %d bytes ending with the error, starting at a line", got, len(got), MaxMessageBytes)
	}
	if got := lastLines([]byte("  short\n"), MaxMessageBytes); got != "short" {
		t.Fatalf("lastLines(short) = %q", got)
	}
	// A cut inside a multi-byte rune does not leave half of it.
	runes := strings.Repeat("│", 600)
	if got := lastLines([]byte(runes), 1000); !strings.HasPrefix(got, "│") {
		t.Fatalf("lastLines starts inside a rune: %q", got[:3])
	}
	tail := &tailBuffer{max: 8}
	_, _ = tail.Write([]byte("0123456789"))
	_, _ = tail.Write([]byte("ab"))
	if string(tail.Bytes()) != "456789ab" {
		t.Fatalf("tailBuffer = %q; want the last 8 bytes", tail.Bytes())
	}
}

func TestWriteHCLVariables(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		want    string // file content after the header; "" for no file
		wantErr string
	}{
		{name: "none", env: []string{"TF_VAR_x=1", "PATH=/bin"}},
		{name: "sorted, values as written", env: []string{
			EnvHCLVariablePrefix + "zones=[\"a\", \"b\"]",
			EnvHCLVariablePrefix + "tags={\n  team = \"a\"\n}",
			EnvHCLVariablePrefix + "count=3",
		}, want: "count = 3\ntags = {\n  team = \"a\"\n}\nzones = [\"a\", \"b\"]\n"},
		{name: "not an expression", env: []string{EnvHCLVariablePrefix + "x={ secret-value"},
			wantErr: EnvHCLVariablePrefix + "x is not an HCL expression"},
		{name: "a second assignment cannot be smuggled in", env: []string{EnvHCLVariablePrefix + "x=1\ny = 2"},
			wantErr: EnvHCLVariablePrefix + "x is not an HCL expression"},
		{name: "bad name", env: []string{EnvHCLVariablePrefix + "1x=1"},
			wantErr: `"1x" is not a variable name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			err := writeHCLVariables(dir, tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("writeHCLVariables = %v; want an error containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret-value") {
					t.Errorf("error shows the value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, VariablesFile))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("wrote %s with no HCL variables", VariablesFile)
				}
				return
			}
			_, body, _ := strings.Cut(string(raw), "\n")
			if err != nil || body != tt.want {
				t.Fatalf("%s =\n%s\nwant\n%s", VariablesFile, body, tt.want)
			}
		})
	}
}

func TestModuleBackend(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		wantErr string
	}{
		{name: "none", files: map[string]string{"main.tf": "terraform {\n  required_version = \">= 1.6\"\n}\nresource \"terraform_data\" \"x\" {}\n"}},
		{name: "backend in HCL", files: map[string]string{"main.tf": "", "backend.tf": "terraform {\n  backend \"s3\" {\n    bucket = \"b\"\n  }\n}\n"}, want: `backend "s3"`},
		{name: "backend in a .tofu file", files: map[string]string{"main.tofu": "terraform {\n  backend \"pg\" {}\n}\n"}, want: `backend "pg"`},
		{name: "backend in JSON", files: map[string]string{"main.tf.json": `{"terraform": {"backend": {"gcs": {"bucket": "b"}}}}`}, want: `backend "gcs"`},
		{name: "cloud block", files: map[string]string{"main.tf": "terraform {\n  cloud {\n    organization = \"o\"\n  }\n}\n"}, want: "cloud"},
		{name: "other files are ignored", files: map[string]string{"README.md": "terraform { backend \"s3\" {} }", "x.tfvars": "a = 1\n"}},
		{name: "parse error", files: map[string]string{"main.tf": "terraform {\n"}, wantErr: "parsing the module: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := moduleBackend(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("moduleBackend = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("moduleBackend = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestWriteBackend(t *testing.T) {
	tests := []struct {
		name    string
		backend Backend
		want    []string
		wantErr string
	}{
		{name: "kubernetes with kubeconfig", backend: Backend{Kubernetes: &KubernetesBackend{Namespace: "team-a", SecretSuffix: "net", ConfigPath: "/k/config"}},
			want: []string{`backend "kubernetes"`, `secret_suffix = "net"`, `namespace     = "team-a"`, `config_path   = "/k/config"`}},
		{name: "kubernetes in cluster", backend: Backend{Kubernetes: &KubernetesBackend{Namespace: "team-a", SecretSuffix: "net"}},
			want: []string{`in_cluster_config = true`}},
		{name: "local, quoted safely", backend: Backend{LocalPath: "state/we\"ird/${x}.tfstate"},
			want: []string{`backend "local"`, `/state/we\"ird/$${x}.tfstate"`}},
		{name: "none", wantErr: "the module configures no backend and the run spec gives none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.backend.LocalPath != "" {
				tt.backend.LocalPath = filepath.Join(dir, tt.backend.LocalPath)
			}
			err := writeBackend(dir, tt.backend)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("writeBackend = %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			raw, err := os.ReadFile(filepath.Join(dir, BackendFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(raw), w) {
					t.Errorf("%s lacks %q:\n%s", BackendFile, w, raw)
				}
			}
		})
	}
}

func TestToolEnv(t *testing.T) {
	r := &run{dir: t.TempDir(), opts: Options{Env: []string{
		"PATH=/bin", "TF_VAR_region=eu", "AWS_PROFILE=prod",
		"TF_CLI_CONFIG_FILE=/missing", "TF_DATA_DIR=/elsewhere", "TF_WORKSPACE=other",
		EnvGitPassword + "=s3cr3t", EnvGitSSHPrivateKey + "=key", EnvGitUsername + "=u",
		EnvSpec + "={}", EnvHCLVariablePrefix + "x=1",
	}}}
	env, err := r.toolEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PATH=/bin", "TF_VAR_region=eu", "AWS_PROFILE=prod",
		"TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"TF_CLI_CONFIG_FILE=" + filepath.Join(r.dir, "cli.tfrc"),
		"TF_DATA_DIR=" + filepath.Join(r.dir, "data"),
	}
	if !slices.Equal(env, want) {
		t.Fatalf("toolEnv =\n%q\nwant\n%q", env, want)
	}
	if fi, err := os.Stat(filepath.Join(r.dir, "cli.tfrc")); err != nil || fi.Size() != 0 {
		t.Fatalf("CLI configuration: %v, %v; want an empty file", fi, err)
	}
}

func TestPlanSHA256IgnoresOnlyTheTimestamp(t *testing.T) {
	a, errA := planSHA256([]byte(`{"timestamp":"2026-01-01T00:00:00Z","resource_changes":[{"change":{"actions":["create"]}}]}`))
	b, errB := planSHA256([]byte(`{"resource_changes": [{"change":{"actions":["create"]}}], "timestamp":"2026-12-03T10:00:00Z"}`))
	c, errC := planSHA256([]byte(`{"timestamp":"2026-01-01T00:00:00Z","resource_changes":[{"change":{"actions":["delete"]}}]}`))
	if errA != nil || errB != nil || errC != nil {
		t.Fatalf("errors: %v %v %v", errA, errB, errC)
	}
	if a != b {
		t.Errorf("plans differing only in timestamp and layout: digests %s and %s, want equal", a, b)
	}
	if a == c {
		t.Errorf("plans with different changes share the digest %s", a)
	}
	if _, err := planSHA256([]byte(`[`)); err == nil {
		t.Error("planSHA256 of broken JSON succeeded; want an error")
	}
}
