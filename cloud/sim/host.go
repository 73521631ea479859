package sim

import "time"

// The host-memory KV tier, as Mooncake Store, LMCache and SGLang's HiCache
// keep one: a block whose hash the GPU cache evicts is kept in a bounded
// host-DRAM cache of the worker (LRU), and a later prompt that continues a
// GPU prefix hit with blocks the host holds copies them back over the host
// link instead of recomputing them; the step that admits it waits for the
// copy (StepShape.HostLoad, StepCost.Host). A block evicted while pinned
// (a soft pin yielding to an allocation) keeps its pin in the host tier
// until the pin's lifetime ends: the tier evicts unpinned blocks first
// and a pinned one only when nothing else is left.
//
// The copy to the host is not costed: engines write blocks out as they are
// computed, asynchronously on the copy engine and over the link's other
// direction, and a GPU computes KV at most at its prefill rate (for
// Llama-3.1-8B on an H100, about 35k tokens, 4.6 GB, a second), far under
// the link's 64 GB/s. Reloads stay in the host tier as well (write-through).

// hostTier is a worker's host KV cache: a kvCache whose blocks never have
// users, so each is on a free queue, soft-pinned ones on kept.
type hostTier struct {
	c   *kvCache
	now func() time.Duration

	stores, loads, evictions uint64 // blocks written, blocks read back, blocks dropped
}

func newHostTier(blocks int, now func() time.Duration) *hostTier {
	c := newKVCache(blocks)
	c.enablePins(blocks, blocks, now, true)
	return &hostTier{c: c, now: now}
}

// put keeps the content of hash h, evicted from the GPU; until is the end
// of the GPU block's pin (0 when it was not pinned), charged to tenant.
func (t *hostTier) put(h uint64, until time.Duration, tenant string) {
	c, p := t.c, t.c.pin
	c.expire()
	now := t.now()
	b, ok := c.byHash[h]
	if !ok {
		v := c.lru.head
		if v < 0 {
			if v = c.kept.head; v < 0 {
				return // a tier of no blocks
			}
		}
		if c.hash[v] != 0 {
			t.evictions++
		}
		b = c.alloc() // evicts the least recently used, a pinned block last
		c.ref[b] = 0
		c.register(b, h)
		t.stores++
	} else {
		c.unlink(b)
	}
	if until > now {
		if c.pinned(b) {
			p.extend(b, until)
		} else {
			p.pinBlock(b, tenant, until-now, until)
		}
	}
	c.push(b) // most recently used
}

// match counts the leading hashes the tier holds.
func (t *hostTier) match(hashes []uint64) int {
	t.c.expire()
	return t.c.match(hashes)
}

// load marks hashes (which match found) read back: recently used.
func (t *hostTier) load(hashes []uint64) {
	c := t.c
	for _, h := range hashes {
		b := c.byHash[h]
		c.unlink(b)
		c.push(b)
	}
	t.loads += uint64(len(hashes))
}

// pinned is how many blocks the tier holds under a live pin.
func (t *hostTier) pinned() int {
	t.c.expire()
	return t.c.pin.total
}
