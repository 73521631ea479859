// Package diskcache keeps a directory of cache files bounded in total size:
// each file is written whole or not at all (temporary file, fsync, rename,
// fsync of the directory), and when the files pass the bound the least
// recently used go first, recency being a file's modification time, which
// Touch refreshes. The engine's prompt-state cache (models/lm) keeps the KV
// blocks of stable prompt prefixes here so they survive a restart.
//
// The directory is not locked: two engines (the one serving and its
// replacement during a model swap) may share it. Every name is written by
// rename, so a reader sees an old file, a new one or none, and a file
// another process removed first is not an error.
package diskcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/phaseless/phaseless/internal/atomicfile"
)

// tmpSuffix marks a file still being written; Open removes those a killed
// process left behind.
const tmpSuffix = atomicfile.TempSuffix

// Dir is one cache directory. Its methods are safe for concurrent use (they
// keep no state but the directory's).
type Dir struct {
	path     string
	maxBytes int64
	now      func() time.Time
}

// Entry is one cached file.
type Entry struct {
	Name string
	Size int64
	Used time.Time // the last write or Touch
}

// Open makes (if needed) the directory path, whose files Write keeps within
// maxBytes, and removes the temporary files of writes a crash interrupted.
// now is the clock Touch stamps with (nil: time.Now).
func Open(path string, maxBytes int64, now func() time.Time) (*Dir, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("diskcache: bound %d bytes must be positive", maxBytes)
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	d := &Dir{path: path, maxBytes: maxBytes, now: now}
	des, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	for _, de := range des {
		if strings.HasSuffix(de.Name(), tmpSuffix) {
			os.Remove(filepath.Join(path, de.Name())) // best effort: the next Open tries again
		}
	}
	return d, nil
}

// Path is the directory.
func (d *Dir) Path() string { return d.path }

// MaxBytes is the bound on the files' total size.
func (d *Dir) MaxBytes() int64 { return d.maxBytes }

// List returns the cached files, most recently used first.
func (d *Dir) List() ([]Entry, error) {
	des, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if !de.Type().IsRegular() || strings.HasSuffix(de.Name(), tmpSuffix) {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, Entry{Name: de.Name(), Size: fi.Size(), Used: fi.ModTime()})
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return b.Used.Compare(a.Used) })
	return out, nil
}

// Read returns a file's contents.
func (d *Dir) Read(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(d.path, name))
}

// ErrTooLarge is returned by Write for data larger than the bound.
var ErrTooLarge = errors.New("diskcache: file larger than the cache's bound")

// Write stores data as name, replacing any file of that name, then removes
// the least recently used other files until the total fits the bound. A
// crash leaves the old file, the new one, or (for a new name) none.
func (d *Dir) Write(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if int64(len(data)) > d.maxBytes {
		return fmt.Errorf("%w: %d bytes, bound %d", ErrTooLarge, len(data), d.maxBytes)
	}
	if err := atomicfile.WriteFile(filepath.Join(d.path, name), data, 0o644); err != nil {
		return fmt.Errorf("diskcache: write %s: %w", name, err)
	}
	if err := d.Touch(name); err != nil { // on the injected clock, as Touch stamps
		return err
	}
	return d.trim(name)
}

// trim removes the least recently used files, never keep, until the rest
// fit the bound.
func (d *Dir) trim(keep string) error {
	es, err := d.List()
	if err != nil {
		return err
	}
	var total int64
	for _, e := range es {
		total += e.Size
	}
	for i := len(es) - 1; i >= 0 && total > d.maxBytes; i-- {
		if es[i].Name == keep {
			continue
		}
		if err := d.Remove(es[i].Name); err != nil {
			return err
		}
		total -= es[i].Size
	}
	return nil
}

// Touch marks a file as used now, so trimming takes it last. A file that
// is gone (trimmed by another writer) reports an error wrapping
// fs.ErrNotExist.
func (d *Dir) Touch(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	t := d.now()
	if err := os.Chtimes(filepath.Join(d.path, name), t, t); err != nil {
		return fmt.Errorf("diskcache: %w", err)
	}
	return nil
}

// Remove deletes a file; one already gone is not an error.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d.path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("diskcache: %w", err)
	}
	return nil
}

// checkName keeps names inside the directory and clear of the temporary
// files' suffix.
func checkName(name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." || strings.HasSuffix(name, tmpSuffix) {
		return fmt.Errorf("diskcache: bad file name %q", name)
	}
	return nil
}
