package kvcache

import (
	"testing"
	"time"
)

// fakeClock is a settable clock: lifetimes are tested without waiting.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// fill allocates n blocks, registers block i under hash i+1 and releases
// them, leaving n cached blocks; it returns their hashes.
func fill(t *testing.T, a *Allocator, n int) []uint64 {
	t.Helper()
	var hs []uint64
	var ids []int32
	for i := range n {
		id, _, ok := a.Allocate()
		if !ok {
			t.Fatalf("allocate %d failed", i)
		}
		a.Register(id, uint64(i+1))
		hs = append(hs, uint64(i+1))
		ids = append(ids, id)
	}
	for _, id := range ids {
		a.Release(id)
	}
	return hs
}

func TestPinnedBlocksSurviveEvictionUntilTheirLifetimeEnds(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	a, err := NewPinning(4, PinConfig{MaxBlocks: 2, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	hs := fill(t, a, 4)
	if r := a.Pin("t1", hs[:2], 5*time.Minute); r.Added != 2 || r.Kept != 0 || r.Refused != 0 {
		t.Fatalf("pin: %+v, want 2 added", r)
	}
	if got := a.Available(); got != 2 {
		t.Fatalf("available %d with 2 of 4 pinned, want 2", got)
	}
	// Allocation pressure takes the two unpinned blocks and then fails: the
	// pinned ones are never evicted.
	for i := range 2 {
		if _, _, ok := a.Allocate(); !ok {
			t.Fatalf("allocate %d failed", i)
		}
	}
	if _, _, ok := a.Allocate(); ok {
		t.Fatal("allocation evicted a pinned block")
	}
	if n := a.Probe(hs); n != 2 {
		t.Fatalf("probe %d, want the 2 pinned blocks", n)
	}
	clk.advance(5*time.Minute - time.Second)
	if _, _, ok := a.Allocate(); ok {
		t.Fatal("pinned block evicted before its lifetime ended")
	}
	clk.advance(time.Second)
	if _, ev, ok := a.Allocate(); !ok || !ev {
		t.Fatalf("after the lifetime: ok=%v evicted=%v, want an eviction of the expired pin", ok, ev)
	}
	if st := a.Stats(); st.PinExpiries != 2 {
		t.Fatalf("pin expiries %d, want 2", st.PinExpiries)
	}
}

func TestPinHitRefreshesLifetime(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	a, _ := NewPinning(2, PinConfig{MaxBlocks: 2, Now: clk.Now})
	hs := fill(t, a, 1)
	a.Pin("t1", hs, 5*time.Minute)
	clk.advance(4 * time.Minute)
	ids := a.Acquire(hs) // a hit: the lifetime restarts now
	a.Release(ids[0])
	if until, ok := a.PinnedUntil(hs[0]); !ok || !until.Equal(clk.t.Add(5*time.Minute)) {
		t.Fatalf("pinned until %v (%v), want %v", until, ok, clk.t.Add(5*time.Minute))
	}
	clk.advance(4 * time.Minute) // 8 minutes after the pin, 4 after the hit
	if _, ok := a.PinnedUntil(hs[0]); !ok {
		t.Fatal("the hit did not refresh the pin")
	}
	clk.advance(time.Minute)
	if _, ok := a.PinnedUntil(hs[0]); ok {
		t.Fatal("pin outlived its refreshed lifetime")
	}
	if st := a.Stats(); st.PinHits != 1 {
		t.Fatalf("pin hits %d, want 1", st.PinHits)
	}
	// Expired, the block is an ordinary cached block again.
	if _, cached, _ := a.Counts(); cached != 1 {
		t.Fatalf("cached %d after expiry, want 1", cached)
	}
}

func TestPinCapsPerTenantAndInAll(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	a, _ := NewPinning(8, PinConfig{MaxBlocks: 5, TenantBlocks: 3, Now: clk.Now})
	hs := fill(t, a, 8)
	if r := a.Pin("greedy", hs[:6], time.Hour); r.Added != 3 || r.Refused != 3 {
		t.Fatalf("greedy tenant: %+v, want 3 added and 3 refused by its cap", r)
	}
	if r := a.Pin("other", hs[6:], time.Hour); r.Added != 2 {
		t.Fatalf("other tenant: %+v, want 2 added (total cap 5)", r)
	}
	if r := a.Pin("third", hs[3:4], time.Hour); r.Added != 0 || r.Refused != 1 {
		t.Fatalf("third tenant over the total cap: %+v, want refused", r)
	}
	// Re-pinning a block someone else pinned extends it without charging.
	if r := a.Pin("third", hs[:1], 2*time.Hour); r.Kept != 1 || r.Added != 0 {
		t.Fatalf("re-pin: %+v, want kept", r)
	}
	total, by := a.PinCounts()
	if total != 5 || by["greedy"] != 3 || by["other"] != 2 || by["third"] != 0 {
		t.Fatalf("pin counts %d %v", total, by)
	}
	if until, _ := a.PinnedUntil(hs[0]); !until.Equal(clk.t.Add(2 * time.Hour)) {
		t.Fatalf("re-pin did not extend: until %v", until)
	}
}

func TestPinOffByDefault(t *testing.T) {
	a, _ := New(2)
	hs := fill(t, a, 2)
	if r := a.Pin("t", hs, time.Hour); r.Added != 0 || r.Refused != 2 {
		t.Fatalf("pin on a non-pinning allocator: %+v", r)
	}
	if a.Available() != 2 {
		t.Fatal("refused pin changed availability")
	}
}

func TestPinnedBlockHeldAndReleased(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	a, _ := NewPinning(2, PinConfig{MaxBlocks: 1, Now: clk.Now})
	id, _, _ := a.Allocate()
	a.Register(id, 7)
	a.Pin("t", []uint64{7}, time.Minute) // pinned while held
	clk.advance(2 * time.Minute)         // expires while held: stays held
	if held, cached, free := a.Counts(); held != 1 || cached != 0 || free != 1 {
		t.Fatalf("counts %d %d %d", held, cached, free)
	}
	a.Release(id) // expired: an ordinary cached block
	if _, cached, _ := a.Counts(); cached != 1 {
		t.Fatal("expired pin not cached on release")
	}
	a.Pin("t", []uint64{7}, time.Minute)
	a.Release(a.Acquire([]uint64{7})[0])
	if _, cached, _ := a.Counts(); cached != 0 {
		t.Fatal("pinned block went to the LRU list on release")
	}
	for range 100 { // many hits do not grow the heap without bound
		a.Release(a.Acquire([]uint64{7})[0])
		clk.advance(time.Millisecond)
	}
	if n := len(a.pins.ends); n > 4*a.pins.total+64 {
		t.Fatalf("heap of %d entries for %d pins", n, a.pins.total)
	}
}

func TestPinConfigValidate(t *testing.T) {
	if _, err := NewPinning(4, PinConfig{MaxBlocks: 5}); err == nil {
		t.Fatal("MaxBlocks above the blocks accepted")
	}
	if _, err := NewPinning(4, PinConfig{TenantBlocks: -1}); err == nil {
		t.Fatal("negative TenantBlocks accepted")
	}
}
