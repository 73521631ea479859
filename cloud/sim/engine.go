package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrTooLong is the engine's answer to a request whose prompt plus
// max_tokens exceeds the model length, as vLLM rejects it (HTTP 400).
var ErrTooLong = errors.New("sim: prompt + max tokens exceed the model length")

// Seq is one request inside an engine.
type Seq struct {
	Prompt    int      // prompt tokens (≥ 1)
	MaxOutput int      // tokens to generate (≥ 1); generation stops there
	Hashes    []uint64 // chained hashes of the prompt's full blocks (non-zero)
	User      any      // the driver's handle
	// Imported marks a sequence whose prompt KV arrives from another engine
	// (prefill/decode disaggregation): that engine prefilled it and sampled
	// its first token, so admission allocates the prompt's blocks without
	// computing them and the first step decodes the second token.
	Imported bool

	// CachedTokens is how many prompt tokens came from the prefix cache
	// when it was first scheduled; Preemptions how often it was preempted.
	CachedTokens, Preemptions int

	// Prompt caching (pin.go): the leading PinBlocks of Hashes are pinned
	// for PinTTL, charged to Tenant, once computed; WrittenBlocks is how
	// many that newly pinned (cache writes).
	PinBlocks     int
	PinTTL        time.Duration
	Tenant        string
	WrittenBlocks int
	pinDone       bool

	// HostTokens is how many of CachedTokens were copied back from the
	// host KV tier (host.go).
	HostTokens int

	// Cache-aware admission order (EnableOrder): when it was first queued,
	// and its priority (earlier first).
	enq, key time.Duration
	queued   bool

	// notBefore is the first step (Engine.n) that may admit it: with
	// async scheduling, a sequence that arrives while a step runs and the
	// next one is already scheduled waits for the one after.
	notBefore int

	computed  int     // tokens whose KV exists
	generated int     // output tokens sampled
	blocks    []int32 // block table
	hashed    int     // leading blocks registered in the prefix cache
	step      int     // tokens scheduled in the planned step
	admitted  bool
	aborted   bool
}

// Generated is how many output tokens the sequence has produced.
func (s *Seq) Generated() int { return s.generated }

func (s *Seq) numTokens() int { return s.Prompt + s.generated }

// EngineStats are an engine's cumulative counters.
type EngineStats struct {
	Steps, Preemptions         uint64
	PromptTokens, CachedTokens uint64 // prompt tokens scheduled, and served from the cache
	HostTokens                 uint64 // of CachedTokens, copied back from the host KV tier
	OutputTokens               uint64
	Busy                       time.Duration // Σ step durations
}

// Engine is a vLLM-style engine (V1 scheduler) as a state machine: Plan
// chooses the next step's work and returns its duration, Commit applies it
// once that time has passed. A driver (the Cluster in virtual time, Server
// in real time) calls them in turn. Each step first advances the running
// sequences in order (a decode token each, or the next prefill chunk) under
// the token budget, preempting the most recently admitted sequence when a
// block cannot be had (its blocks are freed and it is recomputed later);
// then, if nothing was preempted, admits waiting sequences first-come
// first-served while sequence slots, budget and blocks last, reusing the
// longest cached prefix of full blocks. Not safe for concurrent use.
type Engine struct {
	d       *Deployment
	kv      *kvCache
	waiting []*Seq
	running []*Seq
	planned []*Seq
	last    time.Duration // planned step's duration
	stats   EngineStats
	host    *hostTier // nil: no host KV tier (host.go)
	order   *order    // nil: first come, first served
	// Async scheduling (EngineConfig.AsyncScheduling): n numbers
	// the planned steps; inFlight is set from Plan to Commit, and ahead
	// when the step in flight leaves work for the next, which vLLM has
	// then already scheduled.
	n               int
	inFlight, ahead bool
}

// NewEngine returns an idle engine for a deployment.
func NewEngine(d *Deployment) *Engine {
	return &Engine{d: d, kv: newKVCache(d.KVBlocks)}
}

// EnablePinning turns prompt-cache pinning on: at most maxBlocks pinned in
// all and tenantBlocks per tenant, lifetimes on the now clock. Soft pins
// yield their unused blocks to allocations once nothing else is free.
func (e *Engine) EnablePinning(maxBlocks, tenantBlocks int, now func() time.Duration, soft bool) {
	e.kv.enablePins(maxBlocks, tenantBlocks, now, soft)
}

