package sched

import (
	"errors"
	"math"
)

// ExplicitPhasesConfig sets where a client of the old protocol draws the
// line between the phases it declares. The zero value means the default.
type ExplicitPhasesConfig struct {
	// PrefillPrompt is the prompt length (tokens) from which the client
	// declares "prefill"; shorter prompts declare "decode". Default 1024.
	PrefillPrompt int
}

// ExplicitPhases is the protocol the project replaces (DESIGN.md §5,
// "explicit phase tags removed"): the client tags each request with its
// phase and the tag alone picks a fixed pool. A client cannot know the
// output length or what is cached, so it tags by prompt length: long prompts
// go to the prefill-heavy pool, the rest to the decode-heavy pool. Inside
// the pool the least loaded worker takes it; an empty or wholly unhealthy
// pool falls back to the least loaded worker anywhere. No signals, no
// prefix affinity, no spilling between pools.
type ExplicitPhases struct {
	cfg ExplicitPhasesConfig
}

// NewExplicitPhases validates cfg and returns the policy.
func NewExplicitPhases(cfg ExplicitPhasesConfig) (*ExplicitPhases, error) {
	if cfg.PrefillPrompt == 0 {
		cfg.PrefillPrompt = 1024
	}
	if cfg.PrefillPrompt < 0 {
		return nil, errors.New("sched.ExplicitPhasesConfig.PrefillPrompt: must be ≥ 0")
	}
	return &ExplicitPhases{cfg: cfg}, nil
}

// Name implements Policy.
func (*ExplicitPhases) Name() string { return NameExplicitPhases }

// Declared is the phase such a client would tag req with.
func (p *ExplicitPhases) Declared(req *Request) Role {
	if req.InputTokens >= p.cfg.PrefillPrompt {
		return RolePrefill
	}
	return RoleDecode
}

// Decide implements Policy.
func (p *ExplicitPhases) Decide(req *Request, s *Snapshot) (Decision, error) {
	want := p.Declared(req)
	best, bestLoad := -1, math.Inf(1)
	for i := range s.Workers {
		w := &s.Workers[i]
		if w.Healthy && w.Role == want {
			if l := w.Load(); l < bestLoad {
				best, bestLoad = i, l
			}
		}
	}
	if best >= 0 {
		return decided(req, s, best, ReasonDeclaredPhase, PolicyExplicitPhases), nil
	}
	if i := leastLoaded(s, -1, false); i >= 0 {
		return decided(req, s, i, ReasonLeastLoad, PolicyExplicitPhases), nil
	}
	return Decision{}, ErrNoWorker
}
