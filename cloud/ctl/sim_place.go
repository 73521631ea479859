package ctl

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/internal/cli"
)

// simPlaceFlags registers the coordinator's placement flags of a
// simulation: the layers in front of the policy, as phaseless-cloud takes
// them, and worker outages, which the coordinator's fallback and breaker
// act on. The returned function reads them after parsing into sw.
func simPlaceFlags(fs *flag.FlagSet) func(sw *sim.Sweep) error {
	layers := fs.String("cache-layers", place.DefaultLayers, "the coordinator's layers in front of each policy, as phaseless-cloud --cache-layers: comma-separated affinity, semantic, prefetch, or none")
	var outages []string
	fs.Func("outage", "WORKER@FROM+DURATION (repeatable, e.g. h100-0@60s+30s): the worker refuses new requests (503) from FROM for DURATION of trace time and its probe fails; the coordinator's fallback and breaker act on it", func(s string) error {
		outages = append(outages, s)
		return nil
	})
	return func(sw *sim.Sweep) error {
		l, err := place.ParseLayers(*layers)
		if err != nil {
			return &cli.FieldError{Field: "cache-layers", Err: err}
		}
		sw.Cluster.Layers = l
		for _, s := range outages {
			o, err := sim.ParseOutage(strings.TrimSpace(s))
			if err != nil {
				return &cli.FieldError{Field: "outage", Err: err}
			}
			sw.Cluster.Outages = append(sw.Cluster.Outages, o)
		}
		return nil
	}
}

// printPlacementNotes says, under the table, which runs the coordinator's
// breaker or fallback acted in: a row with breaker trips is partly FIFO.
func printPlacementNotes(w io.Writer, rows []sim.Summary) {
	for _, r := range rows {
		if r.BreakerTrips+r.Fallbacks+r.Failed > 0 {
			fmt.Fprintf(w, "%s ×%g: breaker opened %d times; %d requests fell back, %d failed (refused, no fallback)\n",
				r.Policy, r.RateScale, r.BreakerTrips, r.Fallbacks, r.Failed)
		}
	}
}
