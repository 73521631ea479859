package sim

import (
	"fmt"
	"time"
)

// kvCache is a paged KV cache with prefix caching, as vLLM's block pool:
// blocks are reference counted; a block whose last user is gone stays in
// the cache under its block hash, on a free queue in LRU order, until an
// allocation takes it (evicting the hash). The free queue holds every block
// with no user, cached or not, so usage is (blocks − free) / blocks, which is
// vLLM's kv_cache_usage_perc.
type kvCache struct {
	ref        []int32
	hash       []uint64 // 0 = no hash
	prev, next []int32  // free queue links; -1 = none
	lru        blockList
	// kept holds the unused blocks of soft pins (pin.go), evicted only
	// once lru is empty; it stays empty with hard pins.
	kept   blockList
	byHash map[uint64]int32
	pin    *pins // nil: pinning off (pin.go)
	// host, when set, receives every hash the cache evicts (host.go).
	host *hostTier
}

// blockList is a queue threaded through kvCache.prev and next.
type blockList struct {
	head, tail int32
	n          int
}

func newKVCache(blocks int) *kvCache {
	c := &kvCache{
		ref: make([]int32, blocks), hash: make([]uint64, blocks),
		prev: make([]int32, blocks), next: make([]int32, blocks),
		lru: blockList{head: -1, tail: -1}, kept: blockList{head: -1, tail: -1}, byHash: make(map[uint64]int32),
	}
	for b := range blocks {
		c.push(int32(b))
	}
	return c
}

// free is how many blocks an allocation can take.
func (c *kvCache) free() int { return c.lru.n + c.kept.n }

// idle reports that b is on a free queue: no user, and no hard pin.
func (c *kvCache) idle(b int32) bool { return c.ref[b] == 0 && (!c.pinned(b) || c.pin.soft) }

func (c *kvCache) blocks() int { return len(c.ref) }

func (c *kvCache) usage() float64 { return float64(len(c.ref)-c.free()) / float64(len(c.ref)) }

// push appends b to the free queue's tail (evicted last): lru's, or kept's
// for a soft-pinned block.
func (c *kvCache) push(b int32) {
	l := &c.lru
	if c.pinned(b) {
		l = &c.kept
	}
	c.prev[b], c.next[b] = l.tail, -1
	if l.tail >= 0 {
		c.next[l.tail] = b
	} else {
		l.head = b
	}
	l.tail = b
	l.n++
}

// unlink takes b off the free queue it is on.
func (c *kvCache) unlink(b int32) {
	l := &c.lru
	if c.pinned(b) {
		l = &c.kept
	}
	if p := c.prev[b]; p >= 0 {
		c.next[p] = c.next[b]
	} else {
		l.head = c.next[b]
	}
	if n := c.next[b]; n >= 0 {
		c.prev[n] = c.prev[b]
	} else {
		l.tail = c.prev[b]
	}
	c.prev[b], c.next[b] = -1, -1
	l.n--
}

// alloc takes the least recently freed block, evicting its hash (into the
// host tier, when there is one), and a soft-pinned one only when no other
// is left; -1 when every block is in use.
func (c *kvCache) alloc() int32 {
	b := c.lru.head
	var until time.Duration
	var owner string
	if b < 0 {
		if b = c.kept.head; b < 0 {
			return -1
		}
		c.unlink(b)
		until, owner = c.pin.until[b], c.pin.owner[b]
		c.unpin(b)
	} else {
		c.unlink(b)
	}
	if h := c.hash[b]; h != 0 {
		if c.host != nil {
			c.host.put(h, until, owner)
		}
		delete(c.byHash, h)
		c.hash[b] = 0
	}
	c.ref[b] = 1
	return b
}

// match counts the leading hashes cached (in use or free).
func (c *kvCache) match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// take adds a user to the cached block holding h (which match found).
func (c *kvCache) take(h uint64) int32 {
	b := c.byHash[h]
	if c.idle(b) {
		c.unlink(b)
	}
	c.ref[b]++
	c.touch(b)
	return b
}

// release drops a sequence's blocks, last block first, so the tail of a
// prompt is evicted before its (more shared) head, as vLLM does.
func (c *kvCache) release(bs []int32) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		c.ref[b]--
		if c.idle(b) {
			c.push(b)
		}
	}
}

// register records that block b holds the content of hash h, unless
// another block already does (two sequences computed the same prefix at
// once; the first keeps the entry).
func (c *kvCache) register(b int32, h uint64) {
	if _, ok := c.byHash[h]; ok || c.hash[b] != 0 {
		return
	}
	c.hash[b] = h
	c.byHash[h] = b
}

// check verifies the invariants: the free queue holds exactly the blocks
// without users, and users equals the references sequences hold.
func (c *kvCache) check(refs map[int32]int32) error {
	n := 0
	for _, l := range []*blockList{&c.lru, &c.kept} {
		k := 0
		for b := l.head; b >= 0; b = c.next[b] {
			if c.ref[b] != 0 || (l == &c.kept) != c.pinned(b) {
				return fmt.Errorf("block %d on the wrong free queue (%d users, pinned %v)", b, c.ref[b], c.pinned(b))
			}
			k++
			if k > len(c.ref) {
				return fmt.Errorf("free queue loops")
			}
		}
		if k != l.n {
			return fmt.Errorf("free queue has %d blocks, count says %d", k, l.n)
		}
		n += k
	}
	idle := 0
	if c.pin != nil && !c.pin.soft {
		idle = c.pinnedIdle()
	}
	if n+idle != len(c.ref)-countUsed(c.ref) {
		return fmt.Errorf("%d free and %d idle pinned blocks, but %d without users", n, idle, len(c.ref)-countUsed(c.ref))
	}
	for b := range c.ref {
		if c.ref[b] < 0 || c.ref[b] != refs[int32(b)] {
			return fmt.Errorf("block %d: %d users counted, %d held", b, c.ref[b], refs[int32(b)])
		}
	}
	for h, b := range c.byHash {
		if c.hash[b] != h {
			return fmt.Errorf("hash %x maps to block %d holding %x", h, b, c.hash[b])
		}
	}
	return nil
}

func countUsed(ref []int32) int {
	n := 0
	for _, r := range ref {
		if r > 0 {
			n++
		}
	}
	return n
}
