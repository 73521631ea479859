package lm

import (
	"slices"
	"time"

	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// Cache-aware admission order (EngineConfig.AgingRate), the same rule as
// cloud/sim's engine: first come, first served leaves a short prompt that
// arrives during a long prefill waiting for all of that prefill's chunks,
// because they take the whole step budget. In this order the budget left
// after the decodes goes to prompt work (the next chunks of running prompts
// and the waiting prompts) earliest key first, where
//
//	key = queued at + uncached prompt tokens / AgingRate
//
// and the uncached tokens are what neither the prefix cache nor the host
// tier holds when the prompt is admitted. A long prompt is passed only by
// prompts queued less than its uncached length / AgingRate after it, so
// none starves. Waiting prompts keep the order strictly: the first that
// cannot be admitted stops admission.

type orderCand struct {
	s       *sequence
	key     time.Time
	running bool
}

// orderedPrompts plans prompt work in key order and returns the work and
// the budget left.
func (e *Engine) orderedPrompts(work []planned, budget int, preempted bool) ([]planned, int) {
	bs := e.cfg.BlockSize
	var cands []orderCand
	for _, s := range e.running {
		if len(s.tokens)-s.computed > 1 {
			cands = append(cands, orderCand{s, s.key, true})
		}
	}
	if !preempted { // admitting after a preemption would only thrash
		e.mu.Lock()
		waiting := slices.Clone(e.waiting) // only this loop removes from it
		e.mu.Unlock()
		for _, s := range waiting {
			uncached := 0
			if s.imported == nil {
				cache, host := e.cachedPrefix(e.tokenHashes(s))
				uncached = max(0, len(s.tokens)-(cache+host)*bs)
			}
			key := s.start.Add(time.Duration(float64(uncached) / e.cfg.AgingRate * 1e9))
			cands = append(cands, orderCand{s, key, false})
		}
	}
	slices.SortStableFunc(cands, func(a, b orderCand) int { return a.key.Compare(b.key) })
	blocked := false
	for _, c := range cands {
		if budget <= 0 {
			break
		}
		s := c.s
		if !c.running {
			if blocked || len(e.running) >= e.cfg.MaxBatch {
				continue
			}
			ok := false
			if s.imported != nil {
				ok = e.admitImported(s, e.cfg.Now())
			} else {
				ok = e.admit(s)
			}
			if !ok {
				blocked = true
				continue
			}
			e.mu.Lock()
			e.waiting = slices.DeleteFunc(e.waiting, func(w *sequence) bool { return w == s })
			e.mu.Unlock()
			if s.ended { // a handed-off first token that was also its last
				continue
			}
			s.key = c.key
			e.running = append(e.running, s)
		}
		if want := len(s.tokens) - s.computed; want > 0 {
			if n := e.reserve(s, min(want, budget), -1, nil); n > 0 {
				work = append(work, planned{s, n})
				budget -= n
			}
		}
	}
	return work, budget
}

// tokenHashes is BlockHashes of s's tokens, computed again only when they
// have changed (they grow while s runs, never while it waits).
func (e *Engine) tokenHashes(s *sequence) []uint64 {
	if s.waitHashed != len(s.tokens) {
		s.waitHashes = kvcache.BlockHashes(s.tokens, e.cfg.BlockSize)
		s.waitHashed = len(s.tokens)
	}
	return s.waitHashes
}
