package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Environment variables naming the binaries when neither the Spec nor Options do.
const (
	EnvTofu      = "MAGOS_TOFU"
	EnvTerraform = "MAGOS_TERRAFORM"
)

// Environment variables saying where the tool installs providers from (see docs/providers.md).
// With either set, the runner's CLI configuration installs providers from them only, never
// from a registry (cliConfig).
const (
	// EnvProviderMirror lists provider mirror folders (OpenTofu's filesystem mirror layout,
	// packed or unpacked), absolute paths separated by ':'. A folder that does not exist is
	// skipped.
	EnvProviderMirror = "MAGOS_PROVIDER_MIRROR"
	// EnvProviderNetworkMirror is the https:// URL of a provider network mirror (OpenTofu's
	// provider network mirror protocol), consulted after the folders.
	EnvProviderNetworkMirror = "MAGOS_PROVIDER_NETWORK_MIRROR"
	// EnvCLIConfigFile is the tool's own variable naming its CLI configuration file. Set in
	// the run's environment and naming a file, it wins over the runner's CLI configuration.
	EnvCLIConfigFile = "TF_CLI_CONFIG_FILE"
)

// Environment variables the launchers set for Kubernetes providers: a Job's runs reach their
// cluster as the Pod's ServiceAccount, a local run through the agent's runner kubeconfig.
const (
	// EnvKubeLoadConfigFile=false makes gavinbunney/kubectl use the in-cluster configuration
	// when the module configures no other (a Job sets it).
	EnvKubeLoadConfigFile = "KUBE_LOAD_CONFIG_FILE"
	// EnvKubeConfigPath names the kubeconfig of gavinbunney/kubectl (after KUBECONFIG),
	// hashicorp/kubernetes and tofu's kubernetes backend (a local run sets it).
	EnvKubeConfigPath = "KUBE_CONFIG_PATH"
)

// ImageProviderMirror is the provider mirror folder the runner image carries (its
// EnvProviderMirror; the root Dockerfile). Jobs given a mirror of their own list it after that
// one.
const ImageProviderMirror = "/usr/local/share/magos/providers"

// MaxMessageBytes bounds the tool output a failed Result carries in its message.
const MaxMessageBytes = 1024

// InterruptGrace is how long the tool gets to stop cleanly (persist its state, release its
// state lock) after the run's context ends (it receives an interrupt first) before it is
// killed. A Job's Pod gives the runner longer than this to stop.
const InterruptGrace = 30 * time.Second

// tool is the tofu or terraform binary of a run.
type tool struct {
	name string // tofu or terraform
	path string
	dir  string   // working directory
	env  []string // complete environment
	out  io.Writer
	err  io.Writer
}

// product is the tool's name as its maker spells it.
func (t *tool) product() string {
	if t.name == BinaryTerraform {
		return "Terraform"
	}
	return "OpenTofu"
}

// findBinary returns the path of binary: the Spec's binaryPath, else Options.Binaries, else
// MAGOS_TOFU / MAGOS_TERRAFORM, else PATH.
func findBinary(spec Spec, opts Options, env []string) (string, error) {
	if spec.BinaryPath != "" {
		return spec.BinaryPath, nil
	}
	if p := opts.Binaries[spec.Binary]; p != "" {
		return p, nil
	}
	envName := EnvTofu
	if spec.Binary == BinaryTerraform {
		envName = EnvTerraform
	}
	if p := getenv(env, envName); p != "" {
		return p, nil
	}
	p, err := exec.LookPath(spec.Binary)
	if err != nil {
		return "", fmt.Errorf("%s not found: set binaryPath in the run spec, %s, or put it on PATH", spec.Binary, envName)
	}
	return p, nil
}

// checkVersion fails unless the binary is exactly version want ("" accepts any).
func (t *tool) checkVersion(ctx context.Context, want string) (string, error) {
	out, err := t.output(ctx, "version", "-json")
	if err != nil {
		return "", fmt.Errorf("running %s at %s: %w", t.name, t.path, err)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" {
		return "", fmt.Errorf("%s at %s did not report its version (`%s version -json`)", t.name, t.path, t.name)
	}
	if want = strings.TrimPrefix(want, "v"); want != "" && v.Version != want {
		return v.Version, fmt.Errorf("%s %s at %s cannot run terraform.version %s", t.product(), v.Version, t.path, want)
	}
	return v.Version, nil
}

// run runs the tool with args; its output goes to the run's writers. A failure is an error
// whose message is the end of the tool's stderr.
func (t *tool) run(ctx context.Context, args ...string) error {
	tail := &tailBuffer{max: 4 * MaxMessageBytes}
	cmd := t.command(ctx, args)
	cmd.Stdout = t.out
	cmd.Stderr = io.MultiWriter(t.err, tail)
	if err := cmd.Run(); err != nil {
		return t.failure(args[0], err, tail.Bytes())
	}
	return nil
}

// output runs the tool with args and returns its stdout (not shown: it may hold the plan's
// sensitive values).
func (t *tool) output(ctx context.Context, args ...string) ([]byte, error) {
	var stdout bytes.Buffer
	tail := &tailBuffer{max: 4 * MaxMessageBytes}
	cmd := t.command(ctx, args)
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(t.err, tail)
	if err := cmd.Run(); err != nil {
		return nil, t.failure(args[0], err, tail.Bytes())
	}
	return stdout.Bytes(), nil
}

func (t *tool) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, t.path, args...)
	cmd.Dir = t.dir
	cmd.Env = t.env
	// Interrupt first, so the tool can stop cleanly and release its state lock.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = InterruptGrace
	return cmd
}

func (t *tool) failure(command string, err error, stderr []byte) error {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return fmt.Errorf("%s %s: %w", t.name, command, err)
	}
	if msg := lastLines(stderr, MaxMessageBytes); msg != "" {
		return fmt.Errorf("%s %s failed: %s", t.name, command, msg)
	}
	return fmt.Errorf("%s %s failed: %w", t.name, command, err)
}

// lastLines returns the end of out, at most max bytes, starting at a line when it can.
func lastLines(out []byte, max int) string {
	s := strings.TrimSpace(string(out))
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	// Do not start inside a UTF-8 sequence (tofu draws boxes with multi-byte runes).
	for len(s) > 0 && s[0]&0xC0 == 0x80 {
		s = s[1:]
	}
	return strings.TrimSpace(s)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped bool // bytes before the tail were dropped
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	// Compact only when twice the size, so that a long stream of short writes copies each
	// byte a bounded number of times.
	if len(b.buf) > 2*b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
		b.dropped = true
	}
	return len(p), nil
}

// Bytes returns the tail.
func (b *tailBuffer) Bytes() []byte {
	if over := len(b.buf) - b.max; over > 0 {
		return b.buf[over:]
	}
	return b.buf
}

// Truncated reports whether bytes before the tail were dropped.
func (b *tailBuffer) Truncated() bool { return b.dropped || len(b.buf) > b.max }

// getenv returns the value of name in env (the last one wins, as in exec).
func getenv(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}
