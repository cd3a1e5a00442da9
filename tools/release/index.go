package release

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Platforms are the platforms every release image is built for, in the order of the index.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// PlatformString spells a platform as the release's file names and flags do: linux/arm64.
func PlatformString(p v1.Platform) string { return p.OS + "/" + p.Architecture }

// Index puts one image per platform into one OCI image index, annotated with the version and
// revision like the images' labels.
func Index(images map[string]v1.Image, o ImageOptions) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.Annotations(idx, map[string]string{
		LabelTitle:    o.Title,
		LabelVersion:  o.Version,
		LabelRevision: o.Revision,
		LabelCreated:  o.Created.UTC().Format(time.RFC3339),
	}).(v1.ImageIndex)
	for _, p := range Platforms {
		img, ok := images[PlatformString(p)]
		if !ok {
			return nil, fmt.Errorf("index %s: no image for %s", o.Title, PlatformString(p))
		}
		platform := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &platform},
		})
	}
	return idx, nil
}

// WriteOCIArchive writes idx as an OCI image layout packed in a tar file at file. The layout's
// index.json names it twice: org.opencontainers.image.ref.name is the tag (what skopeo's
// oci-archive:FILE:TAG asks for) and io.containerd.image.name the full reference (what
// `docker load` with the containerd image store and `ctr import` tag it as).
func WriteOCIArchive(file string, idx v1.ImageIndex, ref name.Tag, scratch string) error {
	dir, err := os.MkdirTemp(scratch, "layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	}))
	if err != nil {
		return err
	}
	return tarFolder(file, dir)
}

// WriteDockerArchive writes img in the format of `docker save`, tagged ref, for engines whose
// `docker load` takes no OCI layout (those without the containerd image store).
func WriteDockerArchive(file string, img v1.Image, ref name.Tag) error {
	return tarball.WriteToFile(file, ref, img)
}

// tarFolder packs the folder dir into the tar file at file: entries relative to dir, in
// lexical order, owned by root, with a fixed time.
func tarFolder(file, dir string) (err error) {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// ImageRef is the reference an image of the release is tagged as: REPO/NAME:VERSION, e.g.
// ghcr.io/magosfleet/magos-hub:v0.1.0 (the charts' default image.repository and appVersion).
func ImageRef(repo, title, version string) (name.Tag, error) {
	return name.NewTag(strings.TrimSuffix(repo, "/")+"/"+title+":"+version, name.StrictValidation)
}
