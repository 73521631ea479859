package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/agent/internal/bolttest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a store in a temp dir and, at cleanup, closes it and runs
// bbolt's consistency check over the file.
func openStore(t testing.TB, cfg Config) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "telemetry.db")
	s, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		bolttest.Check(t, path)
	})
	return s, path
}

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func TestAppendPendingAck(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, path := openStore(t, Config{Now: fixedClock(now)})

	var seqs []uint64
	for i := range 5 {
		seq, err := s.Append(ctx, "request", fmt.Appendf(nil, `{"i":%d}`, i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if first := uint64(now.UnixMicro()); seqs[0] != first {
		t.Errorf("first seq of a new file = %d, want the creation time in µs %d", seqs[0], first)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("seqs not consecutive: %v", seqs)
		}
	}
	got, err := s.Pending(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != seqs[0] || got[2].Seq != seqs[2] {
		t.Fatalf("Pending(3) = %+v, want the three oldest", got)
	}
	if got[1].Kind != "request" || string(got[1].Data) != `{"i":1}` || !got[1].Time.Equal(now) {
		t.Errorf("record 1 = %+v", got[1])
	}
	if err := s.Ack(seqs[1]); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Pending(10)
	if len(got) != 3 || got[0].Seq != seqs[2] {
		t.Fatalf("after Ack(%d): %+v", seqs[1], got)
	}
	after, _ := s.PendingAfter(seqs[3], 10)
	if len(after) != 1 || after[0].Seq != seqs[4] {
		t.Fatalf("PendingAfter(%d) = %+v", seqs[3], after)
	}
	if st := s.Stats(); st.Records != 3 || st.NextSeq != seqs[4]+1 || st.Appends != 5 {
		t.Errorf("stats = %+v", st)
	}

	// Seqs survive a restart, even with everything acknowledged.
	if err := s.Ack(seqs[4]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, Config{Now: fixedClock(now.Add(-time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	seq, err := s2.Append(ctx, "request", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if seq != seqs[4]+1 {
		t.Errorf("seq after reopen = %d, want %d", seq, seqs[4]+1)
	}
	if st := s2.Stats(); st.Records != 1 || st.Bytes <= 0 {
		t.Errorf("stats after reopen = %+v", st)
	}
}

func TestAppendRequestRoundTrip(t *testing.T) {
	s, _ := openStore(t, Config{})
	rec := fleetwire.RequestRecord{TraceID: "t1", CloudProb: 0.7, Decision: "cloud", Path: "cloud", Outcome: "ok", PromptTokens: 12}
	if _, err := s.AppendRequest(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Pending(1)
	if err != nil || len(got) != 1 {
		t.Fatalf("Pending: %v %v", got, err)
	}
	var back fleetwire.RequestRecord
	if err := json.Unmarshal(got[0].Data, &back); err != nil {
		t.Fatal(err)
	}
	if got[0].Kind != KindRequest || back.TraceID != "t1" || back.PromptTokens != 12 {
		t.Errorf("got %+v / %+v", got[0], back)
	}
}

func TestGroupCommitSharesOneTransaction(t *testing.T) {
	// MaxBatch 16 with a long linger: the committer waits until all 16
	// concurrent appends have arrived, so exactly one transaction commits
	// them. The linger is a hang guard, not a timing assertion.
	s, _ := openStore(t, Config{MaxBatch: 16, MaxDelay: 30 * time.Second})
	var wg sync.WaitGroup
	seqs := make([]uint64, 16)
	errs := make([]error, 16)
	for i := range 16 {
		wg.Go(func() { seqs[i], errs[i] = s.Append(context.Background(), "k", []byte(`1`)) })
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if seen[seqs[i]] {
			t.Fatalf("duplicate seq %d", seqs[i])
		}
		seen[seqs[i]] = true
	}
	if st := s.Stats(); st.Commits != 1 || st.Appends != 16 {
		t.Errorf("stats = %+v, want 16 appends in 1 commit", st)
	}
}

func TestConcurrentAppendsAreUniqueAndOrdered(t *testing.T) {
	s, _ := openStore(t, Config{})
	const workers, each = 8, 50
	var mu sync.Mutex
	bySeq := map[uint64]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				body := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				seq, err := s.Append(context.Background(), "k", []byte(body))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if _, dup := bySeq[seq]; dup {
					t.Errorf("seq %d handed out twice", seq)
				}
				bySeq[seq] = body
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got, err := s.Pending(workers * each)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != workers*each {
		t.Fatalf("pending %d, want %d", len(got), workers*each)
	}
	for i, r := range got {
		if i > 0 && r.Seq <= got[i-1].Seq {
			t.Fatalf("pending not oldest first at %d", i)
		}
		if bySeq[r.Seq] != string(r.Data) {
			t.Fatalf("seq %d holds %s, Append returned it for %s", r.Seq, r.Data, bySeq[r.Seq])
		}
	}
}

func TestSizeBoundDropsOldest(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		s, _ := openStore(t, Config{MaxRecords: 10})
		var last uint64
		for range 25 {
			seq, err := s.Append(context.Background(), "k", []byte(`"x"`))
			if err != nil {
				t.Fatal(err)
			}
			last = seq
		}
		got, _ := s.Pending(100)
		if len(got) != 10 || got[0].Seq != last-9 || got[9].Seq != last {
			t.Fatalf("kept %d records from %d, want the newest 10 ending at %d", len(got), got[0].Seq, last)
		}
		if st := s.Stats(); st.Dropped != 15 || st.Records != 10 {
			t.Errorf("stats = %+v, want 15 dropped", st)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		body := []byte(`"0123456789012345678901234567890123456789"`)
		one := int64(len(encodeRecord(time.Now(), "k", body)))
		s, _ := openStore(t, Config{MaxBytes: 4 * one, MaxRecordBytes: len(body)})
		for range 9 {
			if _, err := s.Append(context.Background(), "k", body); err != nil {
				t.Fatal(err)
			}
		}
		if st := s.Stats(); st.Records != 4 || st.Bytes != 4*one || st.Dropped != 5 {
			t.Errorf("stats = %+v, want 4 records of %d bytes and 5 dropped", st, one)
		}
	})
}

func TestCorruptRecordIsSkippedAndCounted(t *testing.T) {
	s, path := openStore(t, Config{})
	ctx := context.Background()
	var seqs []uint64
	for i := range 3 {
		seq, err := s.Append(ctx, "k", fmt.Appendf(nil, "%d", i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the middle record's body behind the store's back.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		v := append([]byte(nil), b.Get(seqKey(seqs[1]))...)
		v[len(v)-1] ^= 0xff
		return b.Put(seqKey(seqs[1]), v)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s2, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Pending(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != seqs[0] || got[1].Seq != seqs[2] {
		t.Fatalf("pending = %+v, want the two intact records", got)
	}
	if st := s2.Stats(); st.Corrupt != 1 || st.Dropped != 1 || st.Records != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestAppendRejectsBadInput(t *testing.T) {
	s, _ := openStore(t, Config{MaxRecordBytes: 16})
	ctx := context.Background()
	for _, tc := range []struct {
		name, kind string
		data       []byte
	}{
		{"empty kind", "", []byte(`1`)},
		{"not JSON", "k", []byte(`{`)},
		{"too large", "k", []byte(`"0123456789abcdef"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Append(ctx, tc.kind, tc.data); err == nil {
				t.Error("accepted")
			}
		})
	}
	if _, err := s.Append(ctx, "k", []byte(`"0123456789abcdef"`)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("err = %v, want ErrTooLarge", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Append(cancelled, "k", []byte(`1`)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: err = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{MaxRecords: -1}, "MaxRecords"},
		{Config{MaxBytes: -1}, "MaxBytes"},
		{Config{MaxBytes: 10, MaxRecordBytes: 11}, "MaxRecordBytes"},
		{Config{MaxBatch: -1}, "MaxBatch"},
		{Config{MaxDelay: -1}, "MaxDelay"},
		{Config{OpenTimeout: -1}, "OpenTimeout"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: err = %v, want it to name %s", tc.cfg, err, tc.field)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s, _ := openStore(t, Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(context.Background(), "k", []byte(`1`)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if _, err := s.Pending(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Pending after Close: %v", err)
	}
	if err := s.Ack(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Ack after Close: %v", err)
	}
}

func TestChangedFiresOnAppend(t *testing.T) {
	s, _ := openStore(t, Config{})
	ch := s.Changed()
	select {
	case <-ch:
		t.Fatal("Changed fired before any append")
	default:
	}
	if _, err := s.Append(context.Background(), "k", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Changed did not fire")
	}
}