// EnableHostTier gives the engine a host-memory KV tier of blocks blocks
// (host.go); pins in it end on the now clock.
func (e *Engine) EnableHostTier(blocks int, now func() time.Duration) {
	e.host = newHostTier(blocks, now)
	e.kv.host = e.host
}

// HostStats are the host tier's counters: blocks held, of them pinned,
// blocks written, read back and dropped; zero without a tier.
func (e *Engine) HostStats() (held, pinned int, stores, loads, evictions uint64) {
	if t := e.host; t != nil {
		return len(t.c.byHash), t.pinned(), t.stores, t.loads, t.evictions
	}
	return 0, 0, 0, 0, 0
}

// PinStats are the engine's pinning counters: blocks pinned now, prefix
// hits on pinned blocks, pins that ran out, blocks a cap refused.
func (e *Engine) PinStats() (pinned int, hits, expiries, refused uint64) {
	if p := e.kv.pin; p != nil {
		return p.total, p.hits, p.expiries, p.refused
	}
	return 0, 0, 0, 0
}

// Deployment is the engine's physics.
func (e *Engine) Deployment() *Deployment { return e.d }

// Add queues a sequence, or rejects it (ErrTooLong).
func (e *Engine) Add(s *Seq) error {
	if s.Prompt < 1 || s.MaxOutput < 1 {
		return fmt.Errorf("sim: prompt %d and max output %d must be ≥ 1", s.Prompt, s.MaxOutput)
	}
	if s.Prompt+s.MaxOutput > e.d.MaxModelLen {
		return ErrTooLong
	}
	if s.Imported && !s.admitted {
		if s.MaxOutput < 2 {
			return fmt.Errorf("sim: an imported sequence must decode past its first token (max output %d)", s.MaxOutput)
		}
		s.generated = 1
	}
	if e.order != nil && !s.queued {
		s.queued, s.enq = true, e.order.now()
	}
	s.notBefore = e.n + 1
	if e.inFlight && e.ahead && e.d.Engine.AsyncScheduling {
		s.notBefore = e.n + 2
	}
	e.waiting = append(e.waiting, s)
	return nil
}

// eligible reports whether the step being planned (e.n+1) may admit s;
// all reports that nothing else is in it, when vLLM's next step would
// be the first to see s anyway.
func (e *Engine) eligible(s *Seq, all bool) bool { return all || s.notBefore <= e.n+1 }

// Abort drops a sequence (the client went away) and frees its blocks.
func (e *Engine) Abort(s *Seq) {
	s.aborted = true
	if s.step == 0 {
		e.drop(s)
	}
}

func (e *Engine) drop(s *Seq) {
	if i := slices.Index(e.waiting, s); i >= 0 {
		e.waiting = slices.Delete(e.waiting, i, i+1)
	}
	if i := slices.Index(e.running, s); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
	e.kv.release(s.blocks)
	s.blocks = nil
}

// Running and Waiting are the scheduler's queues' lengths.
func (e *Engine) Running() int { return len(e.running) }

// Waiting is how many sequences wait for their first (or, after a
// preemption, their next) step.
func (e *Engine) Waiting() int { return len(e.waiting) }

// KVUsage is the fraction of KV blocks in use.
func (e *Engine) KVUsage() float64 { return e.kv.usage() }

// Stats returns the cumulative counters.
func (e *Engine) Stats() EngineStats { return e.stats }

// CachedPrefixBlocks is the prefix probe: how many leading hashes the
// engine holds, whether in use or evictable. With a host tier, the blocks
// it holds after the GPU's count too: the worker reloads them instead of
// computing.
func (e *Engine) CachedPrefixBlocks(hashes []uint64) int {
	if e.d.Engine.NoPrefixCaching {
		return 0
	}
	n := e.kv.match(hashes)
	if e.host != nil && n < len(hashes) {
		n += e.host.match(hashes[n:])
	}
	return n
}

// Idle reports that no sequence is queued or running.
func (e *Engine) Idle() bool { return len(e.running) == 0 && len(e.waiting) == 0 }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Plan schedules the next step and returns its duration; false when there
// is nothing to do.
func (e *Engine) Plan() (time.Duration, bool) {
	for {
		d, ok := e.plan()
		if ok || e.order == nil || len(e.running) == 0 {
			return d, ok
		}
		// Every running prefill waits for blocks the others hold (in
		// cache-aware order a prefill chunk takes only free blocks): give
		// up the newest so the rest can move, as the running loop would.
		e.preempt(e.running[len(e.running)-1])
	}
}

