package lm

import (
	"context"
	"slices"
	"testing"

	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// TestHostTierReloadsEvictedPrefix: a prompt's prefix blocks, evicted from
// the engine's cache by three later prompts, are kept by the host tier and
// copied back when the conversation continues: every one of its blocks is a
// hit, none is recomputed, and what the engine writes is exactly what an
// engine that never evicted anything writes (sampled, so any difference in
// the reloaded keys and values would change the draws). The same traffic
// without the tier recomputes the whole prompt. When only part of the
// prefix was evicted, the cache keeps its head (blocks are released last
// first, so the LRU list drops a sequence's tail first) and the tier the
// rest, and the follow-up takes both. With a tier too small for both the
// reloaded prefix and what the reload's own allocations evict into it, the
// blocks being copied are held, so the evictions cannot take them.
func TestHostTierReloadsEvictedPrefix(t *testing.T) {
	cfg := tinyConfig()
	cfg.ContextLen = 64 // 16 blocks of 4: the budget below holds one context and a little
	m, _ := buildModel(t, cfg, F32, 9, false)
	ps := prompts(5, 40, 40) // 10 full blocks each
	first := ps[0][:32]      // 8 full blocks
	follow := append(slices.Clone(first), 7, 8, 9, 10, 11, 12)
	opts := func(i int) GenOptions {
		return GenOptions{MaxTokens: 6, Temperature: 0.8, Seed: uint64(7 + i), IgnoreEOS: true}
	}
	// run plays first, others, then follow, and reports where follow's 8
	// prefix blocks were just before it: in the cache, then in the tier.
	run := func(hostKV float64, others ...[]int32) (e *Engine, hit, gpu, host int) {
		traffic := append(append([][]int32{first}, others...), follow)
		want := solo(t, m, traffic, opts)
		e = newEngine(t, m, EngineConfig{BlockSize: 4, MaxBatch: 1, KVBudgetBytes: 20 * blockBytes(m.Config, 4), HostKV: hostKV})
		var got []result
		for i, p := range traffic {
			if i == len(traffic)-1 {
				gpu, host = e.cachedPrefix(kvcache.BlockHashes(follow, 4))
				if n := e.CachedPrefixBlocks(kvcache.BlockHashes(follow, 4)); n != gpu+host {
					t.Fatalf("CachedPrefixBlocks = %d, want the cache's and the tier's %d", n, gpu+host)
				}
			}
			got = append(got, generate(context.Background(), e, p, opts(i)))
		}
		sameResults(t, got, want)
		if st := e.Stats(); st.KVBlocksUsed != 0 {
			t.Fatalf("%d blocks still held after every request ended", st.KVBlocksUsed)
		}
		return e, got[len(got)-1].final.PrefixHitTokens, gpu, host
	}

	e, hit, gpu, host := run(4, ps[1:4]...)
	st := e.Stats()
	if gpu != 0 || host != 8 || hit != 32 {
		t.Fatalf("evicted whole: the cache held %d blocks and the tier %d, the follow-up hit %d tokens; want 0, 8, 32", gpu, host, hit)
	}
	if st.Host.HitTokens != 32 || st.Host.Loads != 8 || st.Host.Stores == 0 || st.Host.BlocksTotal != 80 || st.Host.Blocks == 0 {
		t.Fatalf("host tier stats %+v", st.Host)
	}
	if _, hit, _, _ := run(0, ps[1:4]...); hit != 0 {
		t.Fatalf("without a host tier the follow-up hit %d tokens, want 0 (its blocks were evicted)", hit)
	}

	// A 48-token prompt (14 blocks with its reply) evicts 3 of the first
	// prompt's 9: its reply's block and the prefix's last two.
	mid := prompts(2, 48, 48)[1]
	if _, hit, gpu, host := run(4, mid); gpu != 6 || host != 2 || hit != 32 {
		t.Fatalf("evicted in part: the cache held %d blocks and the tier %d, the follow-up hit %d tokens; want 6, 2, 32", gpu, host, hit)
	}
	if _, hit, gpu, _ := run(0, mid); gpu != 6 || hit != 24 {
		t.Fatalf("evicted in part, no tier: the cache held %d blocks, the follow-up hit %d tokens; want 6, 24", gpu, hit)
	}

	// 12 blocks, which two other prompts fill (the first prompt's 9 and 3
	// of the next one's): the follow-up's allocations evict more into the
	// full tier while its 8 blocks are being copied out of it.
	e, hit, _, _ = run(0.6, ps[1:3]...)
	if hit != 32 {
		t.Fatalf("small tier: the follow-up hit %d tokens, want 32", hit)
	}
	if st := e.Stats(); st.Host.Evictions == 0 || st.Host.Blocks > 12 || st.Host.Loads != 8 {
		t.Fatalf("small tier stats %+v: want evictions, at most 12 blocks, 8 loads", st.Host)
	}
	// Any HostKV above 0 is a tier: a fraction of one block rounds up.
	if st := newEngine(t, m, EngineConfig{BlockSize: 4, KVBudgetBytes: 20 * blockBytes(m.Config, 4), HostKV: 0.01}).Stats(); st.Host.BlocksTotal != 1 {
		t.Fatalf("HostKV 0.01 of 20 blocks: a tier of %d blocks, want 1", st.Host.BlocksTotal)
	}
}

// TestHostTierHoldsWhatItReloads: blocks taken for a reload stay, with their
// contents, however many stores come meanwhile; the stores evict the other
// blocks, least recently used first, and are dropped when nothing else is
// left. A hash stored twice is kept once.
func TestHostTierHoldsWhatItReloads(t *testing.T) {
	cfg := tinyConfig()
	src := newKVStore(cfg, 8*4) // 8 blocks of 4 positions
	for l := range src.k {
		for i := range src.k[l] {
			src.k[l][i], src.v[l][i] = float32(l*100000+i), -float32(l*100000+i)
		}
	}
	tier, err := newHostTier(cfg, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	for id := range int32(3) {
		tier.store(src, id, uint64(100+id))
	}
	tier.store(src, 0, 100) // again: kept once, now the most recently used
	if st := tier.stats(); st.Stores != 3 || st.Blocks != 3 || st.Evictions != 0 {
		t.Fatalf("after 4 stores of 3 hashes: %+v", st)
	}
	held := tier.take([]uint64{101})
	for id := range int32(3) {
		tier.store(src, 3+id, uint64(103+id)) // evicts 102, 100, then 103: never the held 101
	}
	present := func(want ...uint64) {
		t.Helper()
		for h := uint64(100); h <= 106; h++ {
			if got := tier.match([]uint64{h}) == 1; got != slices.Contains(want, h) {
				t.Fatalf("hash %d held: %v, want the tier to hold exactly %v", h, got, want)
			}
		}
	}
	present(101, 104, 105)
	others := tier.take([]uint64{104})
	others = append(others, tier.take([]uint64{105})...)
	tier.store(src, 6, 106) // every block is held: dropped
	present(101, 104, 105)
	tier.give(others)
	dst := newKVStore(cfg, 4)
	tier.load(dst, 0, held[0])
	tier.give(held)
	kvDim := src.kvDim
	for l := range dst.k {
		if !slices.Equal(dst.k[l], src.k[l][4*kvDim:8*kvDim]) || !slices.Equal(dst.v[l], src.v[l][4*kvDim:8*kvDim]) {
			t.Fatalf("layer %d: the reloaded block's keys or values differ from block 1's", l)
		}
	}
	if st := tier.stats(); st.Loads != 1 || st.Stores != 6 || st.Evictions != 3 {
		t.Fatalf("stats %+v, want 1 load, 6 stores, 3 evictions", st)
	}
}
