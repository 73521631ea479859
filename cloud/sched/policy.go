package sched

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
)

// Policy turns a request's and the workers' signals into a Decision. Decide
// runs once per request on the hot path: it must not allocate and must be
// safe for concurrent use.
type Policy interface {
	Name() string
	Decide(req *Request, s *Snapshot) (Decision, error)
}

// Policy names accepted by ByName and the x-phaseless-policy override.
const (
	NameScheduler      = "scheduler"
	NameRoundRobin     = "round-robin"
	NameLeastLoaded    = "least-loaded"
	NameLLMD           = "llm-d"
	NameExplicitPhases = "explicit-phases"
	NameRules          = "rules"     // the signal thresholds of DESIGN.md §5
	NamePriced         = "priced"    // GPU classes priced, no disaggregation
	NamePD             = "pd"        // disaggregation, every worker priced alike
	NamePricedPD       = "priced-pd" // both
	NameLearned        = "learned"   // the learned classifier over resource combinations
)

// DefaultPolicy is what NameScheduler runs: the policy that won the
// simulator's comparison (docs/cloud.md).
const DefaultPolicy = NamePricedPD

// Names lists every policy ByName knows, the project's scheduler first.
func Names() []string {
	return []string{NameScheduler, NameRoundRobin, NameLeastLoaded, NameLLMD, NameExplicitPhases,
		NameRules, NamePriced, NamePD, NamePricedPD, NameLearned}
}

// Baselines lists the policies the project's scheduler is measured against.
func Baselines() []string {
	return []string{NameRoundRobin, NameLeastLoaded, NameLLMD, NameExplicitPhases}
}

var (
	_ Policy = (*Rules)(nil)
	_ Policy = (*RoundRobin)(nil)
	_ Policy = LeastLoaded{}
	_ Policy = (*LLMD)(nil)
	_ Policy = (*ExplicitPhases)(nil)
	_ Policy = (*Priced)(nil)
	_ Policy = (*Learned)(nil)
)

// RoundRobin cycles over the healthy, non-conservative workers regardless of
// their signals: the first baseline the replay compares against.
type RoundRobin struct {
	next atomic.Uint64
}

// Name implements Policy.
func (*RoundRobin) Name() string { return NameRoundRobin }

// Decide implements Policy.
func (p *RoundRobin) Decide(req *Request, s *Snapshot) (Decision, error) {
	n := len(s.Workers)
	if n == 0 {
		return Decision{}, ErrNoWorker
	}
	start := int(p.next.Add(1) % uint64(n))
	for pass := 0; pass < 2; pass++ {
		for k := 0; k < n; k++ {
			i := (start + k) % n
			w := &s.Workers[i]
			// The conservative pool is kept for fallbacks unless it is all there is.
			if w.Healthy && (pass == 1 || w.Role != RoleConservative) {
				return decided(req, s, i, ReasonRoundRobin, PolicyRoundRobin), nil
			}
		}
	}
	return Decision{}, ErrNoWorker
}

// LeastLoaded picks the healthy non-conservative worker with the lowest load:
// the second baseline, and what the circuit breaker falls back to.
type LeastLoaded struct{}

// Name implements Policy.
func (LeastLoaded) Name() string { return NameLeastLoaded }

// Decide implements Policy.
func (LeastLoaded) Decide(req *Request, s *Snapshot) (Decision, error) {
	i := leastLoaded(s, -1, false)
	if i < 0 {
		return Decision{}, ErrNoWorker
	}
	return decided(req, s, i, ReasonLeastLoad, PolicyLeastLoaded), nil
}

// leastLoaded returns the index of the healthy worker with the lowest load,
// skipping exclude and, unless nothing else is healthy, the conservative pool
// (onlyConservative inverts that preference). -1 when none is healthy.
func leastLoaded(s *Snapshot, exclude int, onlyConservative bool) int {
	best, bestPref := -1, -1
	bestLoad := math.Inf(1)
	for i := range s.Workers {
		w := &s.Workers[i]
		if !w.Healthy || i == exclude {
			continue
		}
		pref := 1 // preferred class first, the other class only when nothing else
		if (w.Role == RoleConservative) != onlyConservative {
			pref = 0
		}
		l := w.Load()
		if pref > bestPref || (pref == bestPref && (l < bestLoad || (l == bestLoad && w.KVUsage < s.Workers[best].KVUsage))) {
			best, bestPref, bestLoad = i, pref, l
		}
	}
	return best
}

// Fallback places a request that failed with an overload on worker failed:
// the least loaded conservative worker, or when there is none, the least
// loaded other worker. DESIGN.md §5: "fallback on 429/503 to the
// conservative pool".
func Fallback(req *Request, s *Snapshot, failed int) (Decision, error) {
	i := leastLoaded(s, failed, true)
	if i < 0 {
		return Decision{}, ErrNoWorker
	}
	return decided(req, s, i, ReasonFallback, PolicyFIFO), nil
}

// FIFO is what the coordinator runs while the circuit breaker is open: no
// signals, no affinity, the least loaded worker in arrival order.
func FIFO(req *Request, s *Snapshot) (Decision, error) {
	i := leastLoaded(s, -1, false)
	if i < 0 {
		return Decision{}, ErrNoWorker
	}
	return decided(req, s, i, ReasonFIFO, PolicyFIFO), nil
}

func decided(req *Request, s *Snapshot, i int, r Reason, p PolicyID) Decision {
	w := &s.Workers[i]
	d := Decision{Worker: i, Pool: w.Role, Reason: r, Policy: p, PrefixBlocks: w.PrefixBlocks}
	d.quantize(req, w)
	return d
}

// Options configures the policies New builds. The zero value means every
// policy's defaults.
type Options struct {
	Rules RulesConfig
	// SLOTTFT and SLOTPOT are the targets the priced and learned policies
	// estimate against; zero = 2 s and 100 ms.
	SLOTTFT, SLOTPOT time.Duration
	// Learned is the classifier the learned policy starts with; nil = the
	// shipped one.
	Learned *LearnedModel
}

// ByName returns a fresh policy for a name accepted in --policy and the
// x-phaseless-policy header.
func ByName(name string, rules RulesConfig) (Policy, error) {
	return New(name, Options{Rules: rules})
}

// New returns a fresh policy by name, configured by o.
func New(name string, o Options) (Policy, error) {
	priced := func(c PricedConfig) (Policy, error) {
		c.SLOTTFT, c.SLOTPOT = o.SLOTTFT, o.SLOTPOT
		return NewPriced(name, c)
	}
	switch name {
	case NameScheduler, "":
		return New(DefaultPolicy, o)
	case NameRules:
		return NewRules(o.Rules)
	case NamePriced:
		return priced(PricedConfig{Classes: true})
	case NamePD:
		return priced(PricedConfig{Disaggregate: true})
	case NamePricedPD:
		return priced(PricedConfig{Classes: true, Disaggregate: true})
	case NameLearned:
		return newLearned(o.Learned, PricedConfig{SLOTTFT: o.SLOTTFT, SLOTPOT: o.SLOTPOT})
	case NameRoundRobin:
		return &RoundRobin{}, nil
	case NameLeastLoaded:
		return LeastLoaded{}, nil
	case NameLLMD:
		return NewLLMD(LLMDConfig{})
	case NameExplicitPhases:
		return NewExplicitPhases(ExplicitPhasesConfig{})
	}
	return nil, fmt.Errorf("unknown policy %q (%s)", name, strings.Join(Names(), ", "))
}
