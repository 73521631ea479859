// Package kvcache is the block allocator behind the engine's paged KV cache:
// fixed-size blocks of token positions, reference counts so sequences can share
// blocks, a table of full blocks keyed by a hash chained on their parent block
// (vLLM's prefix caching), and LRU reuse of blocks nobody holds any more but
// whose contents may still be asked for.
//
// The allocator only hands out block numbers; the engine owns the memory the
// numbers index. A block is in exactly one state: held (refs > 0), pinned
// (refs = 0, registered, kept until its prompt-caching lifetime ends; see
// Pin), cached (refs = 0, registered under a hash, on the LRU list), or free.
package kvcache

import (
	"fmt"
	"sync"
	"time"
)

// Hash chaining constants: splitmix64's, so hashes are stable across
// processes and versions (the cloud scheduler compares hashes computed on one
// machine with caches on another).
const (
	hashSeed = 0x6a09e667f3bcc908
	mixMul1  = 0xbf58476d1ce4e5b9
	mixMul2  = 0x94d049bb133111eb
)

func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= mixMul1
	h ^= h >> 27
	h *= mixMul2
	return h ^ h>>31
}

// DefaultBlockSize is the block size in tokens an engine uses when its
// configuration names none: 16, as vLLM. Whoever hashes prompts to match an
// engine's cache (a coordinator placing requests) must cut at the same size.
const DefaultBlockSize = 16

// BlockHashes returns one hash per full block of tokens: block i's hash covers
// its own tokens and, through its parent's hash, every token before it, so
// equal hashes mean equal prefixes. A trailing partial block has no hash.
func BlockHashes(tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	out := make([]uint64, len(tokens)/blockSize)
	parent := uint64(RootHash)
	for i := range out {
		parent = NextHash(parent, i, tokens[i*blockSize:(i+1)*blockSize])
		out[i] = parent
	}
	return out
}

// RootHash is the parent hash of block 0.
const RootHash = hashSeed

// NextHash is the hash of block number index holding block, whose parent
// block hashed to parent (RootHash for block 0).
func NextHash(parent uint64, index int, block []int32) uint64 {
	h := parent
	for _, t := range block {
		h = mix(h ^ uint64(uint32(t)) ^ uint64(len(block))<<32)
	}
	return mix(h + uint64(index+1))
}

// Allocator hands out KV blocks. It is safe for concurrent use.
type Allocator struct {
	mu     sync.Mutex // guards everything below
	refs   []int32
	hash   []uint64
	hashed []bool
	byHash map[uint64]int32
	free   []int32 // stack of free, unhashed blocks
	// LRU of cached blocks (refs 0, hashed): a doubly linked list threaded
	// through prev/next, oldest at head.
	prev, next []int32
	head, tail int32
	cached     int
	held       int
	stats      Stats
	pins       pinTable
	onEvict    func(id int32, hash uint64) // SetEvictHook
}

// Stats counts allocator events since creation.
type Stats struct {
	Allocations uint64
	Evictions   uint64 // allocations that had to drop a cached block
	Failures    uint64 // allocations with no block to give
	Hits        uint64 // blocks found by Acquire
	// PinHits counts Acquire hits on pinned blocks (each refreshed its
	// lifetime); PinExpiries pins that ran out and became evictable.
	PinHits, PinExpiries uint64
	// PinRefused counts blocks a Pin could not pin because the tenant's
	// or the allocator's cap was reached (they stay merely cached).
	PinRefused uint64
}

// New makes an allocator of n blocks that pins nothing (Pin refuses every
// block); NewPinning gives it caps and a clock.
func New(n int) (*Allocator, error) { return NewPinning(n, PinConfig{}) }

// NewPinning makes an allocator of n blocks whose Pin keeps prompt-cache
// prefixes within cfg's caps.
func NewPinning(n int, cfg PinConfig) (*Allocator, error) {
	if n <= 0 {
		return nil, fmt.Errorf("kvcache: need at least one block, got %d", n)
	}
	if err := cfg.validate(n); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Allocator{
		refs: make([]int32, n), hash: make([]uint64, n), hashed: make([]bool, n),
		byHash: map[uint64]int32{}, free: make([]int32, n),
		prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1,
		pins: newPinTable(n, cfg),
	}
	for i := range a.free {
		a.free[i] = int32(n - 1 - i) // pop from the end: block 0 first
	}
	return a, nil
}

