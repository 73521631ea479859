package batch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type result struct {
	name string
	size int
	at   time.Duration
	err  error
}

// harness runs waiters in a synctest bubble and records when each got out.
type harness struct {
	b     *Batcher
	room  atomic.Int64
	start time.Time
	mu    sync.Mutex
	out   []result
	wg    sync.WaitGroup
}

func newHarness(t *testing.T, cfg Config, room int) *harness {
	h := &harness{start: time.Now()}
	h.room.Store(int64(room))
	b, err := New(cfg, func() int { return int(h.room.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	t.Cleanup(b.Close)
	return h
}

func (h *harness) submit(ctx context.Context, name string, tokens int) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		n, err := h.b.Wait(ctx, tokens)
		h.mu.Lock()
		h.out = append(h.out, result{name, n, time.Since(h.start), err})
		h.mu.Unlock()
	}()
	synctest.Wait() // it is queued (or through) before the next one arrives
}

func (h *harness) results() []result {
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]result(nil), h.out...)
}

func TestStraightInWhenRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{}, 4)
		h.submit(context.Background(), "a", 10)
		r := h.results()
		if len(r) != 1 || r[0].size != 1 || r[0].at != 0 || r[0].err != nil {
			t.Fatalf("%+v: an idle engine must not delay a request", r)
		}
	})
}

// TestShortPromptsOvertakeLong: with the engine full, a long prompt that
// arrived first does not stall the short ones once room appears.
func TestShortPromptsOvertakeLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{}, 0)
		ctx := context.Background()
		h.submit(ctx, "long", 3000)
		for _, n := range []string{"s1", "s2", "s3"} {
			h.submit(ctx, n, 40)
		}
		time.Sleep(20 * time.Millisecond) // a sequence ends
		h.room.Store(1)
		h.b.Kick()
		synctest.Wait()
		h.room.Store(0) // the shorts took the room
		time.Sleep(time.Second)
		r := h.results()
		if len(r) != 4 {
			t.Fatalf("results %+v", r)
		}
		// The three shorts go together (their goroutines record in any order).
		shorts := map[string]bool{}
		for _, x := range r[:3] {
			if x.size != 3 || x.at != 20*time.Millisecond {
				t.Fatalf("release %+v, want a batch of 3 at 20ms", x)
			}
			shorts[x.name] = true
		}
		if !shorts["s1"] || !shorts["s2"] || !shorts["s3"] {
			t.Fatalf("first batch %v, want s1 s2 s3", r[:3])
		}
		// The long prompt is released by its window, not starved.
		if r[3].name != "long" || r[3].at != 150*time.Millisecond {
			t.Fatalf("long prompt released %+v, want at the 150ms window", r[3])
		}
		if h.b.Waiting() != 0 {
			t.Fatalf("%d still waiting", h.b.Waiting())
		}
	})
}

func TestMaxBatchAndWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Window: 100 * time.Millisecond, MaxBatch: 4}, 0)
		for range 6 {
			h.submit(context.Background(), "x", 10)
		}
		time.Sleep(time.Second)
		r := h.results()
		sizes := map[int]int{}
		for _, x := range r {
			if x.at != 100*time.Millisecond {
				t.Fatalf("released at %v, want at the window end", x.at)
			}
			sizes[x.size]++
		}
		if sizes[4] != 4 || sizes[2] != 2 {
			t.Fatalf("batch sizes %v, want one batch of 4 and one of 2", sizes)
		}
	})
}

func TestCancelAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{}, 0)
		ctx, cancel := context.WithCancel(context.Background())
		h.submit(ctx, "gives-up", 10)
		h.submit(context.Background(), "stays", 10)
		cancel()
		synctest.Wait()
		if h.b.Waiting() != 1 {
			t.Fatalf("waiting %d after a cancel, want 1", h.b.Waiting())
		}
		h.b.Close()
		h.b.Close()
		r := h.results()
		got := map[string]error{}
		for _, x := range r {
			got[x.name] = x.err
		}
		if !errors.Is(got["gives-up"], context.Canceled) || !errors.Is(got["stays"], ErrClosed) {
			t.Fatalf("errors %v", got)
		}
		if _, err := h.b.Wait(context.Background(), 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("wait after close: %v", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{MaxBatch: -1}, {Window: -1}, {Bounds: []int{10, 5}}} {
		if _, err := New(c, func() int { return 0 }); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
