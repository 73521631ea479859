package sim

import (
	"container/heap"
	"time"
)

// Prompt-cache pinning in the simulated KV cache, as models/lm/kvcache
// does it live: a pinned block is kept off the free queue (never evicted)
// until its lifetime ends, each prefix hit restarts the lifetime, and a cap
// on pinned blocks per engine and per tenant refuses pins beyond it (the
// blocks stay ordinarily cached).

// pins is the kvCache's pin state; nil maps mean pinning is off.
type pins struct {
	until    []time.Duration // 0: not pinned
	ttl      []time.Duration
	owner    []string
	gen      []uint32
	ends     simPinHeap
	byTenant map[string]int
	total    int
	max      int // blocks; 0 = pinning off
	tenant   int // blocks per tenant
	now      func() time.Duration
	// soft pins keep their unused blocks on kvCache.kept, taken only when
	// nothing else is free, instead of off every free queue: a pin then
	// never keeps a sequence from being admitted.
	soft bool

	hits, expiries, refused, evicted uint64
}

func (c *kvCache) enablePins(maxBlocks, tenantBlocks int, now func() time.Duration, soft bool) {
	n := len(c.ref)
	c.pin = &pins{
		until: make([]time.Duration, n), ttl: make([]time.Duration, n), owner: make([]string, n),
		gen: make([]uint32, n), byTenant: map[string]int{}, max: maxBlocks, tenant: tenantBlocks, now: now, soft: soft,
	}
}

// unpin ends b's pin early: an allocation evicted a soft-pinned block.
func (c *kvCache) unpin(b int32) {
	p := c.pin
	p.until[b] = 0
	p.gen[b]++ // its heap entry is stale now
	p.total--
	p.byTenant[p.owner[b]]--
	p.owner[b] = ""
	p.evicted++
}

func (c *kvCache) pinned(b int32) bool { return c.pin != nil && c.pin.until[b] != 0 }

// touch restarts a pinned block's lifetime on a prefix hit.
func (c *kvCache) touch(b int32) {
	if !c.pinned(b) {
		return
	}
	c.pin.hits++
	c.pin.extend(b, c.pin.now()+c.pin.ttl[b])
}

func (p *pins) extend(b int32, until time.Duration) {
	if until <= p.until[b] {
		return
	}
	p.until[b] = until
	p.gen[b]++
	heap.Push(&p.ends, simPinEnd{until: until, b: b, gen: p.gen[b]})
	if len(p.ends) > 4*p.total+64 {
		live := p.ends[:0]
		for _, e := range p.ends {
			if p.gen[e.b] == e.gen && p.until[e.b] != 0 {
				live = append(live, e)
			}
		}
		p.ends = live
		heap.Init(&p.ends)
	}
}

// pinPrefix pins the cached blocks of the leading hashes for ttl, charged
// to tenant, stopping at the first one not cached or refused by a cap. It
// returns the blocks newly pinned.
func (c *kvCache) pinPrefix(tenant string, hashes []uint64, ttl time.Duration) int {
	p := c.pin
	if p == nil || ttl <= 0 {
		return 0
	}
	c.expire()
	until := p.now() + ttl
	added := 0
	for i, h := range hashes {
		b, ok := c.byHash[h]
		if !ok {
			break
		}
		if p.until[b] != 0 {
			p.ttl[b] = max(p.ttl[b], ttl)
			p.extend(b, until)
			continue
		}
		if p.total >= p.max || p.byTenant[tenant] >= p.tenant {
			p.refused += uint64(len(hashes) - i)
			break
		}
		idle := c.ref[b] == 0
		if idle {
			c.unlink(b) // off lru; a soft pin's block joins kept below
		}
		p.pinBlock(b, tenant, ttl, until)
		if idle && p.soft {
			c.push(b)
		}
		added++
	}
	return added
}

// pinBlock pins b, which is not pinned and on no free queue, until then.
func (p *pins) pinBlock(b int32, tenant string, ttl, until time.Duration) {
	p.ttl[b], p.owner[b] = ttl, tenant
	p.extend(b, until)
	p.byTenant[tenant]++
	p.total++
}

// expire ends the pins whose lifetime is over; their blocks, if unused,
// join the free queue's tail (evicted last among the free).
func (c *kvCache) expire() {
	p := c.pin
	if p == nil {
		return
	}
	now := p.now()
	for len(p.ends) > 0 && p.ends[0].until <= now {
		e := heap.Pop(&p.ends).(simPinEnd)
		b := e.b
		if p.gen[b] != e.gen || p.until[b] == 0 {
			continue
		}
		if c.ref[b] == 0 && p.soft {
			c.unlink(b) // off kept, onto lru below
		}
		p.until[b] = 0
		p.total--
		p.byTenant[p.owner[b]]--
		p.owner[b] = ""
		p.expiries++
		if c.ref[b] == 0 {
			c.push(b)
		}
	}
}

// pinnedIdle is how many pinned blocks have no user (kept out of the free
// queue only by their pin).
func (c *kvCache) pinnedIdle() int {
	if c.pin == nil {
		return 0
	}
	n := 0
	for b, u := range c.pin.until {
		if u != 0 && c.ref[b] == 0 {
			n++
		}
	}
	return n
}

type simPinEnd struct {
	until time.Duration
	b     int32
	gen   uint32
}

type simPinHeap []simPinEnd

func (h simPinHeap) Len() int           { return len(h) }
func (h simPinHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h simPinHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simPinHeap) Push(x any)        { *h = append(*h, x.(simPinEnd)) }
func (h *simPinHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
