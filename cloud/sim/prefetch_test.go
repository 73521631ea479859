package sim

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
)

// TestPrefetchWarmsEvictedFollowUp: the coordinator's prefetch, run in
// virtual time. A tenant asks one kind of request (A) and then another (B);
// another tenant's traffic evicts B's blocks; when the tenant's next A
// completes, the Placer predicts a B next and an idle worker computes B's
// shared turns back (pinned), so the tenant's next B reads them from the
// cache. Without prefetch it recomputes them. Every engine's cache stays
// consistent.
func TestPrefetchWarmsEvictedFollowUp(t *testing.T) {
	blocks := func(from, n int, more ...int) []int {
		var b []int
		for k := range n {
			b = append(b, from+k)
		}
		return append(b, more...)
	}
	run := func(prefetch bool) (Outcome, int) {
		pools, _, err := ParseCluster("1xh100")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := LookupModel("llama3.1-8b")
		p, _ := sched.ByName(sched.NameLeastLoaded, sched.RulesConfig{})
		// About 12k tokens of KV: the flood below evicts B's turns.
		c, err := New(Config{Pools: pools, Model: m, Policy: p, TP: 1, Engine: EngineConfig{MemUtil: 0.25},
			Layers: place.Layers{NoAffinity: true, Prefetch: prefetch}})
		if err != nil {
			t.Fatal(err)
		}
		reqs := []Request{
			{At: 0, Input: 4400, Output: 4, Blocks: blocks(0, 9), Tenant: "t"},
			{At: time.Second, Input: 4400, Output: 4, Blocks: blocks(100, 9), Tenant: "t"},
		}
		for i := range 8 {
			reqs = append(reqs, Request{At: 5*time.Second + time.Duration(i)*time.Second, Input: 4400, Output: 4, Blocks: blocks(1000+10*i, 9), Tenant: "flood"})
		}
		reqs = append(reqs,
			Request{At: 20 * time.Second, Input: 4400, Output: 4, Blocks: blocks(0, 8, 20), Tenant: "t"},
			Request{At: 90 * time.Second, Input: 5600, Output: 4, Blocks: blocks(100, 9, 130, 131), Tenant: "t"})
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
		t.Fatalf("without prefetch: %d warm-ups, B read %d cached tokens (its turns should be gone)", n, off.Cached)
	}
	on, n := run(true)
	t.Logf("off %d cached; on %d cached after %d warm-ups", off.Cached, on.Cached, n)
	if n == 0 || on.Cached < 9*512 {
		t.Fatalf("with prefetch: %d warm-ups, B read %d cached tokens, want its %d shared ones", n, on.Cached, 9*512)
	}
}
