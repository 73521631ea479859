package sim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// CacheConfig is the simulated clients' and engines' prompt caching: TTL
// pinning in each engine's KV cache (as cache_control or x-cache-ttl asks
// live), the follow-up model that decides which prompts a client pins, a
// host-memory KV tier and cache-aware admission order. The coordinator's
// layers (affinity, semantic grouping, prefetch) are Config.Layers.
type CacheConfig struct {
	// TTL, when set, pins every request's prompt prefix (its full blocks)
	// for TTL once computed, as a client that marks cache_control at the
	// end of each turn. 0 = no pinning (plain LRU).
	TTL time.Duration
	// PinnedShare is the fraction of each engine's KV blocks pinning may
	// take (default 0.5, as lm.EngineConfig.PinnedBytes); TenantShare one
	// tenant's (default half of PinnedShare).
	PinnedShare, TenantShare float64
	// Soft pins keep a pinned prefix's unused blocks evictable once no
	// other block is free (a retention priority), instead of never, so a
	// pin never delays an admission. Live pins are hard.
	Soft bool
	// Retain, when its Threshold is set, pins only the prompts the
	// follow-up model predicts a next turn for (retain.go).
	Retain RetainConfig
	// PinFor, when set, decides request i's pin lifetime instead (0 = no
	// pin): a bound computed from the whole trace, such as an oracle that
	// knows which requests are followed up. Not a mechanism.
	PinFor func(i int) time.Duration
	// HostKV, when set, gives every worker a host-memory KV tier of HostKV
	// times its GPU KV blocks (host.go); reloads cross the GPU profile's
	// host link. 0 = none.
	HostKV float64
	// AgingRate, when set, turns on cache-aware admission order in every
	// engine (order.go): a prompt's uncached tokens count as AgingRate
	// tokens per second of waiting. 0 = first come, first served.
	AgingRate float64
	// OrderByPrompt keys the order by every prompt token, cached or not:
	// the order without its cache awareness, to measure what that adds.
	OrderByPrompt bool
}

func (c *CacheConfig) fill() {
	if c.PinnedShare == 0 {
		c.PinnedShare = 0.5
	}
	if c.TenantShare == 0 {
		c.TenantShare = c.PinnedShare / 2
	}
}

func (c *CacheConfig) validate() error {
	for _, v := range []float64{c.PinnedShare, c.TenantShare, c.Retain.Threshold, c.HostKV, c.AgingRate} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("sim.Config.Cache: %v is not a finite number (PinnedShare, TenantShare, Retain.Threshold, HostKV, AgingRate)", v)
		}
	}
	switch {
	case c.TTL < 0:
		return errors.New("sim.Config.Cache.TTL: negative")
	case c.PinnedShare < 0 || c.PinnedShare > 1 || c.TenantShare < 0 || c.TenantShare > c.PinnedShare:
		return errors.New("sim.Config.Cache.PinnedShare/TenantShare: want 0 ≤ TenantShare ≤ PinnedShare ≤ 1")
	case c.Retain.Threshold < 0 || c.Retain.Threshold > 1 || c.Retain.Horizon < 0 || c.Retain.HalfLife < 0:
		return errors.New("sim.Config.Cache.Retain: want 0 ≤ Threshold ≤ 1 and non-negative durations")
	case c.Retain.Threshold > 0 && c.TTL <= 0:
		return errors.New("sim.Config.Cache.Retain: predictive pinning needs a TTL")
	case c.HostKV < 0 || c.HostKV > 64:
		return errors.New("sim.Config.Cache.HostKV: want 0 ≤ HostKV ≤ 64 (times the GPU KV)")
	case c.AgingRate < 0:
		return errors.New("sim.Config.Cache.AgingRate: negative")
	case c.OrderByPrompt && c.AgingRate == 0:
		return errors.New("sim.Config.Cache.OrderByPrompt: needs AgingRate (the order it changes)")
	}
	return nil
}

// enableCache turns the host tier, the admission order and pinning on in
// every engine when the config asks.
func (c *Cluster) enableCache() error {
	cc := c.cfg.Cache
	now := func() time.Duration { return c.clk.now }
	if c.cfg.Engine.NoPrefixCaching && (cc.HostKV > 0 || cc.TTL > 0 || cc.PinFor != nil) {
		// Both find blocks again by their hashes, which nothing registers.
		return errors.New("sim.Config.Cache: pinning and the host KV tier need prefix caching (Engine.NoPrefixCaching is set)")
	}
	for _, w := range c.workers {
		if cc.HostKV > 0 {
			if w.eng.d.GPU.HostBytesPerSec <= 0 {
				return fmt.Errorf("sim.Config.Cache.HostKV: %s has no host link in its profile", w.eng.d.GPU.Name)
			}
			w.eng.EnableHostTier(int(cc.HostKV*float64(w.eng.d.KVBlocks)), now)
		}
		if cc.AgingRate > 0 {
			w.eng.EnableOrder(cc.AgingRate, now, cc.OrderByPrompt)
		}
	}
	c.enablePinning()
	return nil
}

// enablePinning turns pinning on in every engine when something pins:
// the clients (TTL, PinFor) or prefetch's warm-ups.
func (c *Cluster) enablePinning() {
	cc := c.cfg.Cache
	if cc.Retain.Threshold > 0 {
		c.retain = newRetainer(cc.Retain, cc.TTL)
	}
	if cc.TTL <= 0 && cc.PinFor == nil && !c.cfg.Layers.Prefetch {
		return
	}
	now := func() time.Duration { return c.clk.now }
	for _, w := range c.workers {
		n := w.eng.d.KVBlocks
		w.eng.EnablePinning(int(float64(n)*cc.PinnedShare), int(float64(n)*cc.TenantShare), now, cc.Soft)
	}
}

// pinRequest marks request i's whole prompt prefix for pinning, if the
// config pins it: every prompt for TTL, the ones the follow-up model
// picks, or what PinFor says.
func (c *Cluster) pinRequest(i int, s *Seq, tenant string) {
	ttl := c.cfg.Cache.TTL
	switch {
	case c.cfg.Cache.PinFor != nil:
		ttl = c.cfg.Cache.PinFor(i)
	case c.retain != nil && !c.retain.observe(&c.reqs[i], c.clk.now):
		ttl = 0
	}
	if ttl <= 0 {
		return
	}
	s.PinBlocks, s.PinTTL, s.Tenant = len(s.Hashes), ttl, tenant
}
