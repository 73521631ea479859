package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/metrics/metricstest"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// TestCacheMetrics: a request that pins its system prompt shows up as
// pinned blocks and bytes of its tenant and as cache-write tokens; a second
// turn counts pin hits; the page follows the conventions.
func TestCacheMetrics(t *testing.T) {
	b := NewBuiltin(engineOf(t, tinyConfig))
	t.Cleanup(func() { b.Close() })
	reg := metrics.NewRegistry()
	RegisterCacheMetrics(reg, []*Builtin{b})
	sys := "You answer briefly about the car and nothing else at all."
	turn := func(user string) llm.Final {
		_, fin := collect(t, b, &llm.Request{Tenant: "acme", MaxTokens: 2, Seed: 1,
			Messages:     []llm.Message{{Role: "system", Content: sys}, {Role: "user", Content: user}},
			CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{{Message: 0, Chars: len(sys), TTL: 5 * time.Minute}}}})
		return fin
	}
	first := turn("hello")
	turn("and the tyres?")
	var page strings.Builder
	reg.WriteText(&page)
	fams := metricstest.Parse(t, page.String())
	metricstest.CheckConventions(t, fams)
	blocks, _ := metricstest.Value(fams, "phaseless_engine_pinned_blocks", "tenant=acme")
	bytes, _ := metricstest.Value(fams, "phaseless_engine_pinned_bytes", "tenant=acme")
	writes, _ := metricstest.Value(fams, "phaseless_engine_cache_write_tokens_total")
	hits, _ := metricstest.Value(fams, "phaseless_engine_pin_hits_total")
	bs := float64(b.LM().Config().BlockSize)
	if blocks == 0 || bytes <= blocks || writes != blocks*bs || float64(first.CacheWriteTokens) != writes || hits < blocks {
		t.Fatalf("pinned %v blocks, %v bytes, %v tokens written (first turn %d), %v pin hits", blocks, bytes, writes, first.CacheWriteTokens, hits)
	}
	for _, name := range []string{"phaseless_engine_pin_expiries_total", "phaseless_engine_pin_refused_blocks_total", "phaseless_engine_evictions_total",
		"phaseless_engine_host_kv_blocks", "phaseless_engine_host_kv_capacity_blocks", "phaseless_engine_host_kv_stores_total",
		"phaseless_engine_host_kv_loads_total", "phaseless_engine_host_kv_evictions_total", "phaseless_engine_host_hit_tokens_total"} {
		if _, ok := metricstest.Value(fams, name); !ok {
			t.Errorf("%s missing", name)
		}
	}
}

// TestHostTierMetrics: the host tier's families carry the engine's own
// counters. Two long prompts evict a first one's blocks into the tier, and
// the first again reloads them.
func TestHostTierMetrics(t *testing.T) {
	m, err := DevModel(tinyConfig, 7)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	perBlock := probe.Stats().PinnedBytesPerBlock
	probe.Close()
	// One 512-token context (32 blocks of 16) and two blocks more.
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 1, Threads: 1, KVBudgetBytes: 34 * perBlock, HostKV: 2})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuiltin(eng)
	t.Cleanup(func() { b.Close() })
	reg := metrics.NewRegistry()
	RegisterCacheMetrics(reg, []*Builtin{b})
	for _, word := range []string{"alpha", "bravo", "charlie", "alpha"} {
		collect(t, b, &llm.Request{MaxTokens: 2, Seed: 1, Messages: []llm.Message{{Role: "user", Content: strings.Repeat(word+" ", 300/len(word))}}})
	}
	st := eng.Stats().Host
	if st.Loads == 0 || st.HitTokens == 0 {
		t.Fatalf("the repeated prompt reloaded nothing: %+v", st)
	}
	var page strings.Builder
	reg.WriteText(&page)
	fams := metricstest.Parse(t, page.String())
	metricstest.CheckConventions(t, fams)
	for name, want := range map[string]float64{
		"phaseless_engine_host_kv_blocks":          float64(st.Blocks),
		"phaseless_engine_host_kv_capacity_blocks": float64(st.BlocksTotal),
		"phaseless_engine_host_kv_stores_total":    float64(st.Stores),
		"phaseless_engine_host_kv_loads_total":     float64(st.Loads),
		"phaseless_engine_host_kv_evictions_total": float64(st.Evictions),
		"phaseless_engine_host_hit_tokens_total":   float64(st.HitTokens),
	} {
		if got, ok := metricstest.Value(fams, name); !ok || got != want {
			t.Errorf("%s = %v (present %v), want the engine's %v", name, got, ok, want)
		}
	}
}
