package sched

import (
	"math"
	"math/bits"
)

// The prefill planner of Priced with Disaggregate: which workers take
// prefills follows the load, as Dynamo's planner sizes its prefill pool.
// It grows at once on a TTFT breach (grow) and shrinks slowly (shrink):
// a prefiller goes back to decoding only after the pool's backlog has
// stayed far below the breach level for ShrinkAfter with no other change,
// so a load that hovers near one threshold cannot make it flap.

// plan returns the planner's prefill set, seeding it from the workers'
// roles on first use and giving a prefiller back to decoding when the
// pool has long been idle enough (shrink).
func (p *Priced) plan(s *Snapshot) uint64 {
	if len(s.Workers) > 63 {
		return 0
	}
	pre := p.prefillers.Load()
	if pre == 0 {
		pre = planned
		for i := range s.Workers {
			if s.Workers[i].Role == RolePrefill {
				pre |= 1 << i
			}
		}
		if !p.prefillers.CompareAndSwap(0, pre) {
			pre = p.prefillers.Load()
		}
		p.changed.Store(s.Now.UnixNano())
	}
	return p.shrink(s, pre)
}

// grow adds to the prefill set the decode-side worker, of a class that
// prefills at least half as fast as the prefiller like, with the fewest
// sequences running (those its new prefills stall), and returns it; -1
// when the planner is off, there is none, or the decode side is down to
// MinDecodeShare of the workers.
func (p *Priced) grow(s *Snapshot, pre uint64, like *Worker) int {
	if pre == 0 || bits.OnesCount64(pre&^planned) >= len(s.Workers)-max(1, int(math.Ceil(p.cfg.MinDecodeShare*float64(len(s.Workers))))) {
		return -1
	}
	j := -1
	for i := range min(len(s.Workers), 63) {
		w := &s.Workers[i]
		if !w.Healthy || pre&(1<<i) != 0 || w.Role == RoleConservative ||
			p.class(w).PrefillTokensPerSec < 0.5*p.class(like).PrefillTokensPerSec {
			continue
		}
		if j < 0 || w.Running < s.Workers[j].Running {
			j = i
		}
	}
	if j < 0 {
		return -1
	}
	for {
		old := p.prefillers.Load()
		if p.prefillers.CompareAndSwap(old, old|1<<j) {
			p.changed.Store(s.Now.UnixNano())
			p.lowSince.Store(0)
			return j
		}
	}
}

// shrink returns pre less one prefiller when the pool can spare it: the
// pool's pending prefill over its prefill rate without that member (the
// healthy one with the least backlog) is under ShrinkBelow of the TTFT
// SLO, and has been, with the set unchanged, for ShrinkAfter. Without a
// clock (Snapshot.Now zero) or with ShrinkAfter < 0 the pool only grows.
func (p *Priced) shrink(s *Snapshot, pre uint64) uint64 {
	if p.cfg.ShrinkAfter < 0 || s.Now.IsZero() || bits.OnesCount64(pre&^planned) < 2 {
		return pre
	}
	var pending, rate float64
	j := -1
	for i := range min(len(s.Workers), 63) {
		w := &s.Workers[i]
		if pre&(1<<i) == 0 || !w.Healthy {
			continue
		}
		pending += float64(w.PendingPrefill)
		rate += p.class(w).PrefillTokensPerSec
		if j < 0 || w.PendingPrefill < s.Workers[j].PendingPrefill ||
			w.PendingPrefill == s.Workers[j].PendingPrefill && w.Prefilling < s.Workers[j].Prefilling {
			j = i
		}
	}
	now := s.Now.UnixNano()
	if j < 0 {
		return pre
	}
	left := rate - p.class(&s.Workers[j]).PrefillTokensPerSec
	if left <= 0 || pending/left >= p.cfg.ShrinkBelow*p.cfg.SLOTTFT.Seconds() {
		p.lowSince.Store(0)
		return pre
	}
	since := p.lowSince.Load()
	if since == 0 {
		p.lowSince.CompareAndSwap(0, now)
		return pre
	}
	wait := p.cfg.ShrinkAfter.Nanoseconds()
	if now-since < wait || now-p.changed.Load() < wait {
		return pre
	}
	if !p.prefillers.CompareAndSwap(pre, pre&^(1<<j)) {
		return p.prefillers.Load() // another decision changed it first
	}
	p.changed.Store(now)
	p.lowSince.Store(0)
	return pre &^ (1 << j)
}

// Prefillers reports the planner's prefill set (worker indexes), nil
// before its first decision or with Disaggregate off.
func (p *Priced) Prefillers() []int {
	pre := p.prefillers.Load()
	if pre == 0 {
		return nil
	}
	var out []int
	for i := range 63 {
		if pre&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}
