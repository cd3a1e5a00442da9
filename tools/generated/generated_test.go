package generated_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates the deepcopy code and the CRDs from a copy of the API
// module and compares them with the committed files.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// Read the API sources here, not only in child processes, so that go test's result cache
	// is keyed on them.
	sources, err := filepath.Glob(filepath.Join(root, "apis", "v1alpha1", "*.go"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("no API sources: %v", err)
	}
	for _, src := range sources {
		if _, err := os.ReadFile(src); err != nil {
			t.Fatal(err)
		}
	}
	tmp := t.TempDir()
	gen := filepath.Join(tmp, "controller-gen")
	run(t, root, nil, "go", "build", "-o", gen, "sigs.k8s.io/controller-tools/cmd/controller-gen")

	apis := filepath.Join(tmp, "apis")
	run(t, root, nil, "cp", "-r", filepath.Join(root, "apis"), apis)
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	crds := filepath.Join(tmp, "crds")
	run(t, apis, env, gen, "object", "paths=./...")
	run(t, apis, env, gen, "crd", "paths=./...", "output:crd:artifacts:config="+crds)

	same(t, filepath.Join(apis, "v1alpha1", "zz_generated.deepcopy.go"),
		filepath.Join(root, "apis", "v1alpha1", "zz_generated.deepcopy.go"))
	entries, err := os.ReadDir(crds)
	if err != nil || len(entries) == 0 {
		t.Fatalf("controller-gen wrote no CRDs: %v", err)
	}
	for _, chart := range []string{"magos-hub", "magos-agent"} {
		dir := filepath.Join(root, "charts", chart, "files", "crds")
		committed, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(committed) != len(entries) {
			t.Errorf("%s has %d CRD files, generation gives %d: run make generate", dir, len(committed), len(entries))
		}
		for _, e := range entries {
			same(t, filepath.Join(crds, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
}

func same(t *testing.T, generated, committed string) {
	t.Helper()
	want, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatalf("%v: run make generate", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is stale: run make generate", committed)
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
