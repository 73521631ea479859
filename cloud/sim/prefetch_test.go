package sim

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestPrefetchWarmsEvictedFollowUp: a conversation's first turn, predicted
// to be followed up, is evicted by later traffic; with prefetch an idle
// worker computes it back (and pins it) before the follow-up comes, which
// then reads it from the cache; without prefetch the follow-up recomputes
// it. Every engine's cache stays consistent.
func TestPrefetchWarmsEvictedFollowUp(t *testing.T) {
	run := func(prefetch bool) (Outcome, int) {
		pools, _, err := ParseCluster("1xh100")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := LookupModel("llama3.1-8b")
		p, _ := sched.ByName(sched.NameLeastLoaded, sched.RulesConfig{})
		cache := CacheConfig{TTL: 5 * time.Minute, Soft: true, PinnedShare: 1, TenantShare: 1,
			Retain: RetainConfig{Threshold: 0.01}, Prefetch: PrefetchConfig{On: prefetch}}
		// About 12k tokens of KV: the flood below evicts the first turn.
		c, err := New(Config{Pools: pools, Model: m, Policy: p, TP: 1, Engine: EngineConfig{MemUtil: 0.25}, Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		first := []int{0, 1, 2, 3, 4, 5, 6, 7, 8}
		reqs := []Request{{At: 0, Input: 4400, Output: 4, Blocks: first}}
		for i := range 8 {
			b := []int{0}
			for k := range 8 {
				b = append(b, 100+10*i+k)
			}
			reqs = append(reqs, Request{At: 10*time.Second + time.Duration(i)*time.Second, Input: 4400, Output: 4, Blocks: b})
		}
		reqs = append(reqs, Request{At: 90 * time.Second, Input: 5600, Output: 4, Blocks: append(append([]int(nil), first[:8]...), 900, 901, 902)})
		res, err := c.Run(t.Context(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.workers[0].eng.check(); err != nil {
			t.Fatal(err)
		}
		return res.Outcomes[len(reqs)-1], c.warmups
	}
	off, n := run(false)
	if n != 0 || off.Cached > 512 {
		t.Fatalf("without prefetch: %d warm-ups, follow-up read %d cached tokens (the first turn should be gone)", n, off.Cached)
	}
	on, n := run(true)
	if n == 0 || on.Cached < 7*512 {
		t.Fatalf("with prefetch: %d warm-ups, follow-up read %d cached tokens, want the first turn's %d", n, on.Cached, 7*512)
	}
}
