package sched

import "fmt"

// AffinityConfig tunes the conversation-affinity layer.
type AffinityConfig struct {
	// MinBlocks is how many more cached blocks the holder must have than
	// the next-best worker for affinity to decide: a prefix every worker
	// holds (a shared system prompt) says nothing about where to go.
	// Default 4 (64 tokens).
	MinBlocks int
	// MaxLoad is the load (queued and running over capacity) below which
	// the holder has room; at or above it the inner policy places the
	// request, since queueing behind a full worker costs more than the
	// prefill saved. Default 1.
	MaxLoad float64
	// Slack is how much more loaded than the least loaded healthy worker
	// the holder may be and still count as having room (default 0.25, 4
	// of 16 slots): a cached prefix is worth a short queue, not a hot spot.
	Slack float64
}

func (c *AffinityConfig) fill() {
	if c.MinBlocks == 0 {
		c.MinBlocks = 4
	}
	if c.MaxLoad == 0 {
		c.MaxLoad = 1
	}
	if c.Slack == 0 {
		c.Slack = 0.25
	}
}

// Affinity sends a request to the worker holding the longest part of its
// prompt (a follow-up turn's conversation, pinned or cached) while that
// worker has room, and leaves every other decision to Inner. Snapshot's
// PrefixBlocks say where prefixes live: the engines' own block tables for
// built-in workers, and for remote ones the coordinator's routing record
// merged with the replicas' shared pin directory (cloud/affinity).
type Affinity struct {
	Inner Policy
	cfg   AffinityConfig
	name  string
}

var _ Policy = (*Affinity)(nil)

// NewAffinity wraps inner.
func NewAffinity(inner Policy, cfg AffinityConfig) (*Affinity, error) {
	if inner == nil {
		return nil, fmt.Errorf("sched: affinity needs an inner policy")
	}
	if cfg.MinBlocks < 0 || cfg.MaxLoad < 0 || cfg.Slack < 0 {
		return nil, fmt.Errorf("sched: AffinityConfig MinBlocks %d, MaxLoad %g and Slack %g must not be negative", cfg.MinBlocks, cfg.MaxLoad, cfg.Slack)
	}
	cfg.fill()
	return &Affinity{Inner: inner, cfg: cfg, name: inner.Name() + "+affinity"}, nil
}

// Name implements Policy.
func (a *Affinity) Name() string { return a.name }

// Decide implements Policy. The inner policy decides first: a split
// prefill (Decision.Split) is its call and stands, since the decode worker
// it names is chosen for the prefill worker; otherwise the holder, when
// there is one with room, replaces its choice.
func (a *Affinity) Decide(req *Request, s *Snapshot) (Decision, error) {
	d, err := a.Inner.Decide(req, s)
	if err != nil || d.Split {
		return d, err
	}
	if i := a.holder(s); i >= 0 && i != d.Worker {
		// The hint names the policy in force; the reason says the
		// holder of the prefix overrode its choice.
		return decided(req, s, i, ReasonPrefix, d.Policy), nil
	}
	return d, nil
}

// holder is the healthy worker with the most cached blocks when it leads
// the next-best by MinBlocks and has room; -1 otherwise.
func (a *Affinity) holder(s *Snapshot) int {
	best, second := -1, 0
	minLoad := a.cfg.MaxLoad
	for i := range s.Workers {
		w := &s.Workers[i]
		if !w.Healthy {
			continue
		}
		minLoad = min(minLoad, w.Load())
		switch {
		case best < 0 || w.PrefixBlocks > s.Workers[best].PrefixBlocks:
			if best >= 0 {
				second = s.Workers[best].PrefixBlocks
			}
			best = i
		case w.PrefixBlocks > second:
			second = w.PrefixBlocks
		}
	}
	if best < 0 || s.Workers[best].PrefixBlocks-second < a.cfg.MinBlocks {
		return -1
	}
	if l := s.Workers[best].Load(); l >= a.cfg.MaxLoad || l > minLoad+a.cfg.Slack {
		return -1
	}
	return best
}

// Place is the Decision for worker i of s, for a layer in front of the
// policies (the coordinator's semantic grouping) that chose it itself.
func Place(req *Request, s *Snapshot, i int, r Reason) Decision {
	return decided(req, s, i, r, PolicyRules)
}
