package sim

import "fmt"

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
	head, tail int32
	free       int
	byHash     map[uint64]int32
	pin        *pins // nil: pinning off (pin.go)
}

func newKVCache(blocks int) *kvCache {
	c := &kvCache{
		ref: make([]int32, blocks), hash: make([]uint64, blocks),
		prev: make([]int32, blocks), next: make([]int32, blocks),
		head: -1, tail: -1, byHash: make(map[uint64]int32),
	}
	for b := range blocks {
		c.push(int32(b))
	}
	return c
}

func (c *kvCache) blocks() int { return len(c.ref) }

func (c *kvCache) usage() float64 { return float64(len(c.ref)-c.free) / float64(len(c.ref)) }

// push appends b to the free queue's tail (evicted last).
func (c *kvCache) push(b int32) {
	c.prev[b], c.next[b] = c.tail, -1
	if c.tail >= 0 {
		c.next[c.tail] = b
	} else {
		c.head = b
	}
	c.tail = b
	c.free++
}

func (c *kvCache) unlink(b int32) {
	if p := c.prev[b]; p >= 0 {
		c.next[p] = c.next[b]
	} else {
		c.head = c.next[b]
	}
	if n := c.next[b]; n >= 0 {
		c.prev[n] = c.prev[b]
	} else {
		c.tail = c.prev[b]
	}
	c.prev[b], c.next[b] = -1, -1
	c.free--
}

// alloc takes the least recently freed block, evicting its hash; -1 when
// every block is in use.
func (c *kvCache) alloc() int32 {
	b := c.head
	if b < 0 {
		return -1
	}
	c.unlink(b)
	if h := c.hash[b]; h != 0 {
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
	if c.ref[b] == 0 && !c.pinned(b) {
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
		if c.ref[b] == 0 && !c.pinned(b) {
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
	for b := c.head; b >= 0; b = c.next[b] {
		if c.ref[b] != 0 {
			return fmt.Errorf("block %d on the free queue with %d users", b, c.ref[b])
		}
		n++
		if n > len(c.ref) {
			return fmt.Errorf("free queue loops")
		}
	}
	if n != c.free {
		return fmt.Errorf("free queue has %d blocks, count says %d", n, c.free)
	}
	if idle := c.pinnedIdle(); n+idle != len(c.ref)-countUsed(c.ref) {
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
