package realnode

import (
	"context"
	"os"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
)

// The test's helpers: thin wrappers of fleet.go that fail the test on an error.

// bedEnv is what `make test-real` hands the test: the built images and tools.
type bedEnv = Env

// cluster is one node's cluster as the test reaches it.
type cluster = Cluster

func requireEnv(t *testing.T) bedEnv {
	t.Helper()
	e, err := EnvFromEnviron("../..")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newCluster(t *testing.T, n *Node, dir string) *cluster {
	t.Helper()
	cl, err := NewCluster(n, dir)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// gitServer serves the repositories under root over git's smart HTTP protocol on addr until
// the test ends.
func gitServer(t *testing.T, addr, root string) string {
	t.Helper()
	url, stop, err := GitServer(addr, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// gitRepo makes a repository under root/name holding the given files, committed on main, and
// returns a function that commits changes to it.
func gitRepo(t *testing.T, root, name string, files map[string]string) func(files map[string]string) {
	t.Helper()
	commit, err := GitRepo(root, name, files)
	if err != nil {
		t.Fatal(err)
	}
	return func(files map[string]string) {
		t.Helper()
		if err := commit(files); err != nil {
			t.Fatal(err)
		}
	}
}

// helmTest runs a release's `helm test` hooks and fails the test, with their logs, if one fails.
func helmTest(t *testing.T, ctx context.Context, cl *cluster, name, namespace string) {
	t.Helper()
	if err := HelmTest(ctx, cl, name, namespace, t.Logf); err != nil {
		t.Fatal(err)
	}
}

// helmInstall installs (or, with upgrade, upgrades) a chart of the checkout into the cluster.
func helmInstall(t *testing.T, ctx context.Context, cl *cluster, chartDir, name, namespace string, values map[string]any, upgrade bool) *release.Release {
	t.Helper()
	rel, err := HelmInstall(ctx, cl, chartDir, name, namespace, values, upgrade, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// describePods says where each Pod of a namespace stands, for failure messages.
func describePods(ctx context.Context, cl *cluster, namespace string) string {
	return DescribePods(ctx, cl, namespace)
}

// staticVolumes provisions n hostPath PersistentVolumes in the node (see StaticVolumes).
func staticVolumes(t *testing.T, ctx context.Context, cl *cluster, n int) {
	t.Helper()
	if err := StaticVolumes(ctx, cl, n); err != nil {
		t.Fatal(err)
	}
}

// poll waits for cond with a deadline, failing the test with what last went wrong.
func poll(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	if err := Poll(ctx, timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// testNetwork readies the machine for nodes (kernel tunables, restored when the test ends) and
// creates the Docker network name on subnet, removed when the test ends unless MAGOS_REAL_KEEP
// is set. It returns the network's gateway: this machine, as the nodes reach it.
func testNetwork(t *testing.T, ctx context.Context, name, subnet string) string {
	t.Helper()
	restore, err := SaveKernelTunables()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Error(err)
		}
	})
	gateway, err := CreateNetwork(ctx, NetworkOptions{Name: name, Subnet: subnet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("MAGOS_REAL_KEEP") != "" {
			t.Logf("MAGOS_REAL_KEEP: leaving the nodes running (docker ps --filter label=%s)", Label)
			return
		}
		if err := RemoveNetwork(context.Background(), name); err != nil {
			t.Error(err)
		}
	})
	return gateway
}
