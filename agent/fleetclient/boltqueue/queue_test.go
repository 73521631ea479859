package boltqueue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/autopaho/queue"
	"github.com/phaseless/phaseless/agent/internal/bolttest"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openQueue opens a queue file and checks its consistency at cleanup.
func openQueue(t *testing.T, cfg Config) (*Queue, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "queue.db")
	q, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		bolttest.Check(t, path)
	})
	return q, path
}

// pop peeks, reads and removes the head entry.
func pop(t *testing.T, q *Queue) string {
	t.Helper()
	e, err := q.Peek()
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	r, err := e.Reader()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	return string(b)
}

func enqueue(t *testing.T, q *Queue, s string) {
	t.Helper()
	if err := q.Enqueue(strings.NewReader(s)); err != nil {
		t.Fatalf("enqueue %q: %v", s, err)
	}
}

// TestQueueContract follows the semantics autopaho relies on (the same
// steps as upstream's file queue test): ErrEmpty, Wait, FIFO, Leave,
// Quarantine.
func TestQueueContract(t *testing.T) {
	q, _ := openQueue(t, Config{})
	if _, err := q.Peek(); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("empty Peek: %v, want ErrEmpty", err)
	}
	w := q.Wait()
	select {
	case <-w:
		t.Fatal("Wait closed on an empty queue")
	default:
	}
	enqueue(t, q, "first")
	select {
	case <-w:
	default:
		t.Fatal("Wait not closed after Enqueue")
	}
	select {
	case <-q.Wait():
	default:
		t.Fatal("Wait on a non-empty queue must return a closed channel")
	}
	// Far more entries than a file system's mtime resolution could order.
	for i := range 500 {
		enqueue(t, q, fmt.Sprintf("entry %d", i))
	}
	e, err := q.Peek()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Leave(); err != nil {
		t.Fatal(err)
	}
	if got := pop(t, q); got != "first" {
		t.Fatalf("after Leave, head = %q, want first", got)
	}
	e, _ = q.Peek()
	if err := e.Quarantine(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 500; i++ {
		if got, want := pop(t, q), fmt.Sprintf("entry %d", i); got != want {
			t.Fatalf("pop = %q, want %q", got, want)
		}
	}
	if _, err := q.Peek(); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Peek after draining: %v", err)
	}
	if st := q.Stats(); st.Entries != 0 || st.Bytes != 0 || st.Corrupt != 1 {
		t.Errorf("stats = %+v, want empty with one quarantined", st)
	}
}

func TestQueueSurvivesReopenInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, "a")
	enqueue(t, q, "b")
	if got := pop(t, q); got != "a" {
		t.Fatalf("pop = %q", got)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := q.Enqueue(strings.NewReader("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	q2, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q2.Close(); bolttest.Check(t, path) }()
	enqueue(t, q2, "c")
	if st := q2.Stats(); st.Entries != 2 {
		t.Fatalf("entries after reopen = %d", st.Entries)
	}
	select {
	case <-q2.Wait():
	default:
		t.Fatal("reopened non-empty queue: Wait not closed")
	}
	for _, want := range []string{"b", "c"} {
		if got := pop(t, q2); got != want {
			t.Fatalf("pop = %q, want %q (ids must keep growing across restarts)", got, want)
		}
	}
}

func TestQueueBound(t *testing.T) {
	t.Run("drop oldest", func(t *testing.T) {
		q, _ := openQueue(t, Config{MaxEntries: 3})
		for i := range 7 {
			enqueue(t, q, fmt.Sprint(i))
		}
		if st := q.Stats(); st.Entries != 3 || st.Dropped != 4 {
			t.Fatalf("stats = %+v", st)
		}
		for _, want := range []string{"4", "5", "6"} {
			if got := pop(t, q); got != want {
				t.Fatalf("pop = %q, want %q", got, want)
			}
		}
	})
	t.Run("reject new", func(t *testing.T) {
		q, _ := openQueue(t, Config{MaxBytes: 20, MaxEntryBytes: 10, WhenFull: RejectNew})
		enqueue(t, q, "0123456789") // 14 bytes stored with its checksum
		if err := q.Enqueue(strings.NewReader("0123456789")); !errors.Is(err, ErrFull) {
			t.Fatalf("second entry: %v, want ErrFull", err)
		}
		if err := q.Enqueue(strings.NewReader("0123456789a")); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversized entry: %v, want ErrTooLarge", err)
		}
		if st := q.Stats(); st.Entries != 1 || st.Rejected != 1 {
			t.Fatalf("stats = %+v", st)
		}
		if got := pop(t, q); got != "0123456789" {
			t.Fatalf("pop = %q", got)
		}
	})
	t.Run("empty entry", func(t *testing.T) {
		q, _ := openQueue(t, Config{})
		if err := q.Enqueue(bytes.NewReader(nil)); err == nil {
			t.Fatal("empty entry accepted")
		}
	})
}

// TestCorruptEntryIsSkippedNotLooped is upstream issue #193: a damaged
// entry must be reported and moved aside once, never returned again.
func TestCorruptEntryIsSkippedNotLooped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"good-1", "bad-2", "bad-3", "good-4"} {
		enqueue(t, q, s)
	}
	q.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("queue"))
		v := append([]byte(nil), b.Get(idKey(2))...)
		v[len(v)-1] ^= 1 // bit flip
		if err := b.Put(idKey(2), v); err != nil {
			return err
		}
		return b.Put(idKey(3), []byte{}) // the empty file of #193
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var mu sync.Mutex
	var reported []uint64
	q, err = Open(path, Config{OnCorrupt: func(id uint64, err error) {
		mu.Lock()
		reported = append(reported, id)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close(); bolttest.Check(t, path) }()
	for _, want := range []string{"good-1", "good-4"} {
		if got := pop(t, q); got != want {
			t.Fatalf("pop = %q, want %q", got, want)
		}
	}
	if _, err := q.Peek(); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Peek: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 2 || reported[0] != 2 || reported[1] != 3 {
		t.Fatalf("reported %v, want [2 3]", reported)
	}
	if st := q.Stats(); st.Corrupt != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestSharedDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := New(db, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(db, "b", Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, a, "to-a")
	enqueue(t, b, "to-b")
	if got := pop(t, b); got != "to-b" {
		t.Fatalf("b: %q", got)
	}
	if got := pop(t, a); got != "to-a" {
		t.Fatalf("a: %q", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatalf("Close of a queue on a shared DB closed the DB: %v", err)
	}
	if _, err := New(db, "", Config{}); err == nil {
		t.Fatal("empty name accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{MaxEntries: -1}, "MaxEntries"},
		{Config{MaxBytes: -1}, "MaxBytes"},
		{Config{MaxBytes: 5, MaxEntryBytes: 6}, "MaxEntryBytes"},
		{Config{WhenFull: 7}, "WhenFull"},
		{Config{KeepQuarantined: -1}, "KeepQuarantined"},
		{Config{OpenTimeout: -1}, "OpenTimeout"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

// FuzzDecode feeds arbitrary stored values to the entry decoder.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Add([]byte{})
	good := make([]byte, 4+3)
	copy(good[4:], "abc")
	f.Add(good)
	f.Fuzz(func(t *testing.T, v []byte) {
		data, err := decode(idKey(1), v)
		if err == nil && !bytes.Equal(data, v[4:]) {
			t.Fatalf("decoded %x from %x", data, v)
		}
	})
}
