package lm

import (
	"sync/atomic"

	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// The host-memory KV tier (EngineConfig.HostKV), as Mooncake Store, LMCache
// and SGLang's HiCache keep one beside a GPU's KV cache, and as cloud/sim
// models it: a prefix block the engine's cache evicts is copied into a
// larger, bounded second cache (LRU), and a prompt whose cached prefix stops
// where the second cache's blocks continue it copies them back instead of
// recomputing them. On a GPU worker the two tiers are device and host
// memory and the copy crosses PCIe; in this CPU engine both are host memory
// and the point is the same trade: holding more conversations than the
// engine's KV budget for the price of a copy, not a prefill. Blocks are
// copied out when evicted, not as they are computed (a CPU engine has no
// copy engine to do it in the background), so the tier holds only blocks
// the cache has given up at least once; a reload leaves its copy in the
// tier (write-through), and the reloaded block's next eviction finds its
// hash there and only refreshes it.
//
// The tier reuses kvcache.Allocator for its bookkeeping: its blocks are
// registered under their hashes and held by nobody, so they sit on its LRU
// list and its Allocate evicts the least recently stored or loaded one. A
// block is held only while a reload copies it, so a store during that copy
// (the engine's allocations evict) cannot take it.
type hostTier struct {
	alloc *kvcache.Allocator
	kv    *kvStore
	bs    int
	// Counters the step loop writes and Stats reads: blocks written,
	// blocks copied back, prompt tokens those served.
	stores, loads, hitTokens atomic.Uint64
}

func newHostTier(cfg Config, blocks, blockSize int) (*hostTier, error) {
	a, err := kvcache.New(blocks)
	if err != nil {
		return nil, err
	}
	return &hostTier{alloc: a, kv: newKVStore(cfg, blocks*blockSize), bs: blockSize}, nil
}

// store keeps the contents of src's block id, which held the prefix block
// hashed h, as the engine's cache evicts it. A hash the tier holds already
// has the same contents; it only becomes the most recently used.
func (t *hostTier) store(src *kvStore, id int32, h uint64) {
	if held := t.alloc.Acquire([]uint64{h}); len(held) == 1 { // taking it moves it to the LRU list's end
		t.alloc.Release(held[0])
		return
	}
	b, _, ok := t.alloc.Allocate()
	if !ok {
		return // every block is being reloaded: drop this one
	}
	t.kv.copyFrom(src, int(b)*t.bs, int(id)*t.bs, t.bs)
	t.alloc.Register(b, h)
	t.alloc.Release(b)
	t.stores.Add(1)
}

// match counts the leading hashes the tier holds.
func (t *hostTier) match(hashes []uint64) int { return t.alloc.Probe(hashes) }

// take holds the tier's blocks for the leading hashes, so they stay while
// they are copied back; give releases them.
func (t *hostTier) take(hashes []uint64) []int32 { return t.alloc.Acquire(hashes) }

func (t *hostTier) give(blocks []int32) {
	for _, b := range blocks {
		t.alloc.Release(b)
	}
}

// load copies the tier's block b into dst's block id.
func (t *hostTier) load(dst *kvStore, id, b int32) {
	dst.copyFrom(t.kv, int(id)*t.bs, int(b)*t.bs, t.bs)
	t.loads.Add(1)
}

// HostTierStats are the host tier's state and counters (Stats.Host).
type HostTierStats struct {
	Blocks, BlocksTotal int // blocks held now, and the tier's size
	// Stores counts blocks kept as the engine's cache evicted them; Loads
	// blocks copied back into it for a prompt; Evictions blocks the tier
	// dropped to make room.
	Stores, Loads, Evictions uint64
	// HitTokens are prompt tokens served from reloaded blocks (a part of
	// Stats.PrefixHitTokens).
	HitTokens uint64
}

func (t *hostTier) stats() HostTierStats {
	held, cached, _ := t.alloc.Counts()
	return HostTierStats{Blocks: held + cached, BlocksTotal: t.alloc.Total(), Stores: t.stores.Load(),
		Loads: t.loads.Load(), Evictions: t.alloc.Stats().Evictions, HitTokens: t.hitTokens.Load()}
}
