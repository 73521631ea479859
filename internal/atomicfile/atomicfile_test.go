package atomicfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/phaseless/phaseless/internal/crashtest"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key.pem")
	for _, data := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	onlyFiles(t, dir, "key.pem")
}

func TestAbortLeavesTargetAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gguf")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if !IsTemp(filepath.Base(f.Name())) {
		t.Errorf("temporary file %s does not end in %s", f.Name(), TempSuffix)
	}
	f.Write([]byte("half of the new"))
	f.Abort()
	f.Abort() // a second Abort (the deferred one) is harmless
	if err := f.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Errorf("target %q after abort, want the old content", got)
	}
	onlyFiles(t, dir, "model.gguf")
}

func TestCommitFailureRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(filepath.Join(dir, "x"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// A target in a directory that does not exist: the rename fails.
	if err := f.CommitAs(filepath.Join(dir, "missing", "x")); err == nil {
		t.Fatal("commit into a missing directory succeeded")
	}
	onlyFiles(t, dir)
}

// TestKillMidWrite kills a process that rewrites one file over and over:
// after every kill the file holds one whole version, at least the last one
// the child saw committed.
func TestKillMidWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	last := -1
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 30),
		Arg:    path,
		Child: func(path string, ack *crashtest.Acker) {
			start := 0
			if b, err := os.ReadFile(path); err == nil {
				n, ok := parseVersion(b)
				if !ok {
					crashtest.Fail("torn file at start")
				}
				start = n + 1
			}
			for n := start; ; n++ {
				if err := WriteFile(path, version(n), 0o644); err != nil {
					crashtest.Fail("write: %v", err)
				}
				ack.Ack("%d", n)
			}
		},
		Verify: func(t *testing.T, round int, acked, _ []string) {
			if len(acked) > 0 {
				last, _ = strconv.Atoi(acked[len(acked)-1])
			}
			b, err := os.ReadFile(path)
			if last < 0 && os.IsNotExist(err) {
				return
			}
			n, ok := parseVersion(b)
			if err != nil || !ok {
				t.Fatalf("round %d: file torn or missing (%v) after the kill", round, err)
			}
			if n < last {
				t.Fatalf("round %d: file holds version %d, but %d was committed", round, n, last)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			for _, e := range entries {
				if IsTemp(e.Name()) {
					os.Remove(filepath.Join(filepath.Dir(path), e.Name())) // a killed write's leftover, as a start-up sweep removes
				}
			}
		},
	})
}

// version is n's file: a header and 256 KiB that depend on n, so a file
// cut short or mixed from two versions does not parse.
func version(n int) []byte {
	body := bytes.Repeat([]byte{byte(n)}, 256<<10)
	return append(fmt.Appendf(nil, "%d %d\n", n, len(body)), body...)
}

func parseVersion(b []byte) (int, bool) {
	var n, size int
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return 0, false
	}
	if _, err := fmt.Sscanf(string(b[:i]), "%d %d", &n, &size); err != nil {
		return 0, false
	}
	return n, bytes.Equal(b, version(n)) && size == 256<<10
}

func onlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("directory holds %v, want %v", got, want)
	}
}
