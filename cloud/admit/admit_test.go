package admit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// fakeClock is a settable clock shared by the code under test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestAdmitterBudget(t *testing.T) {
	clk := newFakeClock()
	a, err := New(Config{Budget: Bucket{Burst: 1000, PerSecond: 100}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	if rem, err := a.Charge(ctx, "key", 900, Bucket{}); err != nil || rem != 100 {
		t.Fatalf("charge: %d %v", rem, err)
	}
	rem, err := a.Charge(ctx, "key", 300, Bucket{})
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != llm.CodeBudget || rem != 100 {
		t.Fatalf("over budget: rem %d err %v", rem, err)
	}
	// 200 missing tokens at 100/s: retry after about 2 s (rounded up).
	if le.RetryAfter < 2*time.Second || le.RetryAfter > 4*time.Second {
		t.Fatalf("RetryAfter %v", le.RetryAfter)
	}
	a.Refund(ctx, "key", 200, Bucket{})
	if rem, err = a.Charge(ctx, "key", 300, Bucket{}); err != nil || rem != 0 {
		t.Fatalf("after refund: %d %v", rem, err)
	}
	// A key's own budget overrides the default.
	if _, err := a.Charge(ctx, "big", 5000, Bucket{Burst: 10000, PerSecond: 1}); err != nil {
		t.Fatal(err)
	}
	// A request larger than the whole budget can never pass.
	if _, err := a.Charge(ctx, "new", 1001, Bucket{}); llm.CodeOf(err) != llm.CodeBudget {
		t.Fatalf("oversized request: %v", err)
	}
	clk.Advance(10 * time.Second)
	if rem, _ := a.Charge(ctx, "key", 0, Bucket{}); rem != 1000 {
		t.Fatalf("refilled to %d, want 1000", rem)
	}
}

func TestAdmitterFallbackLimit(t *testing.T) {
	clk := newFakeClock()
	a, _ := New(Config{Now: clk.Now})
	defer a.Close()
	ctx := context.Background()
	got := []bool{a.AllowFallback(ctx, "u"), a.AllowFallback(ctx, "u"), a.AllowFallback(ctx, "u"), a.AllowFallback(ctx, "v")}
	if got[0] != true || got[1] != true || got[2] != false || got[3] != true {
		t.Fatalf("fallbacks allowed %v, want [true true false true]", got)
	}
	clk.Advance(10 * time.Minute)
	if !a.AllowFallback(ctx, "u") {
		t.Fatal("no fallback after the 10-minute window")
	}
}

func TestAdmitterFailsOpenOnStoreError(t *testing.T) {
	s := NewMemoryStore()
	s.Close()
	var seen error
	a, _ := New(Config{Store: s, OnStoreError: func(err error) { seen = err }})
	if _, err := a.Charge(context.Background(), "k", 10, Bucket{}); err != nil {
		t.Fatalf("a store outage refused the request: %v", err)
	}
	if !errors.Is(seen, ErrClosed) {
		t.Fatalf("store error not reported: %v", seen)
	}
	if a.AllowFallback(context.Background(), "k") {
		t.Fatal("fallback allowed without a working counter")
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{Budget: Bucket{Burst: -1, PerSecond: 1}}); err == nil {
		t.Error("negative burst accepted")
	}
	if _, err := NewFair(FairConfig{Slots: -1}, nil); err == nil {
		t.Error("negative slots accepted")
	}
	if _, err := NewBreaker(BreakerConfig{ErrorRate: 2}); err == nil {
		t.Error("error rate 2 accepted")
	}
}

// acquireAsync starts an Acquire and returns a channel with its ticket.
func acquireAsync(t *testing.T, f *Fair, tenant string, prompt int) <-chan *Ticket {
	ch := make(chan *Ticket, 1)
	go func() {
		tk, err := f.Acquire(context.Background(), tenant, prompt)
		if err != nil {
			t.Error(err)
		}
		ch <- tk
	}()
	return ch
}

// waitWaiting lets every goroutine in the bubble run until it blocks, then
// checks that n of them wait in f's queue: no polling, so the arrival order
// the test builds is the order the queue sees.
func waitWaiting(t *testing.T, f *Fair, n int) {
	t.Helper()
	synctest.Wait()
	if got := f.Stats().Waiting; got != n {
		t.Fatalf("waiting = %d, want %d", got, n)
	}
}

// TestFairVTC: a tenant that floods the queue does not starve one that asks
// little; in FIFO mode arrival order wins instead.
func TestFairVTC(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		name := map[bool]string{false: "vtc", true: "fifo"}[fifo]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, err := NewFair(FairConfig{Slots: 1}, func() bool { return fifo })
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				first, _ := f.Acquire(ctx, "greedy", 100)
				first.Output(400)
				var order []string
				var greedy []<-chan *Ticket
				for range 3 {
					greedy = append(greedy, acquireAsync(t, f, "greedy", 100))
					waitWaiting(t, f, len(greedy))
				}
				modest := acquireAsync(t, f, "modest", 10)
				waitWaiting(t, f, 4)

				first.Release()
				first.Release() // idempotent: must not free a second slot
				pending := map[string][]<-chan *Ticket{"greedy": greedy, "modest": {modest}}
				for len(order) < 4 {
					select {
					case tk := <-modest:
						order = append(order, "modest")
						tk.Release()
					case tk := <-pending["greedy"][0]:
						pending["greedy"] = pending["greedy"][1:]
						order = append(order, "greedy")
						tk.Release()
					case <-time.After(10 * time.Second):
						t.Fatalf("stuck after %v", order)
					}
					if len(pending["greedy"]) == 0 {
						pending["greedy"] = []<-chan *Ticket{make(chan *Ticket)}
					}
				}
				// VTC lifts the newcomer to greedy's counter; the tie goes to
				// the earlier arrival, after which greedy's charge puts modest
				// next. FIFO serves modest last.
				want := []string{"greedy", "modest", "greedy", "greedy"}
				if fifo {
					want = []string{"greedy", "greedy", "greedy", "modest"}
				}
				if !slices.Equal(order, want) {
					t.Fatalf("served %v, want %v", order, want)
				}
				if s := f.Stats(); s.Running != 0 || s.Waiting != 0 {
					t.Fatalf("leftover state %+v", s)
				}
			})
		})
	}
}

func TestFairLiftsReturningTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := NewFair(FairConfig{Slots: 1}, nil)
		ctx := context.Background()
		// "old" was served long ago, then went idle with a tiny counter.
		tk, _ := f.Acquire(ctx, "old", 1)
		tk.Release()
		busy, _ := f.Acquire(ctx, "busy", 1000)
		w := acquireAsync(t, f, "busy", 1000)
		waitWaiting(t, f, 1)
		r := acquireAsync(t, f, "old", 1)
		waitWaiting(t, f, 2)
		if got, want := f.Counter("old"), f.Counter("busy"); got != want {
			t.Fatalf("returning tenant's counter %v not lifted to the active minimum %v", got, want)
		}
		busy.Release()
		// Equal counters: arrival order decides, so the waiting busy request goes first.
		(<-w).Release()
		(<-r).Release()
	})
}

func TestFairCancelAndQueueLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := NewFair(FairConfig{Slots: 1, MaxQueue: 1}, nil)
		hold, _ := f.Acquire(context.Background(), "a", 1)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := f.Acquire(ctx, "b", 1)
			errc <- err
		}()
		waitWaiting(t, f, 1)
		if _, err := f.Acquire(context.Background(), "c", 1); llm.CodeOf(err) != llm.CodeOverloaded {
			t.Fatalf("full queue: %v", err)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		hold.Release()
		if s := f.Stats(); s.Running != 0 || s.Waiting != 0 {
			t.Fatalf("state after cancel %+v", s)
		}
	})
}

func TestBreaker(t *testing.T) {
	clk := newFakeClock()
	b, err := NewBreaker(BreakerConfig{Window: 10 * time.Second, MinRequests: 200, OpenFor: 30 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	run := func(n, errs int, lat time.Duration) {
		for i := range n {
			b.Record(i < errs, lat)
		}
		clk.Advance(10 * time.Second) // the window ends and is judged
	}
	// A healthy window sets the baseline (p99 about 20 ms).
	run(1000, 4, 20*time.Millisecond) // 0.4%: under the limit
	if b.Open() {
		t.Fatalf("opened at 0.4%% errors: %+v", b.State())
	}
	if s := b.State(); s.Baseline < 15*time.Millisecond || s.Baseline > 30*time.Millisecond {
		t.Fatalf("baseline %v, want about 20ms", s.Baseline)
	}
	// p99 doubling (+100%) is tolerated; tripling and more (+200%) is not.
	run(400, 0, 45*time.Millisecond)
	if b.Open() {
		t.Fatal("opened on a +100% p99")
	}
	run(400, 0, 80*time.Millisecond)
	if s := b.State(); !s.Open || s.Trips != 1 {
		t.Fatalf("p99 ×4 did not open: %+v", s)
	}
	// It stays open for OpenFor, then tries the clever path again.
	clk.Advance(29 * time.Second)
	if !b.Open() {
		t.Fatal("closed early")
	}
	clk.Advance(time.Second)
	if b.Open() {
		t.Fatal("still open after OpenFor")
	}
	// 5xx over 0.5% opens it again.
	run(994, 6, 20*time.Millisecond) // 0.6%
	if s := b.State(); !s.Open || s.Trips != 2 {
		t.Fatalf("5xx burst did not open: %+v", s)
	}
	// Too few requests decide nothing.
	clk.Advance(time.Minute)
	run(199, 50, time.Second)
	if b.Open() {
		t.Fatal("opened on 50 requests")
	}
}
