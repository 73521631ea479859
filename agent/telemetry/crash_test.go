package telemetry

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/internal/bolttest"
)

// crashChildEnv names the store file a re-executed test binary appends to
// until it is killed.
const crashChildEnv = "PHASELESS_TELEMETRY_CRASH_CHILD"

// crashChild runs the child side of TestKillDuringAppendLosesNothing when
// the environment asks for it: several goroutines append in a loop and
// print "seq worker n" for every Append that returned, so the parent knows
// exactly which records were acknowledged before the kill.
func crashChild() bool {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		return false
	}
	s, err := Open(path, Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex // guards stdout so lines do not interleave
	fmt.Println("ready")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				seq, err := s.Append(context.Background(), "crash", fmt.Appendf(nil, `{"w":%d,"n":%d}`, w, n))
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Printf("%d %d %d\n", seq, w, n)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return true
}

// TestKillDuringAppendLosesNothing kills a process that is appending with
// SIGKILL at random moments, many times over the same file, and checks that
// every record whose Append had returned is still there with its body, that
// seqs never repeat across restarts, and that the file is consistent. (A
// kill -9 leaves the page cache intact, so this proves transactional
// atomicity; surviving power loss rests on bbolt's fsync on commit.)
func TestKillDuringAppendLosesNothing(t *testing.T) {
	rounds := 25
	if testing.Short() {
		rounds = 5
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[uint64]string{} // seq -> body the child saw acknowledged
	var maxAcked uint64
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child did not start: %q %v\n%s", round, line, err, stderr.String())
		}
		lines := make(chan []string, 1)
		go func() {
			var got []string
			for {
				line, err := r.ReadString('\n')
				if err != nil { // a partial last line was never acknowledged
					break
				}
				got = append(got, line)
			}
			lines <- got
		}()
		time.Sleep(time.Duration(5+rng.IntN(150)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		got := <-lines
		if strings.Contains(stderr.String(), "child") {
			t.Fatalf("round %d: child failed: %s", round, stderr.String())
		}
		for _, line := range got {
			var seq uint64
			var w, n int
			if _, err := fmt.Sscanf(line, "%d %d %d", &seq, &w, &n); err != nil {
				t.Fatalf("round %d: bad line %q", round, line)
			}
			if _, dup := acked[seq]; dup {
				t.Fatalf("round %d: seq %d acknowledged twice (across restarts)", round, seq)
			}
			acked[seq] = fmt.Sprintf(`{"w":%d,"n":%d}`, w, n)
			maxAcked = max(maxAcked, seq)
		}
		verifyAcked(t, path, acked, maxAcked, round)
	}
	if len(acked) == 0 {
		t.Fatal("no record was acknowledged in any round")
	}
	t.Logf("%d rounds, %d acknowledged records all present", rounds, len(acked))
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
