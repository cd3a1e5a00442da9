package app

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// TestCacheOptionsSecretNamespaces checks that the Secret cache is confined to the given
// namespaces (the only ones the chart lets the agent read Secrets in), still label-selected.
func TestCacheOptionsSecretNamespaces(t *testing.T) {
	secrets := func(opts cache.Options) cache.ByObject {
		for obj, by := range opts.ByObject {
			if _, ok := obj.(*corev1.Secret); ok {
				return by
			}
		}
		t.Fatal("no Secret cache rule")
		return cache.ByObject{}
	}
	all, err := CacheOptions()
	if err != nil {
		t.Fatal(err)
	}
	if by := secrets(all); by.Namespaces != nil || by.Label.String() != "magosproject.io/secret-type=repository" {
		t.Errorf("without namespaces: %+v, want every namespace, repository Secrets only", by)
	}
	some, err := CacheOptions("payments", "cdn")
	if err != nil {
		t.Fatal(err)
	}
	by := secrets(some)
	if len(by.Namespaces) != 2 || by.Label.String() != "magosproject.io/secret-type=repository" {
		t.Fatalf("with namespaces: %+v, want payments and cdn, repository Secrets only", by)
	}
	for _, ns := range []string{"payments", "cdn"} {
		if _, ok := by.Namespaces[ns]; !ok {
			t.Errorf("namespace %s not cached: %v", ns, by.Namespaces)
		}
	}
}

// TestLocalEnv: local runs get the agent's Runner.Env and its provider network mirror.
func TestLocalEnv(t *testing.T) {
	got := localEnv(RunnerOptions{Env: []string{"A=1"}, ProviderNetworkMirror: "https://mirror.example/"})
	if want := []string{"A=1", "MAGOS_PROVIDER_NETWORK_MIRROR=https://mirror.example/"}; !slices.Equal(got, want) {
		t.Errorf("local env %v; want %v", got, want)
	}
	if got := localEnv(RunnerOptions{Env: []string{"A=1"}}); !slices.Equal(got, []string{"A=1"}) {
		t.Errorf("local env without a mirror %v; want [A=1]", got)
	}
}
