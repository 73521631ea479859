package ctl

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/prefetch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/llm"
)

// simPlaceFlags registers the coordinator's placement flags of a
// simulation: the layers in front of the policy, as phaseless-cloud takes
// them, the headers every request sends them, and worker outages, which
// the coordinator's fallback and breaker act on. The returned function
// reads them after parsing into sw.
func simPlaceFlags(fs *flag.FlagSet) func(sw *sim.Sweep) error {
	layers := fs.String("cache-layers", place.DefaultLayers, "the coordinator's layers in front of each policy, as phaseless-cloud --cache-layers: comma-separated affinity, semantic, prefetch, or none")
	semanticMode := fs.String("semantic-mode", "", "what every request sends as x-semantic-mode (intent, topic, hybrid): what semantic grouping and prefetch compare of its made-up conversation; needs a layer that reads it")
	batchThreshold := fs.Float64("batch-threshold", 0, "what every request sends as x-batch-threshold (0.1..0.9): it takes part in semantic grouping at this similarity; 0 = none sent")
	prefetchHint := fs.String("prefetch-hint", "", "what every request sends as x-prefetch-hint (high, medium, low, none): how many predicted prefixes prefetch warms, on workers how idle; needs --cache-layers prefetch")
	var outages []string
	fs.Func("outage", "WORKER@FROM+DURATION (repeatable, e.g. h100-0@60s+30s): the worker's server fails at FROM (what it runs is lost after its first token, placed again by the coordinator's fallback before it; its cache is emptied) and refuses new requests (503) for DURATION of trace time, its probe failing; the coordinator's fallback and breaker act on it", func(s string) error {
		outages = append(outages, s)
		return nil
	})
	return func(sw *sim.Sweep) error {
		l, err := place.ParseLayers(*layers)
		if err != nil {
			return &cli.FieldError{Field: "cache-layers", Err: err}
		}
		sw.Cluster.Layers = l
		switch {
		case *semanticMode != "" && *semanticMode != semantic.ModeIntent && *semanticMode != semantic.ModeTopic && *semanticMode != semantic.ModeHybrid:
			return &cli.FieldError{Field: "semantic-mode", Err: fmt.Errorf("%q is not intent, topic or hybrid", *semanticMode)}
		case *batchThreshold != 0 && !(*batchThreshold >= 0.1 && *batchThreshold <= 0.9):
			return &cli.FieldError{Field: "batch-threshold", Err: errors.New("must be in 0.1..0.9, as x-batch-threshold")}
		}
		switch prefetch.Hint(*prefetchHint) {
		case "", prefetch.High, prefetch.Medium, prefetch.Low, prefetch.None:
		default:
			return &cli.FieldError{Field: "prefetch-hint", Err: fmt.Errorf("%q is not high, medium, low or none", *prefetchHint)}
		}
		sw.Cluster.Hints = llm.Hints{SemanticMode: *semanticMode, BatchThreshold: *batchThreshold, Prefetch: *prefetchHint}
		p, err := place.New(place.Config{Layers: l, Policy: sched.LeastLoaded{}})
		if err != nil {
			return err
		}
		if err := p.Check(&place.Request{Hints: sw.Cluster.Hints}); err != nil {
			return &cli.FieldError{Field: "cache-layers", Err: err}
		}
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
// breaker, fallback, semantic groups or prefetch acted in: a row with
// breaker trips is partly FIFO.
func printPlacementNotes(w io.Writer, rows []sim.Summary) {
	for _, r := range rows {
		if r.BreakerTrips+r.Fallbacks+r.Failed+r.Lost > 0 {
			fmt.Fprintf(w, "%s ×%g: breaker trips %d, fallbacks %d, failed %d (refused, no fallback left), lost %d (their worker failed after their first token)\n",
				r.Policy, r.RateScale, r.BreakerTrips, r.Fallbacks, r.Failed, r.Lost)
		}
		if r.GroupJoins+r.Warmups > 0 {
			fmt.Fprintf(w, "%s ×%g: semantic group joins %d, prefetch warm-ups %d\n", r.Policy, r.RateScale, r.GroupJoins, r.Warmups)
		}
	}
}
