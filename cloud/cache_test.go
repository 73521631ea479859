package cloud

import (
	"strings"
	"testing"
)

func TestCacheLayersFlag(t *testing.T) {
	for _, tc := range []struct {
		spec                         string
		affinity, prefetch, semantic bool
		bad                          bool
	}{
		{spec: "", affinity: true},
		{spec: "none"},
		{spec: "affinity, prefetch,semantic", affinity: true, prefetch: true, semantic: true},
		{spec: "semantic", semantic: true},
		{spec: "affinity,bogus", bad: true},
	} {
		c := &Cloud{cfg: Config{CacheLayers: tc.spec}}
		cc, err := c.cacheConfig(nil)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "bogus") {
				t.Fatalf("%q: err %v, want one naming the bad layer", tc.spec, err)
			}
			continue
		}
		if err != nil || cc.Layers.NoAffinity == tc.affinity || cc.Layers.Prefetch != tc.prefetch || cc.Layers.Semantic != tc.semantic {
			t.Fatalf("%q: %+v %v", tc.spec, cc, err)
		}
	}
}
