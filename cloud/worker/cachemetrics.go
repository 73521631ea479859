package worker

import (
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/models/lm"
)

type engineStats = lm.Stats

// RegisterCacheMetrics exports the built-in engines' prompt-cache state:
// pinned blocks and bytes per tenant, the pin, eviction and cache-write
// counters, and the host KV tier's blocks and counters (--host-kv). The
// cache hit ratio is rate(phaseless_engine_prefix_hit_tokens_total) /
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
	sum := func(f func(s engineStats) float64) func() float64 {
		return func() float64 {
			var v float64
			for _, b := range engines {
				v += f(b.eng.Stats())
			}
			return v
		}
	}
	counter := func(name, help string, f func(s engineStats) uint64) {
		reg.CounterFunc(name, help, sum(func(s engineStats) float64 { return float64(f(s)) }))
	}
	gauge := func(name, help string, f func(s engineStats) int) {
		reg.GaugeFunc(name, help, sum(func(s engineStats) float64 { return float64(f(s)) }))
	}
	counter("phaseless_engine_pin_hits_total", "prefix hits on pinned blocks (each restarted the pin's lifetime)", func(s engineStats) uint64 { return s.PinHits })
	counter("phaseless_engine_pin_expiries_total", "pinned blocks whose lifetime ended", func(s engineStats) uint64 { return s.PinExpiries })
	counter("phaseless_engine_pin_refused_blocks_total", "blocks not pinned because the tenant's or the engine's pinned-memory cap was reached", func(s engineStats) uint64 { return s.PinRefusedBlocks })
	counter("phaseless_engine_evictions_total", "cached prefix blocks evicted to make room", func(s engineStats) uint64 { return s.Evictions })
	counter("phaseless_engine_cache_write_tokens_total", "prompt tokens newly pinned (cache writes)", func(s engineStats) uint64 { return s.CacheWriteTokens })

	gauge("phaseless_engine_host_kv_blocks", "KV blocks the host-memory tiers hold", func(s engineStats) int { return s.Host.Blocks })
	gauge("phaseless_engine_host_kv_capacity_blocks", "KV blocks the host-memory tiers can hold (0: no tier)", func(s engineStats) int { return s.Host.BlocksTotal })
	counter("phaseless_engine_host_kv_stores_total", "blocks the engines' caches evicted that a host tier kept", func(s engineStats) uint64 { return s.Host.Stores })
	counter("phaseless_engine_host_kv_loads_total", "blocks copied back from a host tier for a prompt", func(s engineStats) uint64 { return s.Host.Loads })
	counter("phaseless_engine_host_kv_evictions_total", "blocks a host tier dropped to make room", func(s engineStats) uint64 { return s.Host.Evictions })
	counter("phaseless_engine_host_hit_tokens_total", "prompt tokens served from blocks copied back from a host tier (part of the prefix hits)", func(s engineStats) uint64 { return s.Host.HitTokens })
}
