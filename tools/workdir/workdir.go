// Package workdir owns the one rule for folders the tools fill and empty again (magos-dev --dir,
// the demo's repository): a tool removes only what it created. A folder a tool creates gets a
// marker file, Marker, saying what made it; a tool empties a folder only when the marker is
// there, and refuses a folder that holds anything else and no marker, leaving it untouched.
// Temporary folders a program makes itself with os.MkdirTemp need none of this.
package workdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Marker is the name of the file that marks a folder as made by a Magos tool.
const Marker = ".magos-dev"

// Prepare makes dir ready for the tool named by to fill: a missing or empty dir is created and
// marked; a marked dir is emptied (it was made by a Magos tool); a dir that holds anything and
// no marker is refused with an error that says what to do, and nothing in it is touched.
func Prepare(dir, by string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case len(entries) > 0 && !marked(dir):
		return fmt.Errorf("%s is not empty and was not made by a Magos tool (it has no %s file): "+
			"refusing to empty it; choose a new or empty folder, or delete this one yourself", dir, Marker)
	default:
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("emptying %s: %w", dir, err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return writeMarker(dir, by)
}

// Claim marks dir (created if missing) as a Magos tool's own without looking inside: only for a
// folder in Magos's own cache (~/.cache/magos), which earlier versions filled without a marker.
func Claim(dir, by string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if marked(dir) {
		return nil
	}
	return writeMarker(dir, by)
}

func writeMarker(dir, by string) error {
	note := fmt.Sprintf("Made by %s. Magos tools empty this folder when they use it again; remove this file to keep them from doing so.\n", by)
	if err := os.WriteFile(filepath.Join(dir, Marker), []byte(note), 0o644); err != nil {
		return fmt.Errorf("marking %s: %w", dir, err)
	}
	return nil
}

func marked(dir string) bool {
	info, err := os.Lstat(filepath.Join(dir, Marker))
	return err == nil && info.Mode().IsRegular()
}
