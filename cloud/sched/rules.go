package sched

import (
	"errors"
	"fmt"
	"math"
)

// RulesConfig holds the thresholds of the rule policy. The zero value means
// the defaults of DESIGN.md §5, which come from the source articles: they are
// starting points to measure against, not facts.
type RulesConfig struct {
	// EntropyBits: a prompt above this many bits per character is dense
	// (code, identifiers, non-English, data) and goes to the prefill pool.
	// Default 4.2.
	EntropyBits float64
	// KVFaultsPerMs: a worker above this is thrashing its KV cache; new work
	// there causes more evictions and preemptions. Default 12.
	KVFaultsPerMs float64
	// BurstSigma: a worker whose tokens-per-100 ms σ is above this emits in
	// bursts; interactive streams avoid it. Default 8.3.
	BurstSigma float64
	// LongPrompt is the uncached prompt length (tokens) from which a
	// request counts as prefill-heavy when it also outweighs its output by
	// PrefillRatio. Default 512.
	LongPrompt int
	// PrefillRatio: uncached prompt tokens over predicted output tokens above
	// which prefill dominates the cost. Default 4.
	PrefillRatio float64
	// LongOutput is the predicted output (tokens) from which a request counts
	// as decode-heavy. Default 256.
	LongOutput int
	// AffinitySlack is how much more loaded (in load units: queued+running
	// over capacity) a worker holding the prefix may be than the least loaded
	// one and still win. Reusing a cached prefix saves its prefill; queueing
	// behind a full worker costs more. Default 0.5.
	AffinitySlack float64
	// AffinityBlocks is how many cached 16-token blocks make a worker in
	// another pool worth choosing over the preferred pool: a prompt already
	// in a cache needs no prefill, whatever pool holds it. Default 4.
	AffinityBlocks int
	// PoolSlack is how much more loaded the preferred pool's worker may be
	// than the least loaded worker elsewhere before the request goes there
	// instead: a pool's tuning is worth a little queueing, not an idle
	// engine next door. Default 0.125 (2 of 16 slots; 0.25 cost 3× the
	// TTFT p95 of least-loaded in the Azure replay on identical engines).
	// Raise it when the pools run really different hardware.
	PoolSlack float64
	// MaxLoad: workers at or above this load are skipped, so a saturated
	// pool spills into the next one. Default 1: every slot busy or promised
	// (a request queued behind a full engine waits longer than one placed
	// on an idle engine of a less suited pool).
	MaxLoad float64
}

func (c *RulesConfig) fill() {
	def := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.EntropyBits, 4.2)
	def(&c.KVFaultsPerMs, 12)
	def(&c.BurstSigma, 8.3)
	def(&c.PrefillRatio, 4)
	def(&c.AffinitySlack, 0.5)
	def(&c.MaxLoad, 1)
	def(&c.PoolSlack, 0.125)
	if c.LongPrompt == 0 {
		c.LongPrompt = 512
	}
	if c.LongOutput == 0 {
		c.LongOutput = 256
	}
	if c.AffinityBlocks == 0 {
		c.AffinityBlocks = 4
	}
}

// Validate names the first bad field.
func (c *RulesConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"EntropyBits", c.EntropyBits}, {"KVFaultsPerMs", c.KVFaultsPerMs}, {"BurstSigma", c.BurstSigma},
		{"PrefillRatio", c.PrefillRatio}, {"AffinitySlack", c.AffinitySlack}, {"MaxLoad", c.MaxLoad}, {"PoolSlack", c.PoolSlack},
		{"LongPrompt", float64(c.LongPrompt)}, {"LongOutput", float64(c.LongOutput)}, {"AffinityBlocks", float64(c.AffinityBlocks)}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("sched.RulesConfig.%s: %v must be a finite value ≥ 0", f.name, f.v)
		}
	}
	if c.EntropyBits > 8 {
		return errors.New("sched.RulesConfig.EntropyBits: a byte carries at most 8 bits")
	}
	return nil
}

// Rules is the signal-driven policy. For each request it:
//
//  1. infers the phase mix from the request's own signals: prefill-heavy
//     when the prompt is dense (entropy above EntropyBits) or its uncached
//     part is long and outweighs the predicted output; decode-heavy when the
//     predicted output is long; otherwise stream for streaming clients and
//     decode for the rest;
//  2. walks the pools from that role to its neighbours and finally the
//     conservative pool, skipping unhealthy workers, workers above
//     KVFaultsPerMs (thrashing) and above MaxLoad, and, for streams, bursty
//     workers (σ above BurstSigma) while a smooth one exists;
//  3. inside the first pool with a candidate, prefers the worker holding the
//     longest cached prefix if it is within AffinitySlack of the least load,
//     else the least loaded one;
//  4. finally, if a worker of another (non-conservative) pool holds at least
//     AffinityBlocks more of the prompt and is within AffinitySlack of the
//     chosen worker's load, sends it there: a cached prompt needs no
//     prefill, which outweighs the pool's tuning;
//  5. otherwise, if a worker of another non-conservative pool is less loaded
//     by more than PoolSlack, sends it there (least-load).
//
// When every worker is excluded it places the request on the least loaded
// healthy worker anyway (ReasonOverloaded): a slow answer beats none, and
// admission, not placement, is where load is refused.
type Rules struct {
	cfg RulesConfig
}

// NewRules validates cfg (zero fields take their defaults) and returns the policy.
func NewRules(cfg RulesConfig) (*Rules, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Rules{cfg: cfg}, nil
}