func (e *Engine) plan() (time.Duration, bool) {
	bs, budget := e.d.Engine.BlockSize, e.d.Engine.MaxBatchedTokens
	e.planned = e.planned[:0]
	e.kv.expire()
	var shape StepShape
	preempted := false
	var partial []*Seq
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if e.order != nil && s.numTokens()-s.computed > 1 {
			partial = append(partial, s) // its chunk takes its turn in the order
			continue
		}
		n := min(s.numTokens()-s.computed, budget)
		need := ceilDiv(s.computed+n, bs) - len(s.blocks)
		for need > e.kv.free() && s != nil {
			v := e.running[len(e.running)-1]
			e.preempt(v)
			preempted = true
			if v == s {
				s = nil
			}
		}
		if s == nil {
			break
		}
		for range need {
			s.blocks = append(s.blocks, e.kv.alloc())
		}
		e.add(s, n, &shape, &budget)
	}
	if e.order != nil {
		e.planOrdered(partial, preempted, &budget, &shape)
	} else {
		all := len(e.planned) == 0
		for !preempted && len(e.waiting) > 0 && len(e.running) < e.d.Engine.MaxNumSeqs && budget > 0 && e.eligible(e.waiting[0], all) {
			if !e.admit(e.waiting[0], &budget, &shape) {
				break
			}
			e.waiting = e.waiting[1:]
		}
	}
	if len(e.planned) == 0 {
		return 0, false
	}
	e.n++
	e.inFlight, e.ahead = true, len(e.waiting) > 0 || len(e.running) > len(e.planned)
	for _, s := range e.planned {
		e.ahead = e.ahead || s.computed+s.step < s.numTokens() || s.generated+1 < s.MaxOutput
	}
	e.last = e.d.StepTime(shape)
	return e.last, true
}

// add plans n tokens of s in the step.
func (e *Engine) add(s *Seq, n int, shape *StepShape, budget *int) {
	s.step = n
	*budget -= n
	e.planned = append(e.planned, s)
	c := s.computed
	shape.Tokens += n
	shape.AttnPairs += float64(n)*float64(c) + float64(n)*float64(n+1)/2
	shape.KVRead += c
	if c+n == s.numTokens() {
		shape.Sampled++
	}
}

// cached is how many of s's leading blocks the GPU cache holds (hit) and,
// after them, the host tier (load); at least one token is left to compute,
// so the step samples.
func (e *Engine) cached(s *Seq) (hit, load int) {
	limit := (s.numTokens() - 1) / e.d.Engine.BlockSize
	if e.d.Engine.NoPrefixCaching {
		limit = 0
	}
	hit = min(e.kv.match(s.Hashes), limit)
	if e.host != nil && hit < limit {
		load = min(e.host.match(s.Hashes[hit:]), limit-hit)
	}
	return hit, load
}

// admit starts the waiting s with its first chunk, reusing its cached
// prefix (reloading the host tier's part of it), or reports that the
// blocks are not there. The caller takes s off the waiting queue.
func (e *Engine) admit(s *Seq, budget *int, shape *StepShape) bool {
	bs := e.d.Engine.BlockSize
	if s.Imported && !s.admitted {
		// Its KV comes with it: blocks for the prompt and the first token.
		need := ceilDiv(s.numTokens(), bs)
		if need > e.kv.free() {
			return false
		}
		for range need {
			s.blocks = append(s.blocks, e.kv.alloc())
		}
		s.computed, s.hashed, s.admitted = s.Prompt, 0, true
		e.running = append(e.running, s)
		e.add(s, s.numTokens()-s.computed, shape, budget)
		return true
	}
	hit, load := e.cached(s)
	have := (hit + load) * bs
	n := min(s.numTokens()-have, *budget)
	need := ceilDiv(have+n, bs) - hit
	freeHits := 0
	for _, h := range s.Hashes[:hit] {
		if e.kv.idle(e.kv.byHash[h]) {
			freeHits++
		}
	}
	if need+freeHits > e.kv.free() {
		return false
	}
	for _, h := range s.Hashes[:hit] {
		s.blocks = append(s.blocks, e.kv.take(h))
	}
	if load > 0 {
		// Read back before the allocations below evict into the tier.
		e.host.load(s.Hashes[hit : hit+load])
		shape.HostLoad += load * bs
	}
	for range need {
		s.blocks = append(s.blocks, e.kv.alloc())
	}
	s.computed, s.hashed = have, hit
	if !s.admitted {
		s.admitted = true
		s.CachedTokens = min(have, s.Prompt)
		s.HostTokens = min(load*bs, s.CachedTokens)
		e.stats.PromptTokens += uint64(s.Prompt)
		e.stats.CachedTokens += uint64(s.CachedTokens)
		e.stats.HostTokens += uint64(s.HostTokens)
	}
	e.running = append(e.running, s)
	e.add(s, n, shape, budget)
	return true
}