// Total is the number of blocks.
func (a *Allocator) Total() int { return len(a.refs) }

// Counts returns how many blocks are held, cached (reusable prefix, evictable)
// and free. Pinned blocks nobody holds are in none of the three (PinCounts).
func (a *Allocator) Counts() (held, cached, free int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	return a.held, a.cached, len(a.free)
}

// Available is how many blocks an allocation could get (free plus evictable;
// never a live pinned block).
func (a *Allocator) Available() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	return len(a.free) + a.cached
}

// Stats returns the event counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// SetEvictHook has f called whenever Allocate drops a cached block, with
// the block and the hash it held, before the block is handed out: its
// contents are still intact, so a second tier (the engine's host-memory
// cache) can keep them. f runs with the allocator's lock held and must not
// call the allocator.
func (a *Allocator) SetEvictHook(f func(id int32, hash uint64)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onEvict = f
}

// Allocate returns a block held once by the caller. evicted reports that a
// cached prefix block had to be dropped to make room; ok is false when every
// block is held.
func (a *Allocator) Allocate() (id int32, evicted, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) == 0 {
		a.expireLocked() // a pin that ran out is evictable again
	}
	switch {
	case len(a.free) > 0:
		id = a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
	case a.head >= 0:
		id = a.head
		a.unlink(id)
		if a.onEvict != nil {
			a.onEvict(id, a.hash[id])
		}
		delete(a.byHash, a.hash[id])
		a.hashed[id] = false
		evicted = true
		a.stats.Evictions++
	default:
		a.stats.Failures++
		return -1, false, false
	}
	a.refs[id] = 1
	a.held++
	a.stats.Allocations++
	return id, evicted, true
}

// Acquire takes a reference on the cached blocks for the leading hashes and
// returns them; it stops at the first hash not cached.
func (a *Allocator) Acquire(hashes []uint64) []int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked() // a pin past its end is not refreshed by a late hit
	var out []int32
	for _, h := range hashes {
		id, ok := a.byHash[h]
		if !ok {
			break
		}
		if a.refs[id] == 0 {
			if !a.pins.pinned(id) {
				a.unlink(id)
			}
			a.held++
		}
		a.refs[id]++
		if a.pins.refresh(id) {
			a.stats.PinHits++
		}
		out = append(out, id)
	}
	a.stats.Hits += uint64(len(out))
	return out
}

// Probe counts the leading hashes that are cached, without taking anything.
func (a *Allocator) Probe(hashes []uint64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, h := range hashes {
		if _, ok := a.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Register records that held block id now holds the full block with hash h,
// so later sequences with the same prefix can Acquire it. When another block
// already has h, id stays private (and is freed, not cached, on release).
func (a *Allocator) Register(id int32, h uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hashed[id] {
		return
	}
	if _, dup := a.byHash[h]; dup {
		return
	}
	a.byHash[h] = id
	a.hash[id] = h
	a.hashed[id] = true
}

// Shared reports whether writing into block id would change what someone
// else sees: another holder, or a registered prefix later sequences may reuse.
func (a *Allocator) Shared(id int32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refs[id] > 1 || a.hashed[id]
}

// Release drops one reference. A block nobody holds goes to the LRU list if it
// is a registered prefix, else to the free list.
func (a *Allocator) Release(id int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refs[id] <= 0 {
		panic(fmt.Sprintf("kvcache: release of unheld block %d", id))
	}
	a.refs[id]--
	if a.refs[id] > 0 {
		return
	}
	a.held--
	switch {
	case a.pins.pinned(id):
		// Kept off the LRU list: nothing evicts it until the pin ends.
	case a.hashed[id]:
		a.pushTail(id)
	default:
		a.free = append(a.free, id)
	}
}

func (a *Allocator) pushTail(id int32) {
	a.prev[id], a.next[id] = a.tail, -1
	if a.tail >= 0 {
		a.next[a.tail] = id
	} else {
		a.head = id
	}
	a.tail = id
	a.cached++
}

func (a *Allocator) unlink(id int32) {
	p, n := a.prev[id], a.next[id]
	if p >= 0 {
		a.next[p] = n
	} else {
		a.head = n
	}
	if n >= 0 {
		a.prev[n] = p
	} else {
		a.tail = p
	}
	a.cached--
}
