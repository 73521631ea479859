package sched

import (
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// PricedConfig configures the Priced policy. The zero value means: every
// worker priced alike, no disaggregation, the defaults below.
type PricedConfig struct {
	// SLOTTFT and SLOTPOT are the targets the estimates are held to.
	// Defaults 2 s and 100 ms (the simulator's SLO).
	SLOTTFT, SLOTPOT time.Duration
	// Classes prices each worker by its declared GPU class (Worker.Class):
	// its prefill rate, decode step, KV capacity and price. Off, every
	// worker is priced as ReferenceClass and only load tells them apart.
	Classes bool
	// Disaggregate lets a long uncached prompt be prefilled on a
	// prefill-heavy worker and decoded on another (Decision.Split), as
	// llm-d's P/D decider and Dynamo's disaggregated router do.
	Disaggregate bool
	// SplitPrefill is the prefill time, on the decode-side worker's class,
	// from which a prompt is not prefilled there: it goes to the
	// prefill-heavy pool (split when it decodes more than one token). Below
	// it the prefill is cheap enough to share the decodes' steps. Default
	// 10 ms (about 390 tokens on an H100, 50 on an L4; Dynamo's
	// max_local_prefill_length plays the same part in tokens).
	SplitPrefill time.Duration
	// TTFTHeadroom and TPOTHeadroom are the shares of each SLO an estimate
	// may use and still count as meeting it: queueing is bursty, so TTFT
	// keeps more in reserve than the steadier TPOT. Defaults 0.5 and 0.8.
	TTFTHeadroom, TPOTHeadroom float64
	// MinDecodeShare is the share of the workers the planner keeps on the
	// decode side when it grows the prefill pool (Disaggregate only): the
	// prefill pool grows on a TTFT breach, as Dynamo's planner's does, up
	// to the rest (at least one worker stays decoding). Default 1/8: the
	// prefillers decode what bears their stalls (long decodes) and the
	// decode side keeps the short ones, which need few workers. Chosen on
	// the Azure code trace's requests 0-2,999 and the Mooncake head
	// (8×H100, 1/8, 2/8, 3/8: Azure 0-999 22.9×, 20.5×, 20.1× the trace's
	// rate, 1,000-1,999 17.0×, 16.2×, 13.8×, 2,000-2,999 7.03×, 6.44×,
	// 5.59×; Mooncake 3.12×, 2.28×, 2.48×); docs/cloud.md.
	MinDecodeShare float64
	// ShrinkBelow and ShrinkAfter let the planner give a prefiller back to
	// decoding (Disaggregate only): when the prefill pool's backlog,
	// spread over the pool less one member, stays under ShrinkBelow of the
	// TTFT SLO for ShrinkAfter, and the planner changed nothing in that
	// time, the member with the least backlog leaves the pool (one at a
	// time, never the last). The gap to the grow threshold (TTFTHeadroom of
	// the SLO, on one worker) and the wait are the hysteresis that keeps it
	// from flapping. Defaults 0.1 and 10 s; ShrinkAfter < 0 turns shrinking
	// off.
	ShrinkBelow float64
	ShrinkAfter time.Duration
}

func (c *PricedConfig) fill() {
	if c.SLOTTFT == 0 {
		c.SLOTTFT = 2 * time.Second
	}
	if c.SLOTPOT == 0 {
		c.SLOTPOT = 100 * time.Millisecond
	}
	if c.SplitPrefill == 0 {
		c.SplitPrefill = 10 * time.Millisecond
	}
	if c.TTFTHeadroom == 0 {
		c.TTFTHeadroom = 0.5
	}
	if c.TPOTHeadroom == 0 {
		c.TPOTHeadroom = 0.8
	}
	if c.MinDecodeShare == 0 {
		c.MinDecodeShare = 1.0 / 8
	}
	if c.ShrinkBelow == 0 {
		c.ShrinkBelow = 0.1
	}
	if c.ShrinkAfter == 0 {
		c.ShrinkAfter = 10 * time.Second
	}
}

// Validate names the first bad field.
func (c *PricedConfig) Validate() error {
	switch {
	case c.SLOTTFT < 0 || c.SLOTPOT < 0:
		return errors.New("sched.PricedConfig.SLOTTFT/SLOTPOT: must be > 0")
	case c.SplitPrefill < 0:
		return errors.New("sched.PricedConfig.SplitPrefill: must be ≥ 0")
	case !(c.MinDecodeShare > 0 && c.MinDecodeShare < 1):
		return errors.New("sched.PricedConfig.MinDecodeShare: must be in (0, 1)")
	case !(c.TTFTHeadroom > 0 && c.TTFTHeadroom <= 1) || !(c.TPOTHeadroom > 0 && c.TPOTHeadroom <= 1):
		return errors.New("sched.PricedConfig.TTFTHeadroom/TPOTHeadroom: must be in (0, 1]")
	case !(c.ShrinkBelow > 0 && c.ShrinkBelow < c.TTFTHeadroom):
		return errors.New("sched.PricedConfig.ShrinkBelow: must be in (0, TTFTHeadroom)")
	}
	return nil
}

// ReferenceClass prices a worker that declared no class: the simulator's
// H100 serving Llama-3.1-8B (cloud/sim's TestReferenceClass keeps the two
// in step). Only ratios between workers matter when every worker uses it.
var ReferenceClass = Class{PrefillTokensPerSec: 36700, DecodeStepSec: 0.0066, DecodeStepPerSeq: 0.000047, KVTokens: 411952, PricePerHour: 3}

// Priced places each request on the worker whose estimated TTFT and TPOT
// meet the SLOs where its work costs least (workCost: $ per token of
// prefill and decode on the worker's class, not $ per hour), the least
// loaded by those estimates among equals; with Disaggregate it also
// decides per request whether to split prefill and decode. The estimates,
// per worker:
//
//	TTFT = (pending prefill tokens + this prompt's uncached tokens) / prefill rate
//	TPOT = decode step + per-sequence cost × (running + queued + 1)
//	       + pending prefill time / predicted output tokens
//	       (+ on a planner's prefiller: TTFTHeadroom × SLOTTFT / predicted output tokens)
//
// (chunked prefill shares steps with decodes, so a worker's prefill
// backlog stretches its decodes' token gaps, and a prefiller's later
// prefills stretch them up to the backlog the planner allows). A worker
// whose KV cache cannot hold the prompt and output is never chosen. A
// request splits when its uncached prompt takes SplitPrefill or more, it
// will decode more than one token, and a prefill-heavy worker meets the
// TTFT while another worker meets the TPOT: the prefill runs on the
// first, the KV blocks move, the second decodes. Which workers prefill is
// the planner's (planner.go): it starts from the roles, moves a
// decode-side worker of an equally fast class into the prefill pool when
// no prefiller can meet the TTFT, and gives one back when the pool has
// long been idle, so on identical GPUs the split between prefill and
// decode follows the load instead of the role cycle.
type Priced struct {
	cfg  PricedConfig
	name string
	// prefillers is the planner's choice of the workers (by index, the
	// first 64) that take prefills, when Disaggregate is on; bit 63 set
	// means it was seeded from the roles. Atomic: Decide runs on many
	// goroutines.
	prefillers atomic.Uint64
	// changed is when the planner last changed the set and lowSince since
	// when the prefill pool has stayed idle enough to shrink (Unix ns of
	// Snapshot.Now; lowSince 0: it is not). planner.go.
	changed, lowSince atomic.Int64
}

// planned marks a seeded prefillers set (worker 63 then keeps its role).
const planned = 1 << 63

// NewPriced validates cfg and returns the policy; name is what Name reports.
func NewPriced(name string, cfg PricedConfig) (*Priced, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Priced{cfg: cfg, name: name}, nil
}

// Name implements Policy.
func (p *Priced) Name() string { return p.name }

// Config returns the configuration in effect.
func (p *Priced) Config() PricedConfig { return p.cfg }

func (p *Priced) class(w *Worker) *Class {
	if p.cfg.Classes && w.Class.Known() {
		return &w.Class
	}
	return &ReferenceClass
}

func uncached(req *Request, w *Worker) int {
	return max(1, req.InputTokens-w.PrefixBlocks*16)
}

// prefillEst is the TTFT of req's prefill on w.
func (p *Priced) prefillEst(req *Request, w *Worker) float64 {
	c := p.class(w)
	return float64(w.PendingPrefill+uncached(req, w)) / c.PrefillTokensPerSec
}

// decodeEst is the TPOT of req's decode on w.
func (p *Priced) decodeEst(req *Request, w *Worker) float64 {
	c := p.class(w)
	out := max(1, req.PredictedOutput)
	return c.DecodeStepSec + c.DecodeStepPerSeq*float64(w.Running+w.Queued+1) +
		float64(w.PendingPrefill)/c.PrefillTokensPerSec/float64(out)
}

func (p *Priced) fits(req *Request, w *Worker, tokens int) bool {
	c := p.class(w)
	return c.KVTokens == 0 || tokens <= c.KVTokens
}

// risk is the larger share of its headroom-reduced SLO an estimate uses:
// at most 1 meets both.
func (p *Priced) risk(ttft, tpot float64) float64 {
	return max(ttft/(p.cfg.TTFTHeadroom*p.cfg.SLOTTFT.Seconds()), tpot/(p.cfg.TPOTHeadroom*p.cfg.SLOTPOT.Seconds()))
}

// roleMask selects pools: bit r for Role r.
type roleMask uint8

const anyRole roleMask = 1<<RolePrefill | 1<<RoleDecode | 1<<RoleStream

func (m roleMask) has(r Role) bool { return m&(1<<r) != 0 }

// placement ranks candidates: feasible before not, then cheaper (the
// request's dollars there, workCost), then less risky.
type placement struct {
	i     int
	risk  float64
	price float64
}

// workCost is what req's phase ph costs on w in GPU dollars-per-hour ×
// seconds, at the class's efficiency: its uncached prompt at the prefill
// rate, and each output token's share of a decode step at the batch the
// class runs within the TPOT target (the steps that fit the SLO, the
// sequences its KV holds at this request's length, its capacity). A
// price per hour alone would call the slower GPU cheap; per token of work
// an L4 serving an 8B model costs more than an H100 at either phase (its
// decode step is ten times longer, its batch a tenth), so it is the
// overflow, not the first choice.
func (p *Priced) workCost(req *Request, w *Worker, ph phase) float64 {
	c := p.class(w)
	out := max(1, req.PredictedOutput)
	sec := 0.0
	if ph != phaseDecode {
		sec = float64(uncached(req, w)) / c.PrefillTokensPerSec
	}
	if ph != phasePrefill {
		batch := float64(max(1, w.Capacity))
		if c.DecodeStepPerSeq > 0 {
			batch = min(batch, (p.cfg.TPOTHeadroom*p.cfg.SLOTPOT.Seconds()-c.DecodeStepSec)/c.DecodeStepPerSeq)
		}
		if c.KVTokens > 0 {
			batch = min(batch, float64(c.KVTokens)/float64(req.InputTokens+out))
		}
		batch = max(1, batch)
		sec += float64(out) * (c.DecodeStepSec + c.DecodeStepPerSeq*batch) / batch
	}
	return c.PricePerHour * sec
}

func (a placement) better(b placement) bool {
	if b.i < 0 {
		return a.i >= 0
	}
	af, bf := a.risk <= 1, b.risk <= 1
	switch {
	case af != bf:
		return af
	case !af:
		return a.risk < b.risk
	case a.price != b.price:
		return a.price < b.price
	}
	return a.risk < b.risk
}

// phase is what a worker is asked to do for the request.
type phase uint8

const (
	phaseBoth    phase = iota // prefill and decode (colocated)
	phasePrefill              // prefill only (the first token), then hand the KV over
	phaseDecode               // decode only, from handed-over KV
)

// best returns the best worker of the pools in mask for ph (i = -1: none
// healthy there), skipping exclude.
func (p *Priced) best(req *Request, s *Snapshot, mask roleMask, ph phase, exclude int, pre uint64) placement {
	b := placement{i: -1}
	out := max(1, req.PredictedOutput)
	for i := range s.Workers {
		w := &s.Workers[i]
		if !w.Healthy || i == exclude || !mask.has(p.role(i, w, pre)) {
			continue
		}
		var ttft, tpot float64
		need := req.InputTokens + out
		switch ph {
		case phaseBoth:
			ttft, tpot = p.prefillEst(req, w), p.decodeEst(req, w)
		case phasePrefill:
			ttft, need = p.prefillEst(req, w), req.InputTokens+1
		case phaseDecode:
			tpot = p.decodeEst(req, w)
		}
		if ph != phasePrefill && out >= 2 && pre != 0 && p.role(i, w, pre) == RolePrefill {
			// A prefiller (the planner's: without one every worker
			// prefills alike) may decode, but the prefills it takes later
			// stall every step: up to the backlog the planner lets one
			// hold before it grows the pool (TTFTHeadroom of the TTFT
			// SLO), spread over this request's tokens. A long decode
			// barely notices; a short one is kept off (a one-token
			// answer has no decode to stall).
			tpot += p.cfg.TTFTHeadroom * p.cfg.SLOTTFT.Seconds() / float64(out)
		}
		c := placement{i: i, risk: p.risk(ttft, tpot), price: p.workCost(req, w, ph)}
		if !p.fits(req, w, need) {
			c.risk = math.Inf(1)
		} else if short := p.kvShort(w, need); short > 0 {
			c.risk = max(c.risk, 1) + short
		}
		if c.better(b) {
			b = c
		}
	}
	if b.i >= 0 && math.IsInf(b.risk, 1) {
		return placement{i: -1}
	}
	return b
}

// Decide implements Policy.
func (p *Priced) Decide(req *Request, s *Snapshot) (Decision, error) {
	if !p.cfg.Disaggregate {
		return p.colocate(req, s, anyRole, PolicyPriced, ReasonPriced, 0)
	}
	pre := p.plan(s)
	// Decode-side pools keep their steps for decodes: a prompt whose
	// prefill there would stall them for SplitPrefill or more goes to the
	// prefill-heavy pool, split when it decodes further. The decode may
	// land anywhere, prefillers included (at the stall best charges them):
	// on a mixed cluster the fast prefill GPUs are also the cheapest
	// decoders per token.
	dec := anyRole
	local := p.best(req, s, dec, phaseBoth, -1, pre)
	if local.i >= 0 && local.risk <= 1 && p.prefillSec(req, &s.Workers[local.i]) < p.cfg.SplitPrefill.Seconds() {
		return decided(req, s, local.i, ReasonPriced, PolicyPriced), nil
	}
	if out := max(1, req.PredictedOutput); out >= 2 {
		a := p.best(req, s, 1<<RolePrefill, phasePrefill, -1, pre)
		if a.i >= 0 && a.risk > 1 {
			// The prefill queue is too long to meet the TTFT: as
			// Dynamo's planner grows its prefill pool on a TTFT
			// breach, a decode-side worker of a class that prefills
			// about as fast becomes a prefiller (it stops taking
			// decodes; those it has finish there). Mixing the prefill
			// into its decodes instead would stall every one of them.
			if j := p.grow(s, pre, &s.Workers[a.i]); j >= 0 {
				pre |= 1 << j
				a = p.best(req, s, 1<<RolePrefill, phasePrefill, -1, pre)
			} else if local.i >= 0 && local.risk <= 1 && p.canTakeBack(req, &s.Workers[local.i], &s.Workers[a.i], a.risk) {
				// No worker left to grow into (or the planner is
				// off): Dynamo's router sends the prefill back to a
				// decode worker that can take it.
				return p.takeBack(req, s, local.i, pre), nil
			}
		}
		if a.i >= 0 {
			if b := p.best(req, s, dec, phaseDecode, a.i, pre); b.i >= 0 && (b.risk <= 1 || local.i < 0 || local.risk > 1) {
				if p.role(b.i, &s.Workers[b.i], pre) == RolePrefill && p.fits(req, &s.Workers[a.i], req.InputTokens+out) {
					// A decode on another prefiller is stalled by its
					// prefills as it would be on this one: moving it buys
					// no isolation, only a transfer and the prompt's KV
					// held twice (cached here, running there).
					return decided(req, s, a.i, ReasonPriced, PolicyPriced), nil
				}
				d := decided(req, s, a.i, ReasonSplit, PolicyPriced)
				d.Split, d.DecodeWorker = true, b.i
				return d, nil
			}
		}
	}
	if c := p.best(req, s, 1<<RolePrefill, phaseBoth, -1, pre); c.i >= 0 && (c.risk <= 1 || local.i < 0) {
		return decided(req, s, c.i, ReasonPriced, PolicyPriced), nil
	}
	return p.colocate(req, s, anyRole, PolicyPriced, ReasonPriced, pre)
}

// role is the pool worker i serves in under the planner's set pre (its
// own role beyond the first 63 workers or with the planner off).
func (p *Priced) role(i int, w *Worker, pre uint64) Role {
	if pre == 0 || i >= 63 || w.Role == RoleConservative {
		return w.Role
	}
	switch {
	case pre&(1<<i) != 0:
		return RolePrefill
	case w.Role == RolePrefill:
		return RoleDecode
	}
	return w.Role
}

// canTakeBack reports that decode-side worker w may prefill req itself
// while the prefill pool (its best member pre, at risk poolRisk) misses
// the TTFT headroom and cannot grow. A prefill there stalls every decode
// w runs, so it may when:
//   - the decode time it stalls (its length on w × the sequences running
//     or queued there) is within what the planner lets a prefiller's
//     backlog stall a decode, TTFTHeadroom × the TTFT SLO (1 s): an idle
//     or lightly loaded GPU takes a short prompt in a burst, even a slow
//     one (Mooncake's mixed cluster, where the H100 prefillers queued what
//     the L4s could answer in time);
//   - or w prefills about as fast as the pool and the pool's estimate is
//     past the TTFT SLO itself, not only its headroom: then a missed TTFT
//     is certain and a stalled decode only likely.
//
// Sending every such prefill back (Dynamo's local prefill, what this did
// before) stalled the decode workers' short decodes in the Azure trace's
// bursts while the prefill pool would still have met the SLO (requests
// 2,000-2,999 on 8×H100: 3.39× the trace's rate against 5.59×); sending
// every feasible one back to the L4s cost the Azure head's mixed cluster
// 9.06× → 5.62×.
func (p *Priced) canTakeBack(req *Request, w, pre *Worker, poolRisk float64) bool {
	if p.prefillSec(req, w)*float64(w.Running+w.Queued) <= p.cfg.TTFTHeadroom*p.cfg.SLOTTFT.Seconds() {
		return true
	}
	return p.class(w).PrefillTokensPerSec >= 0.5*p.class(pre).PrefillTokensPerSec && poolRisk*p.cfg.TTFTHeadroom > 1
}

// takeBack is the decision for a prefill taken back by decode-side worker
// i (for a request with a decode: two or more output tokens): the prefill
// runs there, and so does the decode unless another worker
// decodes it for less per token within the SLOs, where it is split to (a
// take-back answers the prefill pool's queue, not a question about the
// decode: an L4 that takes a short prompt in a burst would otherwise
// decode its 600 tokens at ten times an H100's cost per token and step
// time, and finish long after everything else).
func (p *Priced) takeBack(req *Request, s *Snapshot, i int, pre uint64) Decision {
	if b := p.best(req, s, anyRole, phaseDecode, i, pre); b.i >= 0 && b.risk <= 1 && b.price < p.workCost(req, &s.Workers[i], phaseDecode) {
		d := decided(req, s, i, ReasonSplit, PolicyPriced)
		d.Split, d.DecodeWorker = true, b.i
		return d
	}
	return decided(req, s, i, ReasonPriced, PolicyPriced)
}

// prefillSec is how long req's uncached prompt alone occupies w.
func (p *Priced) prefillSec(req *Request, w *Worker) float64 {
	return float64(uncached(req, w)) / p.class(w).PrefillTokensPerSec
}

// colocate places req on one worker of the pools in mask, or anywhere
// outside the conservative pool when none is healthy there, or on the
// conservative pool when that is all there is.
func (p *Priced) colocate(req *Request, s *Snapshot, mask roleMask, pol PolicyID, r Reason, pre uint64) (Decision, error) {
	for _, m := range [...]roleMask{mask, anyRole, 1 << RoleConservative} {
		if c := p.best(req, s, m, phaseBoth, -1, pre); c.i >= 0 {
			return decided(req, s, c.i, r, pol), nil
		}
	}
	if i := leastLoaded(s, -1, false); i >= 0 {
		return decided(req, s, i, ReasonOverloaded, pol), nil
	}
	return Decision{}, ErrNoWorker
}

// kvShort is the share of w's KV cache that need tokens lack there now:
// free blocks as last probed (KVUsage counts the blocks sequences hold, not
// the cached ones a new sequence may evict) less the prompts placed there
// and not yet prefilled. Above 0 the request would wait for blocks or
// preempt a running sequence.
func (p *Priced) kvShort(w *Worker, need int) float64 {
	c := p.class(w)
	if c.KVTokens <= 0 {
		return 0
	}
	free := (1-w.KVUsage)*float64(c.KVTokens) - float64(w.PendingPrefill)
	return max(0, float64(need)-free) / float64(c.KVTokens)
}
