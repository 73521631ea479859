package telemetry

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/agent/internal/bolttest"
	"github.com/phaseless/phaseless/internal/crashtest"
)

// TestKillDuringAppendLosesNothing kills a process that is appending with
// SIGKILL at random moments, many times over the same file, and checks that
// every record whose Append had returned is still there with its body, that
// seqs never repeat across restarts, and that the file is consistent. (A
// kill -9 leaves the page cache intact, so this proves transactional
// atomicity; surviving power loss rests on bbolt's fsync on commit.)
func TestKillDuringAppendLosesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[uint64]string{} // seq -> body the child saw acknowledged
	var maxAcked uint64
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 100),
		Arg:    path,
		// Several goroutines append in a loop and acknowledge "seq worker n"
		// for every Append that returned.
		Child: func(path string, ack *crashtest.Acker) {
			s, err := Open(path, Config{})
			if err != nil {
				crashtest.Fail("open: %v", err)
			}
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for n := 0; ; n++ {
						seq, err := s.Append(context.Background(), "crash", fmt.Appendf(nil, `{"w":%d,"n":%d}`, w, n))
						if err != nil {
							crashtest.Fail("append: %v", err)
						}
						ack.Ack("%d %d %d", seq, w, n)
					}
				})
			}
			wg.Wait()
		},
		Verify: func(t *testing.T, round int, lines, _ []string) {
			for _, line := range lines {
				var seq uint64
				var w, n int
				if _, err := fmt.Sscanf(line, "%d %d %d", &seq, &w, &n); err != nil {
					t.Fatalf("bad line %q", line)
				}
				if _, dup := acked[seq]; dup {
					t.Fatalf("seq %d acknowledged twice (across restarts)", seq)
				}
				acked[seq] = fmt.Sprintf(`{"w":%d,"n":%d}`, w, n)
				maxAcked = max(maxAcked, seq)
			}
			verifyAcked(t, path, acked, maxAcked, round)
		},
	})
	if len(acked) == 0 {
		t.Fatal("no record was acknowledged in any round")
	}
}

func verifyAcked(t *testing.T, path string, acked map[uint64]string, maxAcked uint64, round int) {
	t.Helper()
	bolttest.Check(t, path)
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	recs, err := s.Pending(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	have := make(map[uint64]string, len(recs))
	for _, r := range recs {
		have[r.Seq] = string(r.Data)
	}
	for seq, body := range acked {
		if have[seq] != body {
			t.Fatalf("round %d: acknowledged seq %d: stored %q, want %q", round, seq, have[seq], body)
		}
	}
	if st := s.Stats(); st.Records != len(recs) || (maxAcked > 0 && st.NextSeq <= maxAcked) || st.Dropped != 0 {
		t.Fatalf("round %d: stats %+v inconsistent with %d records, max acked %d", round, st, len(recs), maxAcked)
	}
}