// preempt frees v's blocks and puts it first in the waiting queue, to be
// recomputed (prompt and generated tokens) when there is room.
func (e *Engine) preempt(v *Seq) {
	e.running = e.running[:len(e.running)-1]
	e.kv.release(v.blocks)
	v.blocks, v.computed, v.hashed, v.step = nil, 0, 0, 0
	v.Preemptions++
	e.stats.Preemptions++
	e.waiting = slices.Insert(e.waiting, 0, v)
}

// Commit applies the planned step: emit is called for every sequence that
// sampled a token, with finished set on its last one (the engine has then
// released it).
func (e *Engine) Commit(emit func(s *Seq, finished bool)) {
	bs := e.d.Engine.BlockSize
	e.inFlight = false
	e.stats.Steps++
	e.stats.Busy += e.last
	done := 0
	for _, s := range e.planned {
		s.computed += s.step
		s.step = 0
		if s.aborted {
			e.drop(s)
			continue
		}
		for full := min(s.computed/bs, len(s.Hashes)); s.hashed < full && !e.d.Engine.NoPrefixCaching; s.hashed++ {
			e.kv.register(s.blocks[s.hashed], s.Hashes[s.hashed])
		}
		if s.PinBlocks > 0 && !s.pinDone && s.hashed >= min(s.PinBlocks, len(s.Hashes)) {
			s.pinDone = true
			s.WrittenBlocks = e.kv.pinPrefix(s.Tenant, s.Hashes[:min(s.PinBlocks, len(s.Hashes))], s.PinTTL)
		}
		if s.computed < s.numTokens() {
			continue // a prefill chunk that is not the last
		}
		s.generated++
		e.stats.OutputTokens++
		fin := s.generated >= s.MaxOutput
		if fin {
			e.kv.release(s.blocks)
			s.blocks = nil
			s.aborted = true // marks it for removal below
			done++
		}
		emit(s, fin)
	}
	if done > 0 {
		e.running = slices.DeleteFunc(e.running, func(s *Seq) bool { return s.aborted })
	}
	e.planned = e.planned[:0]
}

// Fail is the engine's server dying (an Outage): every sequence it holds,
// waiting or running, is dropped and returned, and its KV cache (prefix
// cache, pins, host tier) starts empty, as a restarted server's does; the
// counters carry on. A step in flight is lost: the driver must not Commit
// it.
func (e *Engine) Fail() []*Seq {
	lost := append(slices.Clone(e.running), e.waiting...)
	for _, s := range lost {
		s.blocks, s.step = nil, 0
	}
	e.running, e.waiting, e.planned, e.inFlight = nil, nil, e.planned[:0], false
	kv := newKVCache(e.d.KVBlocks)
	if p := e.kv.pin; p != nil {
		kv.enablePins(p.max, p.tenant, p.now, p.soft)
		kv.pin.hits, kv.pin.expiries, kv.pin.refused, kv.pin.evicted = p.hits, p.expiries, p.refused, p.evicted
	}
	if t := e.host; t != nil {
		e.host = newHostTier(t.c.blocks(), t.now)
		e.host.stores, e.host.loads, e.host.evictions = t.stores, t.loads, t.evictions
		kv.host = e.host
	}
	e.kv = kv
	return lost
}

// check verifies the KV cache against the sequences' block tables.
func (e *Engine) check() error {
	refs := map[int32]int32{}
	for _, q := range [][]*Seq{e.running, e.waiting} {
		for _, s := range q {
			for _, b := range s.blocks {
				refs[b]++
			}
		}
	}
	if n := len(e.running); n > e.d.Engine.MaxNumSeqs {
		return fmt.Errorf("%d running, limit %d", n, e.d.Engine.MaxNumSeqs)
	}
	if e.host != nil {
		if err := e.host.c.check(nil); err != nil {
			return fmt.Errorf("host tier: %w", err)
		}
	}
	return e.kv.check(refs)
}
