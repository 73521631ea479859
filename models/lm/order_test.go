package lm

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// TestCacheAwareOrder: with one sequence slot held by a paused generation,
// a long uncached prompt L and then a prompt S whose long prefix is cached
// queue up. First come, first served runs L (all of it) first; with
// AgingRate, S's short uncached remainder puts it ahead of L, though its
// prompt is nearly as long.
func TestCacheAwareOrder(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 3, false)
	ttfts := func(rate float64) (l, s time.Duration) {
		// While ticking, every clock read is a microsecond later (times
		// only order events); stopped, L and S are queued at one instant,
		// so their TTFTs order their first tokens.
		var tick atomic.Int64
		var ticking atomic.Bool
		ticking.Store(true)
		base := time.Unix(0, 0)
		now := func() time.Time {
			if ticking.Load() {
				return base.Add(time.Duration(tick.Add(1)) * time.Microsecond)
			}
			return base.Add(time.Duration(tick.Load()) * time.Microsecond)
		}
		// KV for 400 blocks (layers × block × KV heads × head dim × f32, keys and values): nothing is evicted.
		e := newEngine(t, m, EngineConfig{BlockSize: 4, MaxBatch: 1, StepTokens: 16, AgingRate: rate, Now: now, KVBudgetBytes: 400 * 2 * 4 * 2 * 16 * 4 * 2})
		ctx := context.Background()
		prefix := prompts(1, 176, 176)[0]
		if r := generate(ctx, e, prefix, GenOptions{MaxTokens: 1}); r.err != nil {
			t.Fatal(r.err)
		}
		release := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // holds the one slot: its consumer stops reading, so it pauses
			defer wg.Done()
			_, err := e.GenerateTokens(ctx, []int32{1, 2, 3}, GenOptions{MaxTokens: 100, IgnoreEOS: true}, func(llm.Token) error {
				<-release
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, func() bool { return e.Stats().Running == 1 })
		long := make([]int32, 200)
		for i := range long {
			long[i] = int32(3 + (i*31)%250)
		}
		short := append(append([]int32(nil), prefix...), 7, 8, 9, 10)
		var rl, rs result
		wg.Add(2)
		ticking.Store(false)
		go func() { defer wg.Done(); rl = generate(ctx, e, long, GenOptions{MaxTokens: 2, IgnoreEOS: true}) }()
		waitFor(t, func() bool { return e.Stats().Waiting == 1 })
		go func() { defer wg.Done(); rs = generate(ctx, e, short, GenOptions{MaxTokens: 2, IgnoreEOS: true}) }()
		waitFor(t, func() bool { return e.Stats().Waiting == 2 })
		ticking.Store(true)
		close(release)
		wg.Wait()
		if rl.err != nil || rs.err != nil {
			t.Fatal(rl.err, rs.err)
		}
		if rs.final.PrefixHitTokens < 170 {
			t.Fatalf("the short one's prefix hit %d tokens, want its cached 176", rs.final.PrefixHitTokens)
		}
		return rl.final.TTFT, rs.final.TTFT
	}
	if l, s := ttfts(0); s <= l {
		t.Fatalf("first come, first served: S's TTFT %v, L's %v", s, l)
	}
	if l, s := ttfts(1000); s >= l {
		t.Fatalf("cache-aware order: S's TTFT %v, L's %v", s, l)
	}
}

// waitFor polls cond (the engine's own counters), failing only after a
// generous bound, so a loaded machine does not fail it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 60000 {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
