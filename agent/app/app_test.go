package app

import (
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
