package sim

import (
	"cmp"
	"slices"
	"time"
)

// Cache-aware admission order, after SGLang's longest-prefix-match and
// shortest-job scheduling with aging: first come, first served puts a short
// follow-up behind a long first-turn prefill that arrived a moment before
// it, for as long as that prefill's chunks take the whole step budget. In
// this order every step first advances the decodes, then hands the rest of
// the budget to prefill work (the chunks of running prompts and the
// waiting prompts) earliest key first, where a prompt's key is
//
//	queued at + uncached tokens / AgingRate
//
// its uncached tokens being what neither the GPU cache nor the host tier
// holds when it is admitted. A prompt whose prefix is cached and whose
// remainder is short therefore runs ahead of a long one; a long one is
// passed over only by prompts queued less than its uncached length /
// AgingRate after it, so none starves. Waiting prompts keep to the order
// strictly (the first that does not fit stops admission, as vLLM's FCFS
// does), and a prefill chunk takes only free blocks instead of preempting
// (Plan gives up the newest sequence when nothing can move).

// order is the engine's admission order state.
type order struct {
	rate float64 // tokens of uncached prompt worth one second of waiting
	now  func() time.Duration
	// whole keys prompts by all their tokens, cached or not: the same
	// order without its cache awareness (an ablation).
	whole bool
}

// EnableOrder turns cache-aware admission order on: a prompt's uncached
// tokens (all its tokens, with whole) count as rate tokens per second of
// waiting (> 0), on the now clock.
func (e *Engine) EnableOrder(rate float64, now func() time.Duration, whole bool) {
	e.order = &order{rate: rate, now: now, whole: whole}
}

func (o *order) wait(tokens int) time.Duration {
	return time.Duration(float64(tokens) / o.rate * 1e9)
}

type orderCand struct {
	s       *Seq
	running bool // a running prompt's next chunk; else a waiting prompt
}

// planOrdered gives the budget left after the decodes to the chunks of
// the running prompts (partial) and the waiting prompts, earliest key
// first.
func (e *Engine) planOrdered(partial []*Seq, preempted bool, budget *int, shape *StepShape) {
	bs := e.d.Engine.BlockSize
	cands := make([]orderCand, 0, len(partial)+len(e.waiting))
	for _, s := range partial {
		cands = append(cands, orderCand{s, true})
	}
	if !preempted { // admitting after a preemption would only thrash
		all := len(e.planned) == 0 && len(partial) == 0
		for _, s := range e.waiting {
			if !e.eligible(s, all) {
				continue
			}
			hit, load := e.cached(s)
			if e.order.whole {
				hit, load = 0, 0
			}
			if s.Imported && !s.admitted {
				hit, load = s.Prompt/bs, 0 // nothing of it is computed here
			}
			s.key = s.enq + e.order.wait(max(0, s.numTokens()-(hit+load)*bs))
			cands = append(cands, orderCand{s, false})
		}
	}
	slices.SortStableFunc(cands, func(a, b orderCand) int { return cmp.Compare(a.s.key, b.s.key) })
	blocked, admitted := false, false
	for _, c := range cands {
		if *budget <= 0 {
			break
		}
		s := c.s
		if c.running {
			n := min(s.numTokens()-s.computed, *budget, (len(s.blocks)+e.kv.free())*bs-s.computed)
			if n <= 0 {
				continue
			}
			for range ceilDiv(s.computed+n, bs) - len(s.blocks) {
				s.blocks = append(s.blocks, e.kv.alloc())
			}
			e.add(s, n, shape, budget)
			continue
		}
		if blocked || len(e.running) >= e.d.Engine.MaxNumSeqs {
			continue
		}
		if !e.admit(s, budget, shape) {
			blocked = true
			continue
		}
		admitted = true
	}
	if admitted {
		// Admitted prompts are planned (step > 0); the rest keep waiting.
		e.waiting = slices.DeleteFunc(e.waiting, func(s *Seq) bool { return s.step > 0 })
	}
}
