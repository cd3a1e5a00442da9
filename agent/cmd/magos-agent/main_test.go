package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/magosfleet/magos/pkg/config"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(*Config) string
		wantErr string
	}{
		{
			name:    "job mode needs an image",
			wantErr: "runner.image: is required in job mode",
		},
		{
			name: "image from the environment",
			env:  map[string]string{"MAGOS_RUNNER_IMAGE": "registry.example/magos-agent:1.0"},
			check: func(c *Config) string {
				if c.Runner.Image != "registry.example/magos-agent:1.0" || c.Runner.Mode != "job" || c.ReconcileInterval != 3*time.Minute {
					return "defaults or environment not applied"
				}
				return ""
			},
		},
		{
			name: "flags win over the environment",
			env:  map[string]string{"MAGOS_RUNNER_MODE": "job"},
			args: []string{"--runner-mode=local", "--runner-data-dir=/tmp/runs", "--reconcile-interval=5m", "--log-level=debug"},
			check: func(c *Config) string {
				if c.Runner.Mode != "local" || c.Runner.DataDir != "/tmp/runs" || c.ReconcileInterval != 5*time.Minute || c.Log.Level != "debug" {
					return "flags not applied"
				}
				return ""
			},
		},
		{
			name:    "unknown mode",
			args:    []string{"--runner-mode=kubelet"},
			wantErr: `runner.mode: "kubelet": want job or local`,
		},
		{
			name:    "bad quantity",
			args:    []string{"--runner-image=x", "--runner-memory-limit=lots"},
			wantErr: `runner.memoryLimit: "lots" is not a quantity`,
		},
		{
			name:    "non-positive interval",
			args:    []string{"--runner-image=x", "--reconcile-interval=0s"},
			wantErr: "reconcileInterval: must be positive",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
			for _, name := range []string{"runner-mode", "runner-image", "runner-data-dir", "runner-memory-limit", "log-level"} {
				flags.String(name, "", "")
			}
			flags.Duration("reconcile-interval", 0, "")
			if err := flags.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			cfg := Defaults()
			err := config.Load(config.Options{EnvPrefix: "MAGOS", Flags: flags}, cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(cfg); msg != "" {
				t.Errorf("%s: %+v", msg, cfg)
			}
		})
	}
}
