// Package variables turns the VariableSets of a Workspace into the environment of its runs.
//
// The sets apply in this order, a later entry winning over an earlier one of the same name:
// the Project's variableSetRef list (the Project of the same name in the Workspace's namespace
// of the cluster where the Workspace runs; none when there is no such Project), in order, then
// the Workspace's own variableSetRef list, in order. Input variables become TF_VAR_<name> (or
// MAGOS_HCL_VAR_<name> when hcl is true); environment entries keep their name. A variable wins
// over an environment entry that spells the same environment variable. An environment entry
// with a reserved name (runner.IsReservedEnv: one that steers the runner) is a ConfigError:
// the CRD refuses such names, and Build refuses them again for VariableSets stored under an
// older CRD, so the run never starts.
//
// Values from Secrets and ConfigMaps stay references (corev1.EnvVarSource): a Job reads them
// through valueFrom, and only the local runner resolves them, in memory (Resolve). Literals
// marked sensitive (a variable's or an environment entry's sensitive: true) are literals here
// too; Build names them, and the Job launcher moves their values into a Secret of the run.
package variables

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
)

// ConfigError is a mistake in the user's configuration (a missing VariableSet, Secret,
// ConfigMap or key, or a launch only the user can fix, such as a missing ServiceAccount):
// retrying does not help until the user fixes it, so the run fails instead of being retried.
// It is the one such error of the agent: the Job launcher (package execution) returns it too.
type ConfigError struct {
	// Message says what is missing and where it is referenced.
	Message string
}

func (e *ConfigError) Error() string { return e.Message }

// IsConfigError reports whether err is (or wraps) a ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

func configErrorf(format string, args ...any) error {
	return &ConfigError{Message: fmt.Sprintf(format, args...)}
}

// Build returns the environment of the Workspace's runs from the VariableSets of project (may
// be nil) and ws, sorted by name, and the names of its entries that are sensitive literals
// (the winning variable or environment entry of that name is a literal value marked
// sensitive), sorted. It checks that every referenced Secret and ConfigMap key exists, so a
// missing one fails the run with a clear message instead of a Pod that never starts. r should
// read the API server directly: Secrets are not cached by the agent.
func Build(ctx context.Context, r client.Reader, ws *magosv1.Workspace, project *magosv1.Project) (env []corev1.EnvVar, sensitive []string, err error) {
	var refs []magosv1.LocalObjectReference
	var kinds []string
	if project != nil {
		for _, ref := range project.Spec.VariableSetRefs {
			refs = append(refs, ref)
			kinds = append(kinds, "Project "+project.Name)
		}
	}
	for _, ref := range ws.Spec.VariableSetRefs {
		refs = append(refs, ref)
		kinds = append(kinds, "Workspace "+ws.Name)
	}

	vars := map[string]magosv1.Variable{}
	varFrom := map[string]string{} // name -> the VariableSet it comes from
	entries := map[string]magosv1.EnvironmentVariable{}
	envFrom := map[string]string{}
	for i, ref := range refs {
		set := &magosv1.VariableSet{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: ws.Namespace, Name: ref.Name}, set); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, configErrorf("VariableSet %q referenced by %s not found in namespace %s", ref.Name, kinds[i], ws.Namespace)
			}
			return nil, nil, fmt.Errorf("reading VariableSet %s/%s: %w", ws.Namespace, ref.Name, err)
		}
		for _, v := range set.Spec.Variables {
			vars[v.Name] = v
			varFrom[v.Name] = set.Name
		}
		for _, e := range set.Spec.Env {
			// The CRD refuses reserved names; an older CRD may not, and the run must not start.
			if runner.IsReservedEnv(e.Name) {
				return nil, nil, configErrorf("VariableSet %q (referenced by %s): %v", set.Name, kinds[i], runner.ReservedEnvError(e.Name))
			}
			entries[e.Name] = e
			envFrom[e.Name] = set.Name
		}
	}

	out := map[string]corev1.EnvVar{}
	secret := map[string]bool{} // env name -> a sensitive literal
	for name, e := range entries {
		ev, err := toEnvVar(ctx, r, ws.Namespace, name, e.Value, e.ValueFrom, fmt.Sprintf("env %q of VariableSet %q", name, envFrom[name]))
		if err != nil {
			return nil, nil, err
		}
		out[name] = ev
		secret[name] = e.Sensitive && e.Value != nil
	}
	// Variables after environment entries: a variable wins over an entry that spells the same
	// environment variable, and so does its sensitive flag.
	for name, v := range vars {
		envName := "TF_VAR_" + name
		if v.HCL {
			envName = runner.EnvHCLVariablePrefix + name
		}
		ev, err := toEnvVar(ctx, r, ws.Namespace, envName, v.Value, v.ValueFrom, fmt.Sprintf("variable %q of VariableSet %q", name, varFrom[name]))
		if err != nil {
			return nil, nil, err
		}
		out[envName] = ev
		secret[envName] = v.Sensitive && v.Value != nil
	}
	env = make([]corev1.EnvVar, 0, len(out))
	for _, ev := range out {
		env = append(env, ev)
		if secret[ev.Name] {
			sensitive = append(sensitive, ev.Name)
		}
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	sort.Strings(sensitive)
	return env, sensitive, nil
}

