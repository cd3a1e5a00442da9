package runner

import (
	"fmt"
	"slices"
	"strings"
)

// ReservedEnvPrefixes start environment variable names that steer the runner, OpenTofu or
// the state backend, and that user input (a VariableSet's env) may therefore not set:
//   - MAGOS_: the runner protocol (MAGOS_RUN_SPEC, MAGOS_RESULT_FILE, MAGOS_HCL_VAR_<name>,
//     MAGOS_TOFU, MAGOS_TERRAFORM, and where providers come from: MAGOS_PROVIDER_MIRROR,
//     MAGOS_PROVIDER_NETWORK_MIRROR);
//   - TF_CLI_ARGS: TF_CLI_ARGS and TF_CLI_ARGS_<command> add arguments to every tofu command
//     (-var, -target, -replace, -lock=false, -refresh=false);
//   - TF_LOG: TF_LOG, TF_LOG_PATH, TF_LOG_CORE, TF_LOG_PROVIDER: trace logs print secrets,
//     and a log path writes files where the runner does not expect them;
//   - KUBE_: the kubernetes state backend reads KUBE_HOST, KUBE_TOKEN, KUBE_INSECURE and the
//     like for whatever the runner's backend block does not set: a VariableSet could send the
//     state, and the runner's ServiceAccount token, to another server.
var ReservedEnvPrefixes = []string{"MAGOS_", "TF_CLI_ARGS", "TF_LOG", "KUBE_"}

// ReservedEnvNames are environment variable names, besides ReservedEnvPrefixes, that the
// runner or the agent sets or relies on, and that user input may therefore not set: the
// settings the runner gives tofu, tofu's plugin and configuration locations, the process's
// HOME, TMPDIR and PATH (where the binary is looked up), the in-cluster API server address,
// and the runner's git credentials (they come from the repository Secret only).
var ReservedEnvNames = []string{
	"TF_DATA_DIR", "TF_CLI_CONFIG_FILE", "TERRAFORM_CONFIG", "TF_PLUGIN_CACHE_DIR",
	"TF_IN_AUTOMATION", "TF_INPUT", "TF_WORKSPACE", "TF_REATTACH_PROVIDERS",
	"HOME", "TMPDIR", "PATH",
	"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
	EnvGitUsername, EnvGitPassword, EnvGitSSHPrivateKey, EnvGitSSHKnownHosts,
}

// ReservedEnvRule says which environment variable names are reserved, for error messages.
// The CRD's rule on VariableSet env names (apis/v1alpha1, EnvironmentVariable) says the same;
// TestReservedEnvNamesRefused in pkg/testenv keeps the two in step.
var ReservedEnvRule = "names starting " + strings.Join(ReservedEnvPrefixes, ", ") + ", and " +
	strings.Join(ReservedEnvNames, ", ") + " steer the runner"

// IsReservedEnv reports whether name is a reserved environment variable name (see
// ReservedEnvPrefixes and ReservedEnvNames). Names are case-sensitive, as on Linux.
func IsReservedEnv(name string) bool {
	if slices.Contains(ReservedEnvNames, name) {
		return true
	}
	return slices.ContainsFunc(ReservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// ReservedEnvError is the error for a reserved environment variable name: it names the rule.
func ReservedEnvError(name string) error {
	return fmt.Errorf("env name %s is reserved: %s", name, ReservedEnvRule)
}
