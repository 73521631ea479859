// Package atomicfile writes files that a crash or power cut leaves whole or
// absent, never torn: data goes to a temporary file beside the target, is
// fsync'd, renamed over the target, and the directory is fsync'd so the
// rename itself survives. Every package that replaces a file a later run
// reads (keys, checkpoints, caches, archives, models) writes through here,
// so they all get the same guarantee rather than each its own near-copy.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TempSuffix ends the name of a file Create has not yet committed. A reader
// that lists a directory skips such files; a start-up sweep may remove
// them, since a process killed mid-write leaves them behind.
const TempSuffix = ".tmp"

// IsTemp reports whether name is one of Create's temporary files.
func IsTemp(name string) bool { return strings.HasSuffix(name, TempSuffix) }

// File is a file being written. Commit makes it visible under its target
// name; Abort (safe to defer, a no-op after Commit) removes it.
type File struct {
	*os.File
	target string
	done   bool
}

// Create starts writing path: a temporary file named path's base + ".*" +
// TempSuffix in path's directory, with permission perm from the start (a
// private key is never readable by others, even briefly).
func Create(path string, perm os.FileMode) (*File, error) {
	return CreateTemp(filepath.Dir(path), filepath.Base(path)+".*"+TempSuffix, path, perm)
}

// CreateTemp is Create with the temporary file's name pattern given (as for
// os.CreateTemp) for callers whose sweep looks for their own pattern. The
// target may be changed at commit with CommitAs.
func CreateTemp(dir, pattern, target string, perm os.FileMode) (*File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{File: f, target: target}, nil
}

// Commit fsyncs the file, renames it over its target and fsyncs the
// directory. On error the temporary file is removed and the target is as
// it was.
func (f *File) Commit() error { return f.CommitAs(f.target) }

// CommitAs is Commit to a target chosen only now (an archive file named by
// the key range it turned out to hold). The target must be in the same
// directory, or at least on the same file system, as the temporary file.
func (f *File) CommitAs(target string) error {
	if f.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	f.done = true
	err := errors.Join(f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), target)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("atomicfile: write %s: %w", target, err)
	}
	if err := SyncDir(filepath.Dir(target)); err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", target, err)
	}
	return nil
}

// Abort closes and removes the unfinished file. After Commit it does
// nothing, so `defer f.Abort()` covers every early return.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
}

// WriteFile replaces path with data, whole or not at all.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", path, err)
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", path, err)
	}
	return f.Commit()
}

// SyncDir fsyncs a directory, which makes the entries created, renamed or
// removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
