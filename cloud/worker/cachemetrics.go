package worker

import (
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/metrics"
)

type engineStats = lm.Stats

// RegisterCacheMetrics exports the built-in engines' prompt-cache state:
// pinned blocks and bytes per tenant, and the pin, eviction and cache-write
// counters. The cache hit ratio is
// rate(phaseless_engine_prefix_hit_tokens_total) /
// rate(phaseless_engine_prompt_tokens_total) (docs/metrics.md: ratios are
// PromQL's).
func RegisterCacheMetrics(reg *metrics.Registry, engines []*Builtin) {
	byTenant := func(bytes bool) func(metrics.Emit) {
		return func(emit metrics.Emit) {
			sum := map[string]float64{}
			for _, b := range engines {
				s := b.eng.Stats()
				for t, n := range s.PinnedByTenant {
					v := float64(n)
					if bytes {
						v *= float64(s.PinnedBytesPerBlock)
					}
					sum[t] += v
				}
			}
			for t, v := range sum {
				emit(v, t)
			}
		}
	}
	reg.GaugeVecFunc("phaseless_engine_pinned_blocks", "KV blocks pinned by prompt caching, by tenant", []string{"tenant"}, byTenant(false))
	reg.GaugeVecFunc("phaseless_engine_pinned_bytes", "KV memory pinned by prompt caching, by tenant", []string{"tenant"}, byTenant(true))
	counter := func(name, help string, f func(s engineStats) uint64) {
		reg.CounterFunc(name, help, func() float64 {
			var v uint64
			for _, b := range engines {
				v += f(b.eng.Stats())
			}
			return float64(v)
		})
	}
	counter("phaseless_engine_pin_hits_total", "prefix hits on pinned blocks (each restarted the pin's lifetime)", func(s engineStats) uint64 { return s.PinHits })
	counter("phaseless_engine_pin_expiries_total", "pinned blocks whose lifetime ended", func(s engineStats) uint64 { return s.PinExpiries })
	counter("phaseless_engine_pin_refused_blocks_total", "blocks not pinned because the tenant's or the engine's pinned-memory cap was reached", func(s engineStats) uint64 { return s.PinRefusedBlocks })
	counter("phaseless_engine_evictions_total", "cached prefix blocks evicted to make room", func(s engineStats) uint64 { return s.Evictions })
	counter("phaseless_engine_cache_write_tokens_total", "prompt tokens newly pinned (cache writes)", func(s engineStats) uint64 { return s.CacheWriteTokens })
}
