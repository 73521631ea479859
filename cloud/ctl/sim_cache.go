package ctl

import (
	"errors"
	"flag"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/transport/cli"
)

// simCache is the prompt-caching part of a sim invocation: TTL pinning in
// the engines and the conversation-affinity layer in front of each policy.
type simCache struct {
	cfg      sim.CacheConfig
	affinity bool
}

// simCacheFlags registers the prompt-caching flags; the returned function
// reads them after parsing.
func simCacheFlags(fs *flag.FlagSet) func() (simCache, error) {
	ttl := fs.Duration("cache-ttl", 0, "pin every prompt's prefix blocks for this long (as cache_control at the end of each turn); 0 = LRU only. Live: 5m..1h")
	share := fs.Float64("pinned-share", 0.5, "fraction of each engine's KV blocks pinning may take")
	affinity := fs.Bool("affinity", false, "route a request to the worker holding the most of its prompt while it has room (conversation affinity) before the policy decides")
	return func() (simCache, error) {
		switch {
		case *ttl < 0:
			return simCache{}, &cli.FieldError{Field: "cache-ttl", Err: errors.New("must not be negative")}
		case *share <= 0 || *share > 1:
			return simCache{}, &cli.FieldError{Field: "pinned-share", Err: errors.New("must be in (0, 1]")}
		}
		return simCache{cfg: sim.CacheConfig{TTL: *ttl, PinnedShare: *share}, affinity: *affinity}, nil
	}
}

// wrap puts the affinity layer in front of p when asked.
func (c simCache) wrap(p sched.Policy) (sched.Policy, error) {
	if !c.affinity {
		return p, nil
	}
	return sched.NewAffinity(p, sched.AffinityConfig{})
}
