package release

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// repoRoot is the repository's root, seen from this package's folder.
const repoRoot = "../.."

var created = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// dockerfileStages parses the repository's Dockerfile.
func dockerfileStages(t *testing.T) map[string]*Stage {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages, err := ParseDockerfile(f)
	if err != nil {
		t.Fatal(err)
	}
	return stages
}

// fakeContext lays out a build context like tools/image-context.sh's, with tiny files whose
// contents name the platform, so that a file of the wrong platform is seen.
func fakeContext(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"bin/magos-hub":   "hub for " + arch,
		"bin/magosctl":    "magosctl for " + arch,
		"bin/magos-agent": "agent for " + arch,
		"bin/tofu":        "tofu for " + arch,
		"providers/registry.opentofu.org/hashicorp/time/0.14.2/linux_" + arch + "/terraform-provider-time_v0.14.2": "time provider for " + arch,
		"rootfs/etc/passwd": "nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n",
		"rootfs/etc/group":  "nonroot:x:65532:\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(name, "bin/") || strings.Contains(name, "terraform-provider") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "rootfs/tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}

// file is what an image holds at one path.
type file struct {
	Mode     int64 // permission bits and the sticky bit
	Dir      bool
	Uid, Gid int
	Content  string
}

// filesOf flattens an image's layers into its file tree (no whiteouts: the images have none).
func filesOf(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]file{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			p := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
			out[p] = file{Mode: h.Mode & 0o1777, Dir: h.Typeflag == tar.TypeDir, Uid: h.Uid, Gid: h.Gid, Content: string(b)}
		}
		rc.Close()
	}
	return out
}

// TestReleaseIndex assembles each image of the Dockerfile for both platforms from fake files,
// writes the OCI layout tar and the per-platform docker tars, and reads them back: the index
// holds exactly linux/amd64 and linux/arm64, each image has the Dockerfile's config, the
// release's labels and the files of its own platform.
func TestReleaseIndex(t *testing.T) {
	stages := dockerfileStages(t)
	ctx := map[string]string{"amd64": fakeContext(t, "amd64"), "arm64": fakeContext(t, "arm64")}
	out := t.TempDir()
	for _, target := range []string{"hub", "agent", "runner"} {
		t.Run(target, func(t *testing.T) {
			o := ImageOptions{Title: "magos-" + target, Version: "v9.8.7", Revision: "abc123", Created: created, Scratch: out}
			ref, err := ImageRef("ghcr.io/magosfleet", o.Title, o.Version)
			if err != nil {
				t.Fatal(err)
			}
			images := map[string]v1.Image{}
			for _, p := range Platforms {
				img, err := Build(stages[target], ctx[p.Architecture], p, o)
				if err != nil {
					t.Fatal(err)
				}
				images[PlatformString(p)] = img
				if err := WriteDockerArchive(filepath.Join(out, target+"-"+p.Architecture+".docker.tar"), img, ref); err != nil {
					t.Fatal(err)
				}
			}
			idx, err := Index(images, o)
			if err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(out, target+".oci.tar")
			if err := WriteOCIArchive(archive, idx, ref, out); err != nil {
				t.Fatal(err)
			}

			// Read the index back from the tar, as a consumer would.
			dir := t.TempDir()
			untar(t, archive, dir)
			lp, err := layout.FromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			top, err := lp.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			topManifest, err := top.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(topManifest.Manifests) != 1 || topManifest.Manifests[0].Annotations["io.containerd.image.name"] != "ghcr.io/magosfleet/magos-"+target+":v9.8.7" ||
				topManifest.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v9.8.7" {
				t.Fatalf("index.json: want one index named ghcr.io/magosfleet/magos-%s:v9.8.7 (ref.name v9.8.7), got %+v", target, topManifest.Manifests)
			}
			read, err := top.ImageIndex(topManifest.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			im, err := read.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if im.MediaType != types.OCIImageIndex {
				t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
			}
			var platforms []string
			for _, d := range im.Manifests {
				platforms = append(platforms, PlatformString(*d.Platform))
			}
			if want := []string{"linux/amd64", "linux/arm64"}; !reflect.DeepEqual(platforms, want) {
				t.Fatalf("index platforms %v, want exactly %v", platforms, want)
			}
			for _, d := range im.Manifests {
				arch := d.Platform.Architecture
				img, err := read.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				checkImage(t, stages[target], img, arch)

				// The docker tar of the platform holds the same image, tagged.
				fromDocker, err := tarball.ImageFromPath(filepath.Join(out, target+"-"+arch+".docker.tar"), &ref)
				if err != nil {
					t.Fatal(err)
				}
				if dd, _ := fromDocker.ConfigName(); dd != mustConfigName(t, img) {
					t.Errorf("%s: the docker tar's image config %s differs from the index's %s", arch, dd, mustConfigName(t, img))
				}
			}
		})
	}
}

