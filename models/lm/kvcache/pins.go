package kvcache

import (
	"container/heap"
	"fmt"
	"time"
)

// PinConfig bounds prompt-cache pinning. The zero value pins nothing.
type PinConfig struct {
	// MaxBlocks caps the pinned blocks of all tenants together, so running
	// sequences always have room (the engine keeps at least one full
	// context outside it). 0 turns pinning off.
	MaxBlocks int
	// TenantBlocks caps one tenant's pinned blocks, so one tenant cannot
	// take the whole pinned share. 0 means MaxBlocks.
	TenantBlocks int
	// Now is the clock lifetimes are measured on (default time.Now).
	Now func() time.Time
}

func (c PinConfig) validate(blocks int) error {
	switch {
	case c.MaxBlocks < 0 || c.MaxBlocks > blocks:
		return fmt.Errorf("kvcache: PinConfig.MaxBlocks %d outside 0..%d", c.MaxBlocks, blocks)
	case c.TenantBlocks < 0 || c.TenantBlocks > blocks:
		return fmt.Errorf("kvcache: PinConfig.TenantBlocks %d outside 0..%d", c.TenantBlocks, blocks)
	}
	return nil
}

// pinTable is the allocator's record of pinned blocks: each one's end of
// life, lifetime (what a hit refreshes it by) and owning tenant, and a heap
// of ends to expire them in order. Refreshing pushes a new heap entry and
// bumps the block's generation, so the older entry is skipped when popped.
type pinTable struct {
	cfg      PinConfig
	until    []time.Time // zero: not pinned
	ttl      []time.Duration
	owner    []string
	gen      []uint32
	ends     pinHeap
	byTenant map[string]int
	total    int
}

func newPinTable(n int, cfg PinConfig) pinTable {
	if cfg.TenantBlocks == 0 {
		cfg.TenantBlocks = cfg.MaxBlocks
	}
	return pinTable{
		cfg: cfg, until: make([]time.Time, n), ttl: make([]time.Duration, n),
		owner: make([]string, n), gen: make([]uint32, n), byTenant: map[string]int{},
	}
}

func (p *pinTable) pinned(id int32) bool { return !p.until[id].IsZero() }

// refresh restarts a pinned block's lifetime (a cache hit, as Anthropic's
// cache refreshes on use); false when id is not pinned.
func (p *pinTable) refresh(id int32) bool {
	if !p.pinned(id) {
		return false
	}
	p.extend(id, p.cfg.Now().Add(p.ttl[id]))
	return true
}

func (p *pinTable) extend(id int32, until time.Time) {
	if !until.After(p.until[id]) {
		return
	}
	p.until[id] = until
	p.gen[id]++
	heap.Push(&p.ends, pinEnd{until: until, id: id, gen: p.gen[id]})
	if len(p.ends) > 4*p.total+64 {
		p.compact()
	}
}

// compact drops stale heap entries, so a block hit many times does not
// grow the heap without bound.
func (p *pinTable) compact() {
	live := p.ends[:0]
	for _, e := range p.ends {
		if p.gen[e.id] == e.gen && p.pinned(e.id) {
			live = append(live, e)
		}
	}
	clear(p.ends[len(live):])
	p.ends = live
	heap.Init(&p.ends)
}

type pinEnd struct {
	until time.Time
	id    int32
	gen   uint32
}

type pinHeap []pinEnd

func (h pinHeap) Len() int           { return len(h) }
func (h pinHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h pinHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pinHeap) Push(x any)        { *h = append(*h, x.(pinEnd)) }
func (h *pinHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// PinResult is what one Pin did, in blocks.
type PinResult struct {
	Added   int // newly pinned: a cache write
	Kept    int // already pinned: lifetime extended to at least the new end
	Refused int // cached but not pinned: a cap was reached (the rest of the prefix is not tried)
}

// Pin keeps the cached blocks of the leading hashes (those Acquire would
// find, up to the first one not cached) until ttl from now, charged to
// tenant: they are never evicted while pinned, and each Acquire hit restarts
// their lifetime. A block another tenant pinned stays charged to that tenant
// and only has its lifetime extended. Pinning stops at the first block a cap
// refuses, because a pinned block behind an evictable one could never be
// reached by a prefix match.
func (a *Allocator) Pin(tenant string, hashes []uint64, ttl time.Duration) PinResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	p := &a.pins
	var r PinResult
	if ttl <= 0 {
		return r
	}
	until := p.cfg.Now().Add(ttl)
	for i, h := range hashes {
		id, ok := a.byHash[h]
		if !ok {
			break
		}
		if p.pinned(id) {
			p.ttl[id] = max(p.ttl[id], ttl)
			p.extend(id, until)
			r.Kept++
			continue
		}
		if p.total >= p.cfg.MaxBlocks || p.byTenant[tenant] >= p.cfg.TenantBlocks {
			r.Refused = len(hashes) - i
			for _, h := range hashes[i:] {
				if _, ok := a.byHash[h]; !ok {
					r.Refused--
				}
			}
			a.stats.PinRefused += uint64(r.Refused)
			break
		}
		if a.refs[id] == 0 {
			a.unlink(id) // off the LRU list: no longer evictable
		}
		p.ttl[id], p.owner[id] = ttl, tenant
		p.extend(id, until)
		p.byTenant[tenant]++
		p.total++
		r.Added++
	}
	return r
}

// expireLocked ends the pins whose lifetime is over: a block nobody holds
// goes to the LRU list's tail, evictable again. It reports whether any
// ended.
func (a *Allocator) expireLocked() bool {
	p := &a.pins
	if len(p.ends) == 0 {
		return false
	}
	now := p.cfg.Now()
	ended := false
	for len(p.ends) > 0 && !p.ends[0].until.After(now) {
		e := heap.Pop(&p.ends).(pinEnd)
		if p.gen[e.id] != e.gen || !p.pinned(e.id) {
			continue
		}
		id := e.id
		p.until[id] = time.Time{}
		p.total--
		if p.byTenant[p.owner[id]]--; p.byTenant[p.owner[id]] == 0 {
			delete(p.byTenant, p.owner[id])
		}
		p.owner[id] = ""
		if a.refs[id] == 0 {
			a.pushTail(id)
		}
		a.stats.PinExpiries++
		ended = true
	}
	return ended
}

// PinCounts returns how many blocks are pinned, in all and per tenant (a
// fresh map the caller owns).
func (a *Allocator) PinCounts() (total int, byTenant map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	byTenant = make(map[string]int, len(a.pins.byTenant))
	for t, n := range a.pins.byTenant {
		byTenant[t] = n
	}
	return a.pins.total, byTenant
}

// PinnedUntil reports when the block holding hash h stops being pinned;
// false when no cached block holds h or it is not pinned.
func (a *Allocator) PinnedUntil(h uint64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	id, ok := a.byHash[h]
	if !ok || !a.pins.pinned(id) {
		return time.Time{}, false
	}
	return a.pins.until[id], true
}
