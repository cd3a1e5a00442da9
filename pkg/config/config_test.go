package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/magosfleet/magos/pkg/config"
)

type sample struct {
	ClusterName string        `mapstructure:"clusterName"`
	Interval    time.Duration `mapstructure:"interval"`
	Log         struct {
		Level string `mapstructure:"level"`
	} `mapstructure:"log"`
	Items []string `mapstructure:"items"`
}

func (s *sample) Validate() error {
	var errs config.Errors
	if s.ClusterName == "" {
		errs.Add("clusterName", "must be set")
	}
	if s.Interval <= 0 {
		errs.Add("interval", "must be a positive duration, got %s", s.Interval)
	}
	return errs.Err()
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPrecedenceFileEnvFlags(t *testing.T) {
	file := writeFile(t, "clusterName: from-file\ninterval: 30s\nlog:\n  level: info\nitems: [a, b]\n")
	t.Setenv("TEST_LOG_LEVEL", "debug")
	t.Setenv("TEST_CLUSTER_NAME", "from-env")
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.String("cluster-name", "", "")
	flags.Duration("interval", 0, "")
	if err := flags.Parse([]string{"--cluster-name=from-flag"}); err != nil {
		t.Fatal(err)
	}
	var s sample
	if err := config.Load(config.Options{File: file, EnvPrefix: "TEST", Flags: flags}, &s); err != nil {
		t.Fatal(err)
	}
	if s.ClusterName != "from-flag" || s.Log.Level != "debug" || s.Interval != 30*time.Second {
		t.Fatalf("precedence wrong: %+v", s)
	}
	if strings.Join(s.Items, ",") != "a,b" {
		t.Fatalf("items = %v", s.Items)
	}
}

func TestLoadErrorsNameTheKey(t *testing.T) {
	cases := map[string]struct {
		body string
		want string
	}{
		"unknown key":  {"clusterName: x\ninterval: 1s\nclustrName: y\n", "clustrname"},
		"bad duration": {"clusterName: x\ninterval: soon\n", "interval"},
		"validation":   {"interval: 1s\n", "clusterName: must be set"},
		"non-positive": {"clusterName: x\ninterval: -1m\n", "interval: must be a positive duration"},
		"not yaml":     {"clusterName: [\n", "config"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s sample
			err := config.Load(config.Options{File: writeFile(t, tc.body)}, &s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	if got := config.EnvName("MAGOS", "log.level"); got != "MAGOS_LOG_LEVEL" {
		t.Fatal(got)
	}
	if got := config.EnvName("MAGOS", "hubKubeconfig"); got != "MAGOS_HUB_KUBECONFIG" {
		t.Fatal(got)
	}
	if got := config.FlagName("hubKubeconfig"); got != "hub-kubeconfig" {
		t.Fatal(got)
	}
}