func mustConfigName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkImage checks one image of the index against the stage it was built from.
func checkImage(t *testing.T, s *Stage, img v1.Image, arch string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532 (the Dockerfile's USER)", arch, cf.Config.User)
	}
	want := ConfigOf(s)
	if !reflect.DeepEqual(cf.Config.Entrypoint, want.Entrypoint) || !reflect.DeepEqual(cf.Config.Cmd, want.Cmd) || !reflect.DeepEqual(cf.Config.Env, want.Env) {
		t.Errorf("%s: config entrypoint %q cmd %q env %q, want %q %q %q", arch, cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env, want.Entrypoint, want.Cmd, want.Env)
	}
	if cf.Config.Labels[LabelVersion] != "v9.8.7" || cf.Config.Labels[LabelRevision] != "abc123" {
		t.Errorf("%s: labels %v, want version v9.8.7 and revision abc123", arch, cf.Config.Labels)
	}
	files := filesOf(t, img)
	if f := files["/tmp"]; !f.Dir || f.Mode != 0o1777 {
		t.Errorf("%s: /tmp is %+v, want a folder 1777", arch, f)
	}
	if f := files["/usr/local/bin"]; !f.Dir || f.Mode != 0o755 {
		t.Errorf("%s: /usr/local/bin is %+v, want a folder 0755", arch, f)
	}
	for _, c := range s.Copies {
		for _, src := range c.Sources {
			if !strings.HasPrefix(src, "bin/") {
				continue
			}
			p := c.Dest + strings.TrimPrefix(src, "bin/")
			f, ok := files[p]
			if !ok || f.Mode != 0o755 || f.Uid != 0 || f.Gid != 0 || !strings.HasSuffix(f.Content, " for "+arch) {
				t.Errorf("%s: %s is %+v (present %v), want root's 0755 file built for %s", arch, p, f, ok, arch)
			}
		}
	}
	if s.Name == "runner" {
		p := "/usr/local/share/magos/providers/registry.opentofu.org/hashicorp/time/0.14.2/linux_" + arch + "/terraform-provider-time_v0.14.2"
		if f := files[p]; f.Content != "time provider for "+arch {
			t.Errorf("%s: the runner has no provider mirror at %s: %+v", arch, p, f)
		}
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v: %s", archive, err, out)
	}
}

// TestImagesMatchDockerBuild builds each stage of the Dockerfile with `docker build` from the
// same fake context and compares: the config (user, entrypoint, command, environment) and every
// file (path, kind, mode, owner, content) must be the same as the release's image for the host's
// platform. Docker is the Dockerfile's reference reader; the test is skipped where no Docker
// engine answers, except under CI (MAGOS_CI), where it fails.
func TestImagesMatchDockerBuild(t *testing.T) {
	t.Parallel() // slow (a link, docker builds) and independent of the other tests
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		if os.Getenv("MAGOS_CI") != "" {
			t.Fatalf("CI (MAGOS_CI) needs a Docker engine: docker info: %v: %s", err, bytes.TrimSpace(out))
		}
		t.Skipf("no Docker engine (docker info: %v: %s)", err, bytes.TrimSpace(out))
	}
	stages := dockerfileStages(t)
	ctx := fakeContext(t, "amd64")
	dockerfile, err := filepath.Abs(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	parent := t
	for _, target := range []string{"hub", "agent", "runner"} {
		t.Run(target, func(t *testing.T) {
			tag := "magos-release-test-" + target + ":" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
			if out, err := exec.Command("docker", "build", "-q", "--target", target, "-t", tag, "-f", dockerfile, ctx).CombinedOutput(); err != nil {
				t.Fatalf("docker build --target %s: %v: %s", target, err, out)
			}
			saved := filepath.Join(t.TempDir(), "saved.tar")
			// Removed at the end: the builds share the engine's cache of the stages (the legacy
			// builder builds every stage before the target), and run one after the other.
			parent.Cleanup(func() { _ = exec.Command("docker", "rmi", tag).Run() })
			out, err := exec.Command("docker", "save", "-o", saved, tag).CombinedOutput()
			if err != nil {
				t.Fatalf("docker save: %v: %s", err, out)
			}
			ref, err := name.NewTag(tag)
			if err != nil {
				t.Fatal(err)
			}
			fromDocker, err := tarball.ImageFromPath(saved, &ref)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := Build(stages[target], ctx, v1.Platform{OS: "linux", Architecture: "amd64"}, ImageOptions{Title: "magos-" + target, Version: "v9.8.7", Revision: "abc123", Created: created, Scratch: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			dc, err := fromDocker.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			oc, err := ours.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				what         string
				docker, ours any
			}{
				{"user", dc.Config.User, oc.Config.User},
				{"entrypoint", dc.Config.Entrypoint, oc.Config.Entrypoint},
				{"cmd", dc.Config.Cmd, oc.Config.Cmd},
				{"env", dc.Config.Env, oc.Config.Env},
				{"layers", len(mustLayers(t, fromDocker)), len(mustLayers(t, ours))},
			} {
				if !reflect.DeepEqual(f.docker, f.ours) {
					t.Errorf("%s: docker build gives %#v, the release %#v", f.what, f.docker, f.ours)
				}
			}
			df, of := filesOf(t, fromDocker), filesOf(t, ours)
			for _, p := range union(df, of) {
				if df[p] != of[p] {
					t.Errorf("%s: docker build gives %+v, the release %+v", p, df[p], of[p])
				}
			}
		})
	}
}

func mustLayers(t *testing.T, img v1.Image) []v1.Layer {
	t.Helper()
	l, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func union(a, b map[string]file) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestBuildIsReproducible: two builds of one context and time give one digest.
func TestBuildIsReproducible(t *testing.T) {
	stages := dockerfileStages(t)
	ctx := fakeContext(t, "arm64")
	var digests []v1.Hash
	for range 2 {
		img, err := Build(stages["runner"], ctx, v1.Platform{OS: "linux", Architecture: "arm64"}, ImageOptions{Title: "magos-runner", Version: "v1.0.0", Revision: "r", Created: created, Scratch: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of one context: %s and %s", digests[0], digests[1])
	}
}

// TestIndexNeedsEveryPlatform: an index missing a platform is refused.
func TestIndexNeedsEveryPlatform(t *testing.T) {
	stages := dockerfileStages(t)
	img, err := Build(stages["agent"], fakeContext(t, "amd64"), Platforms[0], ImageOptions{Title: "magos-agent", Created: created, Scratch: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Index(map[string]v1.Image{"linux/amd64": img}, ImageOptions{Title: "magos-agent"})
	if err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("want an error naming linux/arm64, got %v", err)
	}
}
