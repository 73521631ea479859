package ctl

import (
	"errors"
	"flag"
	"math"

	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/internal/cli"
)

// simCacheFlags registers the prompt-caching flags: TTL pinning in the
// engines, the follow-up model, the host KV tier and admission order, and
// the held-out slice the summary is taken on (the coordinator's layers are
// simPlaceFlags'). The returned function reads them after parsing into sw.
func simCacheFlags(fs *flag.FlagSet) func(sw *sim.Sweep) error {
	ttl := fs.Duration("cache-ttl", 0, "pin every prompt's prefix blocks for this long (as cache_control at the end of each turn); 0 = LRU only. Live: 5m..1h")
	share := fs.Float64("pinned-share", 0.5, "fraction of each engine's KV blocks pinning may take")
	tenant := fs.Float64("tenant-share", 0, "fraction one tenant's pins may take; 0 = half of --pinned-share (a trace without keys is one tenant)")
	soft := fs.Bool("soft-pins", false, "a pinned prefix's unused blocks yield to allocations once nothing else is free, instead of never (a retention priority; live pins are hard)")
	threshold := fs.Float64("follow-up-threshold", 0, "pin (for --cache-ttl) only prompts whose predicted chance of a follow-up turn reaches this: the follow-up model learned online on the trace's hash_id chains; 0 = pin every prompt")
	oracle := fs.Bool("pin-oracle", false, "a bound, not a mechanism: pin (for --cache-ttl) exactly the prompts whose follow-up comes within it, knowing the trace's future")
	from := fs.Duration("report-from", 0, "summarise only requests arriving at or after this trace time (a held-out slice; the earlier ones warm the caches and train the follow-up model)")
	hostKV := fs.Float64("host-kv", 0, "give every worker a host-memory KV tier of this many times its GPU KV (2-4 as Mooncake Store, LMCache, SGLang HiCache): evicted blocks go there, pinned ones stay until their TTL, and a hit is copied back over the GPU's host link instead of recomputed; 0 = none")
	aging := fs.Float64("aging-rate", 0, "cache-aware admission order: after the decodes, prefill work runs earliest (queued at + uncached tokens / this rate, in tokens per second) first, so a short uncached remainder passes a long first-turn prefill without starving it; 0 = first come, first served")
	byPrompt := fs.Bool("aging-whole-prompt", false, "with --aging-rate: key the order by every prompt token, cached or not (the order without its cache awareness, an ablation)")
	return func(sw *sim.Sweep) error {
		// flag.Float64 takes "NaN" and "Inf", which every range check
		// below would let through and the simulator would then ignore.
		for _, f := range []struct {
			name string
			v    float64
		}{{"pinned-share", *share}, {"tenant-share", *tenant}, {"follow-up-threshold", *threshold},
			{"host-kv", *hostKV}, {"aging-rate", *aging}} {
			if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
				return &cli.FieldError{Field: f.name, Err: errors.New("must be a finite number")}
			}
		}
		switch {
		case *ttl < 0:
			return &cli.FieldError{Field: "cache-ttl", Err: errors.New("must not be negative")}
		case *share <= 0 || *share > 1:
			return &cli.FieldError{Field: "pinned-share", Err: errors.New("must be in (0, 1]")}
		case *tenant < 0 || *tenant > *share:
			return &cli.FieldError{Field: "tenant-share", Err: errors.New("must be in [0, --pinned-share]")}
		case *threshold < 0 || *threshold > 1:
			return &cli.FieldError{Field: "follow-up-threshold", Err: errors.New("must be in [0, 1]")}
		case (*threshold > 0 || *oracle) && *ttl == 0:
			return &cli.FieldError{Field: "cache-ttl", Err: errors.New("--follow-up-threshold and --pin-oracle pin for --cache-ttl: set it")}
		case *oracle && *threshold > 0:
			return &cli.FieldError{Field: "pin-oracle", Err: errors.New("is instead of --follow-up-threshold, not beside it")}
		case *hostKV < 0 || *hostKV > 64:
			return &cli.FieldError{Field: "host-kv", Err: errors.New("must be in [0, 64]")}
		case *aging < 0:
			return &cli.FieldError{Field: "aging-rate", Err: errors.New("must not be negative")}
		case *byPrompt && *aging == 0:
			return &cli.FieldError{Field: "aging-whole-prompt", Err: errors.New("applies with --aging-rate")}
		case *from < 0:
			return &cli.FieldError{Field: "report-from", Err: errors.New("must not be negative")}
		}
		if *ttl == 0 && !*oracle {
			// They shape pins, and without either nothing is pinned.
			var unused string
			fs.Visit(func(f *flag.Flag) {
				if unused == "" && (f.Name == "soft-pins" || f.Name == "pinned-share" || f.Name == "tenant-share") {
					unused = f.Name
				}
			})
			if unused != "" {
				return &cli.FieldError{Field: unused, Err: errors.New("applies to pins: set --cache-ttl or --pin-oracle")}
			}
		}
		sw.Cluster.Cache = sim.CacheConfig{TTL: *ttl, PinnedShare: *share, TenantShare: *tenant, Soft: *soft,
			Retain: sim.RetainConfig{Threshold: *threshold},
			HostKV: *hostKV, AgingRate: *aging, OrderByPrompt: *byPrompt}
		sw.PinOracle, sw.ReportFrom = *oracle, *from
		return nil
	}
}