func toEnvVar(ctx context.Context, r client.Reader, namespace, name string, value *string, from *magosv1.ValueSource, what string) (corev1.EnvVar, error) {
	switch {
	case value != nil:
		return corev1.EnvVar{Name: name, Value: *value}, nil
	case from != nil && from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		if err := checkSecretKey(ctx, r, namespace, ref.Name, ref.Key, what); err != nil {
			return corev1.EnvVar{}, err
		}
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key,
		}}}, nil
	case from != nil && from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		if err := checkConfigMapKey(ctx, r, namespace, ref.Name, ref.Key, what); err != nil {
			return corev1.EnvVar{}, err
		}
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key,
		}}}, nil
	default:
		return corev1.EnvVar{}, configErrorf("%s has neither value nor valueFrom", what)
	}
}

func checkSecretKey(ctx context.Context, r client.Reader, namespace, name, key, what string) error {
	_, err := secretValue(ctx, r, namespace, name, key, what)
	return err
}

func checkConfigMapKey(ctx context.Context, r client.Reader, namespace, name, key, what string) error {
	_, err := configMapValue(ctx, r, namespace, name, key, what)
	return err
}

func secretValue(ctx context.Context, r client.Reader, namespace, name, key, what string) (string, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", configErrorf("Secret %q (%s) not found in namespace %s", name, what, namespace)
		}
		return "", fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	if v, ok := s.Data[key]; ok {
		return string(v), nil
	}
	if v, ok := s.StringData[key]; ok {
		return v, nil
	}
	return "", configErrorf("Secret %q (%s) has no key %q", name, what, key)
}

func configMapValue(ctx context.Context, r client.Reader, namespace, name, key, what string) (string, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", configErrorf("ConfigMap %q (%s) not found in namespace %s", name, what, namespace)
		}
		return "", fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)
	}
	if v, ok := cm.Data[key]; ok {
		return v, nil
	}
	if v, ok := cm.BinaryData[key]; ok {
		return string(v), nil
	}
	return "", configErrorf("ConfigMap %q (%s) has no key %q", name, what, key)
}

// Resolve returns env as NAME=value strings, reading Secret and ConfigMap references in
// namespace. The values live only in memory; callers must not log them.
func Resolve(ctx context.Context, r client.Reader, namespace string, env []corev1.EnvVar) ([]string, error) {
	out := make([]string, 0, len(env))
	for _, e := range env {
		value := e.Value
		if e.ValueFrom != nil {
			var err error
			what := "environment variable " + e.Name
			switch {
			case e.ValueFrom.SecretKeyRef != nil:
				value, err = secretValue(ctx, r, namespace, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, what)
			case e.ValueFrom.ConfigMapKeyRef != nil:
				value, err = configMapValue(ctx, r, namespace, e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key, what)
			default:
				err = configErrorf("%s: only secretKeyRef and configMapKeyRef are supported", what)
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, e.Name+"="+value)
	}
	return out, nil
}
