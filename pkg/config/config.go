// Package config loads a binary's configuration from a YAML file, environment variables and
// command-line flags (each overriding the one before), and validates it, so that a bad value is
// reported at start-up with the key that holds it.
//
// A configuration is a struct whose fields carry `mapstructure` tags naming their keys. Every
// scalar key can be set from the environment as PREFIX_KEY, where KEY is the key path in upper
// snake case (clusterName -> MAGOS_CLUSTER_NAME, log.level -> MAGOS_LOG_LEVEL), and from a flag
// of the same name in kebab case (--cluster-name, --log-level) when the flag set defines one.
package config

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Validator is implemented by configurations that check themselves after loading.
type Validator interface {
	Validate() error
}

// Options says where Load reads from.
type Options struct {
	// File is the YAML file to read; empty reads none.
	File string
	// EnvPrefix prefixes environment variables (for example MAGOS).
	EnvPrefix string
	// Flags are command-line flags; only flags the user set override the file and environment.
	Flags *pflag.FlagSet
}

// Load fills out (a pointer to a struct, already holding the defaults) from opts and validates
// it. Unknown keys in the file are errors, so a typo does not silently fall back to a default.
func Load(opts Options, out Validator) error {
	v := viper.New()
	v.SetConfigType("yaml")
	if opts.File != "" {
		v.SetConfigFile(opts.File)
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("reading config file %s: %w", opts.File, err)
		}
	}
	for _, key := range scalarKeys(reflect.TypeOf(out).Elem(), "") {
		if opts.EnvPrefix != "" {
			if err := v.BindEnv(key, EnvName(opts.EnvPrefix, key)); err != nil {
				return fmt.Errorf("binding %s to the environment: %w", key, err)
			}
		}
		if opts.Flags != nil {
			if f := opts.Flags.Lookup(FlagName(key)); f != nil && f.Changed {
				v.Set(key, f.Value.String())
			}
		}
	}
	err := v.UnmarshalExact(out, func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnset = false
		dc.WeaklyTypedInput = true
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		)
	})
	if err != nil {
		return fmt.Errorf("config %s: %w", source(opts), err)
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("config %s: %w", source(opts), err)
	}
	return nil
}

func source(opts Options) string {
	if opts.File == "" {
		return "(environment and flags)"
	}
	return opts.File
}

// EnvName is the environment variable that sets key: prefix + "_" + KEY in upper snake case.
func EnvName(prefix, key string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(snake(key, '_'), ".", "_"))
}

// FlagName is the flag that sets key: the key in kebab case, dots as dashes.
func FlagName(key string) string {
	return strings.ReplaceAll(snake(key, '-'), ".", "-")
}

func snake(s string, sep rune) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) && i > 0 && s[i-1] != '.' {
			b.WriteRune(sep)
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// scalarKeys lists the dotted keys of every non-slice, non-map leaf of a struct type.
func scalarKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft.String() != "time.Duration":
			keys = append(keys, scalarKeys(ft, key+".")...)
		case ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map:
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// FieldError is a validation error on one key.
type FieldError struct {
	// Key is the dotted path of the bad key, with list indexes (clusters[2].name).
	Key string
	// Message says what is wrong and what is expected.
	Message string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Message }

// Errors collects FieldErrors; its Err is nil when there are none.
type Errors []error

// Add records a FieldError for key.
func (e *Errors) Add(key, format string, args ...any) {
	*e = append(*e, &FieldError{Key: key, Message: fmt.Sprintf(format, args...)})
}

// Err joins the errors, or returns nil.
func (e Errors) Err() error { return errors.Join(e...) }

// SecretKeyRef names a key of a Secret in a configuration file: a direct cluster's kubeconfig, a
// notification webhook's URL.
type SecretKeyRef struct {
	Namespace string `mapstructure:"namespace"`
	Name      string `mapstructure:"name"`
	// Key defaults to the one Validate is given.
	Key string `mapstructure:"key"`
}

// String names the key as namespace/name[key], never its value.
func (r SecretKeyRef) String() string { return fmt.Sprintf("%s/%s[%s]", r.Namespace, r.Name, r.Key) }

// Read returns the key's value from its Secret, read with c (the hub reads such Secrets by name,
// each time it needs one, so a rotated value needs no restart). A missing or empty key is an
// error naming it, never the value.
func (r SecretKeyRef) Read(ctx context.Context, c client.Reader) ([]byte, error) {
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, &sec); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", r.Namespace, r.Name, err)
	}
	v, ok := sec.Data[r.Key]
	if !ok || len(v) == 0 {
		return nil, fmt.Errorf("Secret %s/%s has no key %q", r.Namespace, r.Name, r.Key)
	}
	return v, nil
}

// Validate adds an error to errs for each field that names no Secret key (under key, e.g.
// clusters[0].kubeconfig.secretRef), and sets Key to defaultKey when it is empty.
func (r *SecretKeyRef) Validate(key, defaultKey string, errs *Errors) {
	if msgs := validation.IsDNS1123Label(r.Namespace); len(msgs) > 0 {
		errs.Add(key+".namespace", "must be a namespace name, got %q", r.Namespace)
	}
	if msgs := validation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
		errs.Add(key+".name", "must be a Secret name, got %q", r.Name)
	}
	if r.Key == "" {
		r.Key = defaultKey
	} else if msgs := validation.IsConfigMapKey(r.Key); len(msgs) > 0 {
		errs.Add(key+".key", "must be a Secret data key, got %q", r.Key)
	}
}
