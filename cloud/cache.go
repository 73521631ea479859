package cloud

import (
	"fmt"
	"strings"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/affinity"
	"github.com/phaseless/phaseless/cloud/coordinator"
	"github.com/phaseless/phaseless/internal/cli"
)

// DefaultCacheLayers are the prompt-caching layers on when --cache-layers
// names none: the ones the measurements in docs/cloud.md ("Prompt caching")
// found worth it.
const DefaultCacheLayers = "affinity"

// cacheConfig builds the coordinator's prompt-caching layer from
// --cache-layers, with the pinned-prefix directory in Redis when --redis is
// set, so replicas route each other's conversations.
func (c *Cloud) cacheConfig(store admit.Store) (coordinator.CacheConfig, error) {
	spec := c.cfg.CacheLayers
	if spec == "" {
		spec = DefaultCacheLayers
	}
	on := map[string]bool{}
	for _, l := range strings.Split(spec, ",") {
		switch l = strings.TrimSpace(l); l {
		case "affinity", "prefetch", "semantic":
			on[l] = true
		case "none":
		default:
			return coordinator.CacheConfig{}, &cli.FieldError{Field: "CacheLayers", Err: fmt.Errorf("%q is not one of affinity, prefetch, semantic, none", l)}
		}
	}
	cc := coordinator.CacheConfig{NoAffinity: !on["affinity"], Prefetch: on["prefetch"], Semantic: on["semantic"]}
	if rs, ok := store.(*admit.RedisStore); ok {
		cc.Directory = affinity.NewRedis(rs.Client(), "")
	}
	return cc, nil
}
