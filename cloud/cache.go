package cloud

import (
	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/affinity"
	"github.com/phaseless/phaseless/cloud/coordinator"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/internal/cli"
)

// cacheConfig builds the coordinator's prompt-caching layer from
// --cache-layers (place.ParseLayers; "" is place.DefaultLayers), with the
// pinned-prefix directory in Redis when --redis is set, so replicas route
// each other's conversations.
func (c *Cloud) cacheConfig(store admit.Store) (coordinator.CacheConfig, error) {
	layers, err := place.ParseLayers(c.cfg.CacheLayers)
	if err != nil {
		return coordinator.CacheConfig{}, &cli.FieldError{Field: "CacheLayers", Err: err}
	}
	cc := coordinator.CacheConfig{Layers: layers}
	if rs, ok := store.(*admit.RedisStore); ok {
		cc.Directory = affinity.NewRedis(rs.Client(), "")
	}
	return cc, nil
}
