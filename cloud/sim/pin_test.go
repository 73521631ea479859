package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestPinnedBlocksOutliveLRUPressure: in the simulated cache, pinned
// blocks stay through traffic that evicts every unpinned block, until the
// lifetime ends; the free-queue invariants hold throughout.
func TestPinnedBlocksOutliveLRUPressure(t *testing.T) {
	var now time.Duration
	c := newKVCache(8)
	c.enablePins(2, 2, func() time.Duration { return now }, false)
	fill := func(base uint64, n int) []int32 {
		var bs []int32
		for i := range n {
			b := c.alloc()
			if b < 0 {
				t.Fatalf("alloc %d of %d failed", i, n)
			}
			c.register(b, base+uint64(i))
			bs = append(bs, b)
		}
		return bs
	}
	check := func(held []int32) {
		t.Helper()
		refs := map[int32]int32{}
		for _, b := range held {
			refs[b]++
		}
		if err := c.check(refs); err != nil {
			t.Fatal(err)
		}
	}
	sys := fill(100, 2)
	if n := c.pinPrefix("t", []uint64{100, 101}, 5*time.Minute); n != 2 {
		t.Fatalf("pinned %d, want 2", n)
	}
	c.release(sys)
	check(nil)
	for round := range 3 { // unpinned traffic cycles the other six blocks
		bs := fill(uint64(1000*(round+1)), 6)
		if b := c.alloc(); b >= 0 {
			t.Fatal("allocated a pinned block")
		}
		check(bs)
		c.release(bs)
	}
	if c.match([]uint64{100, 101}) != 2 {
		t.Fatal("pinned prefix evicted")
	}
	b := c.take(100) // a hit refreshes the lifetime
	c.release([]int32{b})
	now = 4 * time.Minute
	c.expire()
	if c.match([]uint64{100}) != 1 {
		t.Fatal("the pin hit did not refresh")
	}
	now = 9*time.Minute + time.Second // past both pins' refreshed ends
	c.expire()
	check(nil)
	fill(5000, 8) // now everything is evictable
	if c.match([]uint64{100}) != 0 {
		t.Fatal("expired pin survived a full cycle")
	}
	if n := c.pinPrefix("t", []uint64{5000, 5001, 5002}, time.Minute); n != 2 || c.pin.refused != 1 {
		t.Fatalf("pinned %d (refused %d), want the cap of 2", n, c.pin.refused)
	}
}

// TestClusterPinning: a run with --cache-ttl pins (every engine's cache
// stays consistent) and is deterministic.
func TestClusterPinning(t *testing.T) {
	run := func() *Result {
		pools, cycle, err := ParseCluster("2xh100")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := LookupModel("llama3.1-8b")
		p, _ := sched.ByName(sched.NameLeastLoaded, sched.RulesConfig{})
		c, err := New(Config{Pools: pools, CycleRoles: cycle, Model: m, Policy: p, Cache: CacheConfig{TTL: 5 * time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		var reqs []Request
		for i := range 60 {
			reqs = append(reqs, Request{At: time.Duration(i) * 100 * time.Millisecond, Input: 2048, Output: 8, Blocks: []int{0, 1, i % 5}})
		}
		res := runChecked(t, c, reqs)
		pinned := 0
		for _, w := range c.workers {
			n, _, _, _ := w.eng.PinStats()
			pinned += n
		}
		if pinned == 0 {
			t.Fatal("nothing pinned")
		}
		return res
	}
	a, b := run(), run()
	for i := range a.Outcomes {
		if !reflect.DeepEqual(a.Outcomes[i], b.Outcomes[i]) {
			t.Fatalf("outcome %d differs between runs: %+v vs %+v", i, a.Outcomes[i], b.Outcomes[i])
		}
	}
}
