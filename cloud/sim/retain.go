package sim

import (
	"math"
	"time"
)

// Predictive pinning: the prefetch model of cloud/prefetch learned on the
// trace's prefix structure instead of text. A conversation is a chain of
// hash_id prefixes: a request whose hash_ids extend an earlier request's
// full blocks is that request's follow-up. Per class of request (its depth
// in the conversation and the log2 of its prompt length) the model counts,
// with counts halving every HalfLife, how many requests were followed up
// within Horizon; a request whose class's estimate reaches Threshold has
// its prompt pinned for CacheConfig.TTL (as a client marking cache_control
// only where a next turn is likely), the rest are left to LRU. Labels come
// only from the past: a request's outcome is counted when its follow-up
// arrives or when Horizon has passed without one.

// RetainConfig turns predictive pinning on (Threshold > 0).
type RetainConfig struct {
	// Threshold is the estimated follow-up probability from which a
	// prompt is pinned; 0 = off (CacheConfig.TTL then pins every prompt).
	Threshold float64
	// Horizon is how soon a follow-up must come to count. Default TTL.
	Horizon time.Duration
	// HalfLife is how fast old counts fade. Default 10 minutes, as
	// cloud/prefetch's Markov counts.
	HalfLife time.Duration
}

const (
	retainDepths  = 6  // 0..5, the last standing for 5 and deeper
	retainLengths = 18 // log2 of prompt tokens, capped
	// retainPrior is the estimate of a class not yet seen, weighted as
	// retainPriorN requests: Mooncake's share of requests followed up
	// within five minutes is about this; any prior is soon outweighed.
	retainPrior, retainPriorN = 0.3, 2.0
)

type retainCount struct {
	n, pos float64 // decayed: requests labelled, of them followed up
	at     time.Duration
}

type retainEntry struct {
	class    int
	depth    int
	at       time.Duration
	followed bool
}

// retainer is the model's state for one cluster run.
type retainer struct {
	cfg     RetainConfig
	counts  [retainDepths * retainLengths]retainCount
	index   map[uint64]*retainEntry // chained hash of a prompt's full hash_ids → its entry
	pending []*retainEntry          // in arrival order, until labelled
	chain   []uint64

	pinned, seen uint64 // prompts pinned, of requests seen
}

func newRetainer(cfg RetainConfig, ttl time.Duration) *retainer {
	if cfg.Horizon == 0 {
		cfg.Horizon = ttl
	}
	if cfg.HalfLife == 0 {
		cfg.HalfLife = 10 * time.Minute
	}
	return &retainer{cfg: cfg, index: map[uint64]*retainEntry{}}
}

func (r *retainer) decay(c *retainCount, now time.Duration) {
	if dt := now - c.at; dt > 0 {
		f := math.Exp2(-float64(dt) / float64(r.cfg.HalfLife))
		c.n, c.pos = c.n*f, c.pos*f
	}
	c.at = now
}

func (r *retainer) label(e *retainEntry, followed bool, now time.Duration) {
	c := &r.counts[e.class]
	r.decay(c, now)
	c.n++
	if followed {
		c.pos++
	}
}

// observe takes a request as it arrives and says whether to pin its
// prompt: it labels the request it follows up (if any) and the requests
// whose horizon passed, then estimates this one's class.
func (r *retainer) observe(req *Request, now time.Duration) bool {
	for len(r.pending) > 0 && (r.pending[0].followed || r.pending[0].at+r.cfg.Horizon <= now) {
		e := r.pending[0]
		r.pending = r.pending[1:]
		if !e.followed {
			r.label(e, false, now)
		}
	}
	r.chain = r.chain[:0]
	var h uint64
	for _, b := range req.Blocks {
		h = mix(h ^ mix(uint64(b)+1))
		r.chain = append(r.chain, h)
	}
	depth := 0
	// The longest earlier prompt whose full blocks this one extends (two
	// blocks at least: the first is a system prompt every request shares).
	for k := len(r.chain); k >= 2; k-- {
		if e, ok := r.index[r.chain[k-1]]; ok {
			depth = e.depth + 1
			if !e.followed && now-e.at <= r.cfg.Horizon {
				e.followed = true
				r.label(e, true, now)
			}
			break
		}
	}
	length := min(retainLengths-1, int(math.Log2(float64(max(1, req.Input)))))
	class := min(depth, retainDepths-1)*retainLengths + length
	r.seen++
	c := &r.counts[class]
	r.decay(c, now)
	p := (c.pos + retainPrior*retainPriorN) / (c.n + retainPriorN)
	predicted := p >= r.cfg.Threshold
	// Its full blocks are what a follow-up extends; the last hash_id
	// covers a partial block that the next turn's text continues.
	if n := len(r.chain) - 1; n >= 2 {
		e := &retainEntry{class: class, depth: depth, at: now}
		r.index[r.chain[n-1]] = e
		r.pending = append(r.pending, e)
	}
	if predicted {
		r.pinned++
	}
	return predicted
}

// FollowUpGaps says, for each request of a trace sorted by arrival, how
// long after it its first follow-up came (a later request extending its
// full hash_ids, as the follow-up model sees it), or 0 when none did: the
// future an oracle bound knows and no mechanism does.
func FollowUpGaps(reqs []Request) []time.Duration {
	gaps := make([]time.Duration, len(reqs))
	last := map[uint64]int{}
	var chain []uint64
	for i, r := range reqs {
		chain = chain[:0]
		var h uint64
		for _, b := range r.Blocks {
			h = mix(h ^ mix(uint64(b)+1))
			chain = append(chain, h)
		}
		for k := len(chain); k >= 2; k-- {
			if j, ok := last[chain[k-1]]; ok {
				if gaps[j] == 0 {
					gaps[j] = max(1, r.At-reqs[j].At)
				}
				break
			}
		}
		if n := len(chain) - 1; n >= 2 {
			last[chain[n-1]] = i
		}
	}
	return gaps
}
