package place

import (
	"fmt"
	"strings"
)

// DefaultLayers are the prompt-caching layers on when --cache-layers names
// none: the ones the measurements in docs/cloud.md ("Prompt caching")
// found worth it.
const DefaultLayers = "affinity"

// Layers are the prompt-caching layers in front of the policy in force
// (--cache-layers of phaseless-cloud and of phaselessctl sim). The zero
// value is DefaultLayers: affinity on, semantic grouping and prefetch off.
type Layers struct {
	// NoAffinity turns off sending a request to the worker holding the most
	// of its prompt while that worker has room (sched.Affinity).
	NoAffinity bool
	// Semantic groups similar requests onto one worker for every request;
	// when off, a request opts in with x-batch-threshold.
	Semantic bool
	// Prefetch warms predicted clusters' prefixes into idle workers; a
	// request turns it off for itself with x-prefetch-hint: none.
	Prefetch bool
}

// ParseLayers reads a comma-separated list of affinity, semantic, prefetch
// or none; "" is DefaultLayers.
func ParseLayers(spec string) (Layers, error) {
	if spec == "" {
		spec = DefaultLayers
	}
	on := map[string]bool{}
	for _, l := range strings.Split(spec, ",") {
		switch l = strings.TrimSpace(l); l {
		case "affinity", "prefetch", "semantic":
			on[l] = true
		case "none":
		default:
			return Layers{}, fmt.Errorf("%q is not one of affinity, prefetch, semantic, none", l)
		}
	}
	return Layers{NoAffinity: !on["affinity"], Semantic: on["semantic"], Prefetch: on["prefetch"]}, nil
}

// String is the layers as ParseLayers reads them.
func (l Layers) String() string {
	var on []string
	if !l.NoAffinity {
		on = append(on, "affinity")
	}
	if l.Semantic {
		on = append(on, "semantic")
	}
	if l.Prefetch {
		on = append(on, "prefetch")
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}
