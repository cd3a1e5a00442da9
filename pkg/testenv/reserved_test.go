package testenv_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
)

// TestReservedEnvNamesRefused: a VariableSet cannot name an environment variable that steers
// the runner (runner.IsReservedEnv): the API server refuses it with a message that names the
// variable and the rule, the same rule the agent applies (runner.ReservedEnvError), so the CRD
// and the Go definition cannot drift apart. Names close to a reserved one are accepted.
func TestReservedEnvNamesRefused(t *testing.T) {
	reserved := append([]string{}, runner.ReservedEnvNames...)
	for _, p := range runner.ReservedEnvPrefixes {
		reserved = append(reserved, strings.TrimSuffix(p, "_"), p+"X")
	}
	reserved = append(reserved, "MAGOS_RUN_SPEC", "MAGOS_RESULT_FILE", "MAGOS_HCL_VAR_region", "TF_CLI_ARGS_plan", "TF_LOG_PATH")
	for i, name := range reserved {
		if !runner.IsReservedEnv(name) {
			// The prefix without its underscore (MAGOS, KUBE) is a free name: it is tested below.
			continue
		}
		t.Run(name, func(t *testing.T) {
			err := api.Client.Create(ctx(t), envSet(fmt.Sprintf("reserved-%d", i), name))
			if err == nil {
				t.Fatalf("env name %s accepted, want it refused as reserved", name)
			}
			if want := runner.ReservedEnvError(name).Error(); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\ndoes not say %q", err, want)
			}
		})
	}
	free := []string{"AWS_PROFILE", "TF_VAR_region", "TF_TOKEN_app_terraform_io", "TF_ENCRYPTION", "MAGOS", "KUBE", "home", "Path", "GIT_SSH_COMMAND", "MY_MAGOS_VAR"}
	for _, name := range free {
		if runner.IsReservedEnv(name) {
			t.Errorf("runner.IsReservedEnv(%q) = true, want false", name)
		}
	}
	t.Run("free names", func(t *testing.T) {
		if err := api.Client.Create(ctx(t), envSet("free-names", free...)); err != nil {
			t.Errorf("free env names refused: %v", err)
		}
	})
}

// envSet is a VariableSet of the default namespace with one literal env entry per name.
func envSet(name string, envNames ...string) *magosv1.VariableSet {
	vs := &magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	for _, n := range envNames {
		vs.Spec.Env = append(vs.Spec.Env, magosv1.EnvironmentVariable{Name: n, Value: ptr.To("x")})
	}
	return vs
}
