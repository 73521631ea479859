package sched

import (
	"fmt"
	"math"
	"sync/atomic"
)

// LLMDConfig weighs the scorers of the llm-d baseline. The zero value means
// the defaults: prefix-cache 3, KV-cache utilisation 2, queue 2, the
// weights of the example EndpointPickerConfig in llm-d's "intelligent
// inference scheduling" well-lit path (llm-d/llm-d-inference-scheduler).
type LLMDConfig struct {
	PrefixWeight, KVWeight, QueueWeight float64
}

// Validate names the first bad field.
func (c *LLMDConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"PrefixWeight", c.PrefixWeight}, {"KVWeight", c.KVWeight}, {"QueueWeight", c.QueueWeight}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("sched.LLMDConfig.%s: %v must be a finite value ≥ 0", f.name, f.v)
		}
	}
	return nil
}

// LLMD is an llm-d-style endpoint picker: every healthy worker gets a
// weighted sum of three scores in [0, 1], and the highest wins.
//
//   - prefix-cache: the fraction of the prompt's blocks the worker holds;
//   - KV-cache utilisation: 1 − KV usage;
//   - queue: the worker's waiting requests, min-max normalised over the
//     candidates (fewest waiting = 1; all equal = 1 for all).
//
// llm-d's max-score picker breaks ties at random; here the scan starts at a
// rotating offset, which spreads ties the same way and stays deterministic
// and allocation-free. It knows nothing of pools or phases: that is the
// point of the baseline.
type LLMD struct {
	cfg  LLMDConfig
	next atomic.Uint64
}

// NewLLMD validates cfg (zero weights take the defaults when all are zero).
func NewLLMD(cfg LLMDConfig) (*LLMD, error) {
	if cfg == (LLMDConfig{}) {
		cfg = LLMDConfig{PrefixWeight: 3, KVWeight: 2, QueueWeight: 2}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &LLMD{cfg: cfg}, nil
}

// Name implements Policy.
func (*LLMD) Name() string { return NameLLMD }

// Decide implements Policy.
func (p *LLMD) Decide(req *Request, s *Snapshot) (Decision, error) {
	n := len(s.Workers)
	minQ, maxQ := math.MaxInt, -1
	for i := range s.Workers {
		if w := &s.Workers[i]; w.Healthy {
			minQ, maxQ = min(minQ, w.Queued), max(maxQ, w.Queued)
		}
	}
	if maxQ < 0 {
		return Decision{}, ErrNoWorker
	}
	start := 0
	if n > 0 {
		start = int(p.next.Add(1) % uint64(n))
	}
	best, bestScore := -1, math.Inf(-1)
	for k := 0; k < n; k++ {
		i := (start + k) % n
		w := &s.Workers[i]
		if !w.Healthy {
			continue
		}
		prefix := 0.0
		if len(req.BlockHashes) > 0 {
			prefix = float64(w.PrefixBlocks) / float64(len(req.BlockHashes))
		}
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-w.Queued) / float64(maxQ-minQ)
		}
		score := p.cfg.PrefixWeight*prefix + p.cfg.KVWeight*(1-min(max(w.KVUsage, 0), 1)) + p.cfg.QueueWeight*queue
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return decided(req, s, best, ReasonScore, PolicyLLMD), nil
}
