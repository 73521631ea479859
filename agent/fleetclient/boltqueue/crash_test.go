package boltqueue

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/internal/crashtest"
)

// TestKillDuringEnqueueLosesNothing kills a process that enqueues from two
// goroutines and consumes from a third (Peek, Remove, as autopaho does),
// many times over one file. After every kill: each acknowledged Enqueue
// that the consumer had not yet taken is still queued, exactly once; no
// acknowledged Remove comes back; every producer's entries are in FIFO
// order; the counters match the file and bbolt's check is clean.
func TestKillDuringEnqueueLosesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	enqueued := map[string]bool{} // payload -> acknowledged by Enqueue
	removed := map[string]bool{}  // payload -> acknowledged Remove
	taken := map[string]bool{}    // payload -> the consumer had peeked it
	crashtest.Run(t, crashtest.Config{
		Progress: true,                    // the test checks that something was acknowledged
		Cycles:   crashtest.Cycles(t, 50), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:      path,
		Child: func(path string, ack *crashtest.Acker) {
			q, err := Open(path, Config{MaxEntries: 1 << 20, MaxBytes: 1 << 30})
			if err != nil {
				crashtest.Fail("open: %v", err)
			}
			// Payloads are unique across rounds: pid, producer, counter.
			pid := os.Getpid()
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Go(func() {
					for n := 0; ; n++ {
						p := fmt.Sprintf("%d-%d-%08d", pid, w, n)
						if err := q.Enqueue(strings.NewReader(p)); err != nil {
							crashtest.Fail("enqueue: %v", err)
						}
						ack.Ack("enq %s", p)
					}
				})
			}
			wg.Go(func() {
				for {
					<-q.Wait()
					e, err := q.Peek()
					if err != nil {
						crashtest.Fail("peek: %v", err)
					}
					r, _ := e.Reader()
					data, _ := io.ReadAll(r)
					// From here the consumer holds it: a kill before Remove
					// commits may leave it queued (delivered again) or not.
					ack.Ack("got %s", data)
					if err := e.Remove(); err != nil {
						crashtest.Fail("remove: %v", err)
					}
					ack.Ack("rm %s", data)
				}
			})
			wg.Wait()
		},
		Verify: func(t *testing.T, round int, lines, _ []string) {
			for _, l := range lines {
				op, p, _ := strings.Cut(l, " ")
				switch op {
				case "enq":
					enqueued[p] = true
				case "got":
					taken[p] = true
				case "rm":
					if removed[p] {
						t.Fatalf("%s removed twice", p)
					}
					removed[p] = true
				default:
					t.Fatalf("bad line %q", l)
				}
			}
			crashtest.CheckBolt(t, path)
			queued := readQueueFile(t, path)
			at := map[string]bool{}
			last := map[string]string{} // producer -> last payload seen, FIFO check
			for _, p := range queued {
				if at[p] {
					t.Fatalf("%s queued twice", p)
				}
				at[p] = true
				if removed[p] {
					t.Fatalf("%s came back after its Remove was acknowledged", p)
				}
				prod := p[:strings.LastIndexByte(p, '-')]
				if prev, ok := last[prod]; ok && prev > p {
					t.Fatalf("FIFO order broken: %s before %s", prev, p)
				}
				last[prod] = p
			}
			for p := range enqueued {
				if !taken[p] && !at[p] {
					t.Fatalf("acknowledged entry %s lost", p)
				}
			}
			q, err := Open(path, Config{MaxEntries: 1 << 20, MaxBytes: 1 << 30})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			st := q.Stats()
			q.Close()
			if st.Entries != len(queued) || st.Corrupt != 0 || st.Dropped != 0 {
				t.Fatalf("stats %+v, file holds %d entries", st, len(queued))
			}
		},
	})
	if len(removed) == 0 || len(enqueued) == 0 {
		t.Fatalf("nothing acknowledged: %d enqueued, %d removed", len(enqueued), len(removed))
	}
}

// readQueueFile lists the payloads in the queue file, oldest first.
func readQueueFile(t *testing.T, path string) []string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("queue"))
		if b == nil { // killed before the first Open finished
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			data, err := decode(k, v)
			if err != nil {
				return err
			}
			out = append(out, string(data))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
