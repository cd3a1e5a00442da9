package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestCommands runs `magos-hub controller` on a test hub with a config file registering an
// agent cluster, then `magos-hub agent-kubeconfig` for it, as an operator would, and `magos-hub
// check` (the chart's helm test) before and after the hub runs.
func TestCommands(t *testing.T) {
	env := testenv.Start(t, localcluster.Options{})
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: cmd-a\n    labels: {region: r1}\n    agent: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkArgs := []string{"check", "--kubeconfig", env.Hub.Kubeconfig, "--config", file, "--leader-elect", "--leader-election-namespace", "default"}
	var out bytes.Buffer
	err := run(context.Background(), append(checkArgs, "--timeout", "2s"), &out)
	if err == nil || !strings.Contains(err.Error(), "no hub replica leads: no Lease default/magos-hub.magosproject.io yet") {
		t.Fatalf("check before the hub runs: %v, want no leader", err)
	}

	stopController := testenv.Background(t, context.Background(), "controller", func(ctx context.Context) error {
		return run(ctx, []string{"controller", "--kubeconfig", env.Hub.Kubeconfig, "--config", file,
			"--leader-elect", "--leader-election-namespace", "default", "--leader-election-identity", "hub-0",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-level", "error"}, os.Stdout)
	})
	testenv.Eventually(t, 90*time.Second, func() error {
		cl := &magosv1.Cluster{}
		if err := env.Hub.Client.Get(context.Background(), client.ObjectKey{Name: "cmd-a"}, cl); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, magosv1.ConditionEngaged) || cl.Labels["region"] != "r1" {
			return fmt.Errorf("cluster cmd-a: labels %v, conditions %v", cl.Labels, cl.Status.Conditions)
		}
		return nil
	})

	out.Reset()
	if err := run(context.Background(), append(checkArgs, "--timeout", "60s"), &out); err != nil {
		t.Fatalf("check: %v", err)
	}
	if !strings.Contains(out.String(), "hub leader: hub-0\nregistered clusters: 1\n  cmd-a (agent) Ready=") {
		t.Errorf("check printed:\n%s", out.String())
	}
	other := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(other, []byte("clusters:\n  - name: cmd-a\n    agent: {}\n  - name: cmd-b\n    agent: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"check", "--kubeconfig", env.Hub.Kubeconfig, "--config", other, "--timeout", "2s"}, &out)
	if err == nil || !strings.Contains(err.Error(), "not registered yet: cmd-b") {
		t.Errorf("check with a cluster the hub does not know: %v, want cmd-b not registered", err)
	}

	testenv.Eventually(t, 60*time.Second, func() error {
		out.Reset()
		return run(context.Background(), []string{"agent-kubeconfig", "--kubeconfig", env.Hub.Kubeconfig,
			"--cluster", "cmd-a", "--server", "https://hub.example.com:6443"}, &out)
	})
	kc, err := clientcmd.Load(out.Bytes())
	if err != nil {
		t.Fatalf("the printed kubeconfig does not load: %v", err)
	}
	kctx := kc.Contexts[kc.CurrentContext]
	if kctx == nil || kctx.Namespace != mirror.Namespace("cmd-a") || kc.Clusters[kctx.Cluster].Server != "https://hub.example.com:6443" ||
		kc.AuthInfos[kctx.AuthInfo].Token == "" || len(kc.Clusters[kctx.Cluster].CertificateAuthorityData) == 0 {
		t.Fatalf("unexpected kubeconfig:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"agent-kubeconfig", "--kubeconfig", env.Hub.Kubeconfig, "--cluster", "unknown"}, &out); err == nil {
		t.Fatal("agent-kubeconfig for an unregistered cluster succeeded")
	}

	stopping := time.Now()
	stopController()
	if took := time.Since(stopping); took > 60*time.Second {
		t.Fatalf("controller took %s to stop, want at most 60s", took)
	}
}

// TestControllerStopsOnAnInvalidConfig: at start-up there is no good configuration to keep, so
// `magos-hub controller` with a config file that does not validate ends with the file's error
// before it reaches the hub's API server.
func TestControllerStopsOnAnInvalidConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: a\n    agent: {}\n  - name: a\n    agent: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"controller", "--config", file, "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, os.Stdout)
	if want := `clusters[1].name: duplicate cluster name "a"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("controller with an invalid config: %v, want an error containing %q", err, want)
	}
}
