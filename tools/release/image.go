package release

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultPath is the PATH Docker gives an image built FROM scratch whose Dockerfile sets none;
// the release's images carry the same, so they match what `docker build` makes of the Dockerfile.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Label keys the images carry (the OCI image spec's annotations, as config labels).
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
)

// ImageOptions says how to assemble one image of a stage.
type ImageOptions struct {
	// Title names the image (org.opencontainers.image.title), e.g. magos-hub.
	Title string
	// Version and Revision are stamped into the labels: the release version and its commit.
	Version, Revision string
	// Created is the image's creation time and the modification time of every file in its
	// layers, so that two builds of one commit give the same digests.
	Created time.Time
	// Scratch is a folder for the layers' files while they are built; they are kept there until
	// the image is written.
	Scratch string
}

// Build assembles the image of stage s for platform p from the build context dir, a folder
// laid out as the Dockerfile's COPY sources expect: one layer per COPY, the config as the
// Dockerfile sets it, no base image.
func Build(s *Stage, contextDir string, p v1.Platform, o ImageOptions) (v1.Image, error) {
	if o.Scratch == "" {
		return nil, fmt.Errorf("image %s: ImageOptions.Scratch is empty", o.Title)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, c := range s.Copies {
		file := filepath.Join(o.Scratch, fmt.Sprintf("%s-%s-%s-%d.tar.gz", o.Title, p.OS, p.Architecture, i))
		if err := writeLayer(file, contextDir, c, o.Created); err != nil {
			return nil, fmt.Errorf("image %s (%s/%s), COPY %s: %w", o.Title, p.OS, p.Architecture, strings.Join(c.Sources, " "), err)
		}
		layer, err := tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer: layer,
			History: v1.History{
				Created:   v1.Time{Time: o.Created},
				CreatedBy: fmt.Sprintf("COPY %s %s", strings.Join(c.Sources, " "), c.Dest),
				Comment:   "tools/release",
			},
		})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = ConfigOf(s)
	cf.Config.Labels = map[string]string{
		LabelTitle:    o.Title,
		LabelVersion:  o.Version,
		LabelRevision: o.Revision,
		LabelCreated:  o.Created.UTC().Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cf)
}

// ConfigOf is the runtime config Docker gives the stage s: its user, entrypoint and command,
// and its environment with Docker's default PATH first when the Dockerfile sets none.
func ConfigOf(s *Stage) v1.Config {
	env := append([]string(nil), s.Env...)
	hasPath := false
	for _, e := range env {
		hasPath = hasPath || strings.HasPrefix(e, "PATH=")
	}
	if !hasPath {
		env = append([]string{DefaultPath}, env...)
	}
	return v1.Config{User: s.User, Env: env, Entrypoint: s.Entrypoint, Cmd: s.Cmd}
}

// writeLayer writes the files of one COPY as a gzipped tar: owned by root, modes as in the
// context (the sticky bit included), every time set to mtime, folders the destination needs
// created 0755 as Docker does, entries in a fixed order.
func writeLayer(file, contextDir string, c Copy, mtime time.Time) (err error) {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	w := &layerWriter{tw: tw, mtime: mtime, seen: map[string]bool{}}
	for _, src := range c.Sources {
		full := filepath.Join(contextDir, filepath.FromSlash(strings.TrimSuffix(src, "/")))
		info, err := os.Lstat(full)
		if err != nil {
			return fmt.Errorf("the build context has no %s: %w", src, err)
		}
		if info.IsDir() {
			// A folder's contents are copied into the destination, as by Docker's COPY.
			if err := w.parents(c.Dest); err != nil {
				return err
			}
			if err := w.tree(full, strings.TrimSuffix(c.Dest, "/")); err != nil {
				return err
			}
			continue
		}
		dest := c.Dest
		if strings.HasSuffix(dest, "/") {
			dest = path.Join(dest, path.Base(src))
		}
		if err := w.parents(path.Dir(dest)); err != nil {
			return err
		}
		if err := w.entry(full, dest, info); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

type layerWriter struct {
	tw    *tar.Writer
	mtime time.Time
	seen  map[string]bool
}

// parents adds the folders leading to dir (dir included) that the layer does not hold yet.
func (w *layerWriter) parents(dir string) error {
	dir = path.Clean("/" + dir)
	if dir == "/" {
		return nil
	}
	var chain []string
	for d := dir; d != "/"; d = path.Dir(d) {
		chain = append(chain, d)
	}
	sort.Strings(chain) // a parent sorts before its children
	for _, d := range chain {
		name := strings.TrimPrefix(d, "/") + "/"
		if w.seen[name] {
			continue
		}
		w.seen[name] = true
		if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: w.mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return nil
}

// tree adds the contents of the folder src under dest, in lexical order.
func (w *layerWriter) tree(src, dest string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		return w.entry(p, path.Join(dest, filepath.ToSlash(rel)), info)
	})
}

// entry adds one file, folder or symbolic link at dest.
func (w *layerWriter) entry(src, dest string, info fs.FileInfo) error {
	link := ""
	if info.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(src); err != nil {
			return err
		}
	} else if !info.Mode().IsRegular() && !info.IsDir() {
		return fmt.Errorf("%s: only files, folders and symbolic links can be copied", src)
	}
	h, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	h.Name = strings.TrimPrefix(path.Clean("/"+dest), "/")
	if info.IsDir() {
		h.Name += "/"
	}
	if w.seen[h.Name] {
		return nil
	}
	w.seen[h.Name] = true
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.ModTime, h.AccessTime, h.ChangeTime = w.mtime, time.Time{}, time.Time{}
	h.Format = tar.FormatPAX
	if err := w.tw.WriteHeader(h); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w.tw, f)
	return err
}