// Config returns the thresholds in effect.
func (p *Rules) Config() RulesConfig { return p.cfg }

// Name implements Policy.
func (*Rules) Name() string { return NameRules }

// poolOrder lists, per preferred role, the pools to try in turn.
var poolOrder = [NumRoles][NumRoles]Role{
	RolePrefill:      {RolePrefill, RoleDecode, RoleStream, RoleConservative},
	RoleDecode:       {RoleDecode, RoleStream, RolePrefill, RoleConservative},
	RoleStream:       {RoleStream, RoleDecode, RolePrefill, RoleConservative},
	RoleConservative: {RoleConservative, RoleDecode, RoleStream, RolePrefill},
}

// Classify returns the pool role a request's own signals ask for, given the
// most prefix blocks any worker has cached for it.
func (p *Rules) Classify(req *Request, cachedBlocks int) Role {
	uncached := req.InputTokens - cachedBlocks*16
	if uncached < 0 {
		uncached = 0
	}
	// Entropy says little about a few characters; require a real prompt.
	dense := req.EntropyBits > p.cfg.EntropyBits && req.InputChars >= 64
	switch {
	case dense && uncached > 0,
		uncached >= p.cfg.LongPrompt && float64(uncached) >= p.cfg.PrefillRatio*float64(max(req.PredictedOutput, 1)):
		return RolePrefill
	case req.PredictedOutput >= p.cfg.LongOutput:
		return RoleDecode
	case req.Stream:
		return RoleStream
	}
	return RoleDecode
}

// Decide implements Policy.
func (p *Rules) Decide(req *Request, s *Snapshot) (Decision, error) {
	maxPrefix := 0
	for i := range s.Workers {
		if w := &s.Workers[i]; w.Healthy && w.PrefixBlocks > maxPrefix {
			maxPrefix = w.PrefixBlocks
		}
	}
	want := p.Classify(req, maxPrefix)
	faultSkipped := false
	for _, role := range poolOrder[want] {
		i, faulting := p.pick(req, s, role)
		faultSkipped = faultSkipped || faulting
		if i >= 0 {
			if j := p.crossPoolPrefix(s, i); j >= 0 {
				i = j
			}
			reason := ReasonLeastLoad
			switch {
			case s.Workers[i].PrefixBlocks > 0 && s.Workers[i].PrefixBlocks == maxPrefix:
				reason = ReasonPrefix
			case faultSkipped:
				reason = ReasonKVFaults
			}
			if reason != ReasonPrefix {
				if k := leastLoaded(s, -1, false); k >= 0 && s.Workers[k].KVFaultsPerMs <= p.cfg.KVFaultsPerMs &&
					s.Workers[i].Load()-s.Workers[k].Load() > p.cfg.PoolSlack {
					i, reason = k, ReasonLeastLoad
				}
			}
			d := decided(req, s, i, reason, PolicyRules)
			return d, nil
		}
	}
	i := leastLoaded(s, -1, false)
	if i < 0 {
		return Decision{}, ErrNoWorker
	}
	return decided(req, s, i, ReasonOverloaded, PolicyRules), nil
}

// crossPoolPrefix returns a worker outside chosen's pool whose cached
// prefix beats chosen's by AffinityBlocks at a similar load, or -1.
func (p *Rules) crossPoolPrefix(s *Snapshot, chosen int) int {
	c := &s.Workers[chosen]
	limit := c.Load() + p.cfg.AffinitySlack
	best, bestBlocks := -1, c.PrefixBlocks+p.cfg.AffinityBlocks-1
	for i := range s.Workers {
		w := &s.Workers[i]
		if i == chosen || w.Role == RoleConservative || !w.Healthy || w.KVFaultsPerMs > p.cfg.KVFaultsPerMs {
			continue
		}
		if l := w.Load(); w.PrefixBlocks > bestBlocks && l <= limit && l < p.cfg.MaxLoad {
			best, bestBlocks = i, w.PrefixBlocks
		}
	}
	return best
}

// pick chooses inside one pool; faulting reports that a worker was skipped
// for KV faults.
func (p *Rules) pick(req *Request, s *Snapshot, role Role) (idx int, faulting bool) {
	least, leastLoad := -1, math.Inf(1)
	prefix, prefixLoad := -1, math.Inf(1)
	for pass := 0; pass < 2 && least < 0; pass++ {
		// Pass 0 keeps streams off bursty workers; pass 1 accepts them.
		for i := range s.Workers {
			w := &s.Workers[i]
			if w.Role != role || !w.Healthy {
				continue
			}
			if w.KVFaultsPerMs > p.cfg.KVFaultsPerMs {
				faulting = true
				continue
			}
			l := w.Load()
			if l >= p.cfg.MaxLoad {
				continue
			}
			if pass == 0 && req.Stream && w.BurstSigma > p.cfg.BurstSigma {
				continue
			}
			if l < leastLoad || (l == leastLoad && w.KVUsage < s.Workers[least].KVUsage) {
				least, leastLoad = i, l
			}
			if w.PrefixBlocks > 0 && (prefix < 0 || w.PrefixBlocks > s.Workers[prefix].PrefixBlocks ||
				(w.PrefixBlocks == s.Workers[prefix].PrefixBlocks && l < prefixLoad)) {
				prefix, prefixLoad = i, l
			}
		}
		if !req.Stream {
			break
		}
	}
	if prefix >= 0 && prefixLoad <= leastLoad+p.cfg.AffinitySlack {
		return prefix, faulting
	}
	return least, faulting
}
