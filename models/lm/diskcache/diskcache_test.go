package diskcache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// clock is a fake clock the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func names(t *testing.T, d *Dir) []string {
	t.Helper()
	es, err := d.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// TestWriteKeepsBoundLeastRecentlyUsedFirst: past the bound the least
// recently written or touched files go, never the one just written.
func TestWriteKeepsBoundLeastRecentlyUsedFirst(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	d, err := Open(t.TempDir(), 300, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, n int) {
		t.Helper()
		clk.t = clk.t.Add(time.Second)
		if err := d.Write(name, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	put("a", 100)
	put("b", 100)
	put("c", 100)
	if got := names(t, d); !slices.Equal(got, []string{"c", "b", "a"}) {
		t.Fatalf("files %v, want newest first", got)
	}
	clk.t = clk.t.Add(time.Second)
	if err := d.Touch("a"); err != nil {
		t.Fatal(err)
	}
	put("d", 100) // 400 bytes: b, the least recently used, goes
	if got := names(t, d); !slices.Equal(got, []string{"d", "a", "c"}) {
		t.Fatalf("files %v after a write past the bound, want d a c", got)
	}
	put("a", 250) // replaces a; c and d must go to fit
	if got := names(t, d); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("files %v, want only the rewritten a", got)
	}
	if err := d.Write("e", make([]byte, 301)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file over the bound: %v", err)
	}
	if got := names(t, d); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a refused write changed the files: %v", got)
	}
	if err := d.Touch("gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("touching a missing file: %v", err)
	}
	if err := d.Remove("gone"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
}

// TestOpenRemovesInterruptedWrites: the temporary file of a write a crash
// cut short is removed by the next Open and never listed.
func TestOpenRemovesInterruptedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	d, err := Open(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write("kept", []byte("whole")); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(path, "next.123"+tmpSuffix)
	if err := os.WriteFile(torn, []byte("ha"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := names(t, d); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("listed %v", got)
	}
	if _, err := Open(path, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(torn); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("interrupted write still there: %v", err)
	}
	if b, err := d.Read("kept"); err != nil || string(b) != "whole" {
		t.Fatalf("read %q, %v", b, err)
	}
}

func TestNamesStayInside(t *testing.T) {
	d, err := Open(t.TempDir(), 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "..", "../x", "a/b", "x" + tmpSuffix} {
		if err := d.Write(name, nil); err == nil || !strings.Contains(err.Error(), "bad file name") {
			t.Errorf("Write(%q): %v", name, err)
		}
	}
	if _, err := Open(t.TempDir(), 0, nil); err == nil {
		t.Fatal("opened with a bound of 0 bytes")
	}
}
