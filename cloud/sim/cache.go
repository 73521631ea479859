package sim

import (
	"errors"
	"time"
)

// CacheConfig is the simulated coordinator's and engines' prompt caching:
// TTL pinning in each engine's KV cache (as cache_control or x-cache-ttl
// asks live) and the affinity layer in front of the policy.
type CacheConfig struct {
	// TTL, when set, pins every request's prompt prefix (its full blocks)
	// for TTL once computed, as a client that marks cache_control at the
	// end of each turn. 0 = no pinning (plain LRU).
	TTL time.Duration
	// PinnedShare is the fraction of each engine's KV blocks pinning may
	// take (default 0.5, as lm.EngineConfig.PinnedBytes); TenantShare one
	// tenant's (default half of PinnedShare).
	PinnedShare, TenantShare float64
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
	switch {
	case c.TTL < 0:
		return errors.New("sim.Config.Cache.TTL: negative")
	case c.PinnedShare < 0 || c.PinnedShare > 1 || c.TenantShare < 0 || c.TenantShare > c.PinnedShare:
		return errors.New("sim.Config.Cache.PinnedShare/TenantShare: want 0 ≤ TenantShare ≤ PinnedShare ≤ 1")
	}
	return nil
}

// enablePinning turns pinning on in every engine when the config asks.
func (c *Cluster) enablePinning() {
	cc := c.cfg.Cache
	if cc.TTL <= 0 {
		return
	}
	now := func() time.Duration { return c.clk.now }
	for _, w := range c.workers {
		n := w.eng.d.KVBlocks
		w.eng.EnablePinning(int(float64(n)*cc.PinnedShare), int(float64(n)*cc.TenantShare), now)
	}
}

// pinRequest marks a sequence's whole prompt prefix for pinning.
func (c *Cluster) pinRequest(s *Seq, tenant string) {
	if c.cfg.Cache.TTL <= 0 {
		return
	}
	s.PinBlocks, s.PinTTL, s.Tenant = len(s.Hashes), c.cfg.Cache.TTL, tenant
}
