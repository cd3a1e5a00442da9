// Command magos-release builds the parts of a release that are not binaries; `make release`
// runs it (docs/releasing.md):
//
//	magos-release check  --version vX.Y.Z --version-file VERSION --changelog CHANGELOG.md
//	magos-release images --version vX.Y.Z --revision SHA --created RFC3339 --repo ghcr.io/magosfleet \
//	    --context linux/amd64=DIR --context linux/arm64=DIR --out DIR [--targets hub,agent,runner]
//	magos-release charts --version vX.Y.Z --out DIR CHART_DIR...
//	magos-release notes  --version vX.Y.Z --changelog CHANGELOG.md --out FILE
//	magos-release sums   DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/magosfleet/magos/tools/release"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: magos-release check|images|charts|notes|sums [flags]")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "check":
		err = check(args)
	case "images":
		err = images(args)
	case "charts":
		err = charts(args)
	case "notes":
		err = notes(args)
	case "sums":
		if len(args) != 1 {
			err = fmt.Errorf("sums: want one folder")
		} else {
			err = release.WriteChecksums(args[0])
		}
	default:
		err = fmt.Errorf("unknown command %q: want check, images, charts, notes or sums", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "magos-release:", err)
		os.Exit(1)
	}
}

func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	version := fs.String("version", "", "the release version, vX.Y.Z")
	file := fs.String("version-file", "VERSION", "the VERSION file")
	changelog := fs.String("changelog", "CHANGELOG.md", "the changelog, which must have the version's notes")
	_ = fs.Parse(args)
	b, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	if err := release.CheckVersion(*version, string(b)); err != nil {
		return err
	}
	c, err := os.ReadFile(*changelog)
	if err != nil {
		return err
	}
	_, err = release.ReleaseNotes(string(c), *version)
	return err
}

// contexts is --context PLATFORM=DIR, repeated.
type contexts map[string]string

func (c contexts) String() string { return fmt.Sprint(map[string]string(c)) }
func (c contexts) Set(s string) error {
	p, dir, ok := strings.Cut(s, "=")
	if !ok || dir == "" {
		return fmt.Errorf("%q: want PLATFORM=DIR, e.g. linux/arm64=bin/context-arm64", s)
	}
	c[p] = dir
	return nil
}

func images(args []string) error {
	fs := flag.NewFlagSet("images", flag.ExitOnError)
	dockerfile := fs.String("dockerfile", "Dockerfile", "the Dockerfile describing the images")
	version := fs.String("version", "", "the release version, the images' tag")
	revision := fs.String("revision", "", "the commit released")
	created := fs.String("created", "", "the images' creation time (RFC 3339; the commit's time)")
	repo := fs.String("repo", "ghcr.io/magosfleet", "the repository prefix the images are tagged with")
	targets := fs.String("targets", "hub,agent,runner", "the Dockerfile's stages to build; image NAME is magos-NAME")
	out := fs.String("out", "", "the release folder")
	ctx := contexts{}
	fs.Var(ctx, "context", "PLATFORM=DIR: the build context of one platform (repeated)")
	_ = fs.Parse(args)
	if *version == "" || *revision == "" || *out == "" {
		return fmt.Errorf("images: --version, --revision and --out are required")
	}
	when, err := time.Parse(time.RFC3339, *created)
	if err != nil {
		return fmt.Errorf("images: --created: %w", err)
	}
	f, err := os.Open(*dockerfile)
	if err != nil {
		return err
	}
	stages, err := release.ParseDockerfile(f)
	f.Close()
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp(*out, ".scratch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	for _, target := range strings.Split(*targets, ",") {
		stage, ok := stages[target]
		if !ok {
			return fmt.Errorf("images: the Dockerfile has no stage %q", target)
		}
		o := release.ImageOptions{Title: "magos-" + target, Version: *version, Revision: *revision, Created: when, Scratch: scratch}
		ref, err := release.ImageRef(*repo, o.Title, *version)
		if err != nil {
			return err
		}
		byPlatform := map[string]v1.Image{}
		for _, p := range release.Platforms {
			dir, ok := ctx[release.PlatformString(p)]
			if !ok {
				return fmt.Errorf("images: no --context for %s", release.PlatformString(p))
			}
			img, err := release.Build(stage, dir, p, o)
			if err != nil {
				return err
			}
			byPlatform[release.PlatformString(p)] = img
			file := filepath.Join(*out, fmt.Sprintf("%s-%s-%s-%s.docker.tar", o.Title, *version, p.OS, p.Architecture))
			if err := release.WriteDockerArchive(file, img, ref); err != nil {
				return err
			}
		}
		idx, err := release.Index(byPlatform, o)
		if err != nil {
			return err
		}
		file := filepath.Join(*out, fmt.Sprintf("%s-%s.oci.tar", o.Title, *version))
		if err := release.WriteOCIArchive(file, idx, ref, scratch); err != nil {
			return err
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "release: %s %s -> %s\n", ref.Name(), digest, file)
	}
	return nil
}

func charts(args []string) error {
	fs := flag.NewFlagSet("charts", flag.ExitOnError)
	version := fs.String("version", "", "the release version")
	out := fs.String("out", "", "the release folder")
	_ = fs.Parse(args)
	if *version == "" || *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("charts: --version, --out and chart folders are required")
	}
	for _, dir := range fs.Args() {
		file, err := release.PackageChart(dir, *version, *out)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "release: chart %s -> %s\n", dir, file)
	}
	return nil
}

func notes(args []string) error {
	fs := flag.NewFlagSet("notes", flag.ExitOnError)
	version := fs.String("version", "", "the release version")
	changelog := fs.String("changelog", "CHANGELOG.md", "the changelog")
	out := fs.String("out", "", "the notes file to write")
	_ = fs.Parse(args)
	b, err := os.ReadFile(*changelog)
	if err != nil {
		return err
	}
	n, err := release.ReleaseNotes(string(b), *version)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, []byte(n), 0o644)
}
