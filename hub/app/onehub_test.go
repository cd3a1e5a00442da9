package app_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/hub/hubclaim"
	"github.com/magosfleet/magos/hub/registry"
	"github.com/magosfleet/magos/pkg/installcheck"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// newHub builds a real hub (app.New, every controller) with leader election in namespace,
// registering the agent cluster of its config file, cluster.
func newHub(t *testing.T, env *localcluster.Fleet, namespace, identity, cluster string) *app.Hub {
	t.Helper()
	if err := env.Hub.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: "+cluster+"\n    agent: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.LoadConfig(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress, cfg.LeaderElect = "0", "0", true
	hub, err := app.New(app.Options{
		RestConfig:              env.Hub.Config,
		Config:                  cfg,
		ConfigFile:              file,
		LeaderElectionNamespace: namespace,
		LeaderElectionIdentity:  identity,
		Logger:                  ctrl.Log.WithName(identity),
		SkipNameValidation:      true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return hub
}

// leads waits until identity holds the hub leader Lease of namespace.
func leads(t *testing.T, env *localcluster.Fleet, namespace, identity string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		holder, err := installcheck.HeldLease(context.Background(), env.Hub.Client, namespace, keys.HubLeaderLease)
		if err != nil {
			return err
		}
		if holder != identity {
			return fmt.Errorf("Lease %s/%s held by %s, want %s", namespace, keys.HubLeaderLease, holder, identity)
		}
		return nil
	})
}

// TestSecondHubRefusesToStart: one API server, one hub leading in namespace hub-a, beside the
// leader Lease an uninstalled hub left in hub-gone (held, never renewed: it does not keep hub-a
// from starting). A second hub, in namespace hub-b with a config file of its own, refuses to
// start: Hub.Start ends with the error naming hub-a's Lease and leader, before it registered or
// removed anything (hub-a's cluster stays, hub-b's is never registered, hub-b holds no Lease).
// Once hub-a stops (its Lease released), a hub in hub-b starts and leads.
func TestSecondHubRefusesToStart(t *testing.T) {
	ctrl.SetLogger(testenv.DefaultLogger())
	env := testenv.Start(t, localcluster.Options{})
	ctx := context.Background()
	kube := env.Hub.Client

	// An uninstalled hub's leftover, short-lived so that the test waits 2s for it, not 15s.
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hub-gone"}}); err != nil {
		t.Fatal(err)
	}
	long := metav1.MicroTime{Time: time.Now().Add(-24 * time.Hour)}
	if err := kube.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hub-gone", Name: keys.HubLeaderLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("hub-gone-0"), LeaseDurationSeconds: ptr.To[int32](2),
			AcquireTime: &long, RenewTime: &long},
	}); err != nil {
		t.Fatal(err)
	}

	hubA := newHub(t, env, "hub-a", "hub-a-0", "cluster-a")
	stopA := testenv.Background(t, ctx, "hub-a", hubA.Start)
	leads(t, env, "hub-a", "hub-a-0")
	testenv.Eventually(t, 30*time.Second, func() error {
		return kube.Get(ctx, client.ObjectKey{Name: "cluster-a"}, &magosv1.Cluster{})
	})

	hubB := newHub(t, env, "hub-b", "hub-b-0", "cluster-b")
	start, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	began := time.Now()
	err := hubB.Start(start)
	took := time.Since(began)
	want := "hub: another magos hub runs on this API server: its leader Lease hub-a/" + keys.HubLeaderLease + " is held by hub-a-0 (version "
	if err == nil || !errors.Is(err, hubclaim.ErrAnotherHub) || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "two hubs must not share one API server") {
		t.Fatalf("the second hub's Start: %v (after %s), want an error containing %q", err, took, want)
	}
	t.Logf("the second hub refused to start after %s: %v", took, err)
	if err := kube.Get(ctx, client.ObjectKey{Name: "cluster-a"}, &magosv1.Cluster{}); err != nil {
		t.Errorf("hub-a's cluster after the second hub refused to start: %v", err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Name: "cluster-b"}, &magosv1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the hub that refused to start registered its cluster: %v", err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "hub-b", Name: keys.HubLeaderLease}, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the hub that refused to start holds a Lease: %v", err)
	}

	stopA()
	hubB = newHub(t, env, "hub-b", "hub-b-1", "cluster-b")
	testenv.Background(t, ctx, "hub-b", hubB.Start)
	leads(t, env, "hub-b", "hub-b-1")
}
