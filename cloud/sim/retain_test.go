package sim

import (
	"testing"
	"time"
)

// TestSoftPinsYield: a soft pin keeps its blocks out of LRU order (the
// unpinned free blocks go first) but yields them once nothing else is free,
// so it never blocks an allocation; a hard pin does. Invariants hold.
func TestSoftPinsYield(t *testing.T) {
	for _, soft := range []bool{false, true} {
		var now time.Duration
		c := newKVCache(4)
		c.enablePins(2, 2, func() time.Duration { return now }, soft)
		var held []int32
		for i := range 2 {
			b := c.alloc()
			c.register(b, uint64(100+i))
			held = append(held, b)
		}
		c.release(held)
		if n := c.pinPrefix("t", []uint64{100, 101}, 5*time.Minute); n != 2 {
			t.Fatalf("soft=%v: pinned %d", soft, n)
		}
		var got []int32
		for b := c.alloc(); b >= 0; b = c.alloc() {
			got = append(got, b)
			if err := c.check(refsOf(got)); err != nil {
				t.Fatalf("soft=%v: %v", soft, err)
			}
		}
		switch {
		case soft && (len(got) != 4 || c.match([]uint64{100}) != 0):
			t.Fatalf("soft: %d blocks allocated, pinned prefix still cached: %v", len(got), c.match([]uint64{100}) == 1)
		case soft && (got[0] == held[0] || got[0] == held[1] || got[1] == held[0] || got[1] == held[1]):
			t.Fatalf("soft: pinned blocks %v evicted before the unpinned ones (%v)", held, got)
		case !soft && (len(got) != 2 || c.match([]uint64{100, 101}) != 2):
			t.Fatalf("hard: %d blocks allocated, pinned prefix cached %d", len(got), c.match([]uint64{100, 101}))
		}
	}
}

func refsOf(bs []int32) map[int32]int32 {
	m := map[int32]int32{}
	for _, b := range bs {
		m[b]++
	}
	return m
}

// TestRetainerLearnsFollowUps: long conversations' first turns are always
// followed up and short one-off requests never; after a while the model
// pins a new long first turn and not a short request. Its labels come from
// the past only: a request not followed within the horizon counts as not
// followed, once the horizon has passed.
func TestRetainerLearnsFollowUps(t *testing.T) {
	r := newRetainer(RetainConfig{Threshold: 0.5, Horizon: time.Minute}, 5*time.Minute)
	id := 1000
	blocks := func(n int) []int {
		b := []int{0}
		for range n - 1 {
			b = append(b, id)
			id++
		}
		return b
	}
	at := time.Duration(0)
	for k := range 40 {
		at += 10 * time.Second
		long := blocks(16) // 8k tokens
		r.observe(&Request{Input: 8000, Blocks: long}, at)
		r.observe(&Request{Input: 900, Blocks: blocks(2)}, at)
		// Its follow-up 20 s later: the same full blocks, and more.
		follow := append(append([]int(nil), long[:15]...), blocks(4)[1:]...)
		if k > 0 {
			r.observe(&Request{Input: 9500, Blocks: follow}, at+20*time.Second)
		}
	}
	at += time.Hour / 60
	if !r.observe(&Request{Input: 8100, Blocks: blocks(16)}, at) {
		t.Error("a new long first turn is not pinned")
	}
	if r.observe(&Request{Input: 950, Blocks: blocks(2)}, at) {
		t.Error("a short one-off request is pinned")
	}
}
