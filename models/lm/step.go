package lm

import (
	"slices"
	"strings"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// stepBuffers are reused by every step so the loop does not allocate per token.
type stepBuffers struct {
	b      batch
	work   []planned
	logits []float32
	slots  [][]int32
	choice choiceBuffers
}

// planned is one sequence's share of a step: n tokens from s.computed on.
type planned struct {
	s *sequence
	n int
}

// loop is the engine's step loop: it owns e.running, the KV store and the
// workspace, and runs until Close.
func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.mu.Lock()
		closed := e.closed
		idle := len(e.waiting) == 0 && len(e.aborts) == 0 && len(e.running) == 0
		e.mu.Unlock()
		if closed {
			e.shutdown()
			return
		}
		if idle || !e.step() {
			<-e.wake // new work, an abort, a consumer catching up, or Close
		}
	}
}

func (e *Engine) shutdown() {
	e.mu.Lock()
	all := append(append(e.running, e.waiting...), e.aborts...)
	e.running, e.waiting, e.aborts = nil, nil, nil
	e.mu.Unlock()
	for _, s := range all {
		if s.ended {
			continue
		}
		e.releaseBlocks(s)
		s.ended = true
		s.finish(s.finalInfo("cancelled"), llm.Errorf(llm.CodeUnavailable, "engine closed"))
	}
}

// step runs one iteration: drop aborted sequences, plan one decode token per
// running sequence plus prompt chunks up to the token budget (admitting
// waiting sequences while blocks allow), run the forward pass for the whole
// batch at once, then sample and stream. It reports whether it did anything;
// when not, every running sequence waits for its consumer.
func (e *Engine) step() bool {
	e.mu.Lock()
	aborts := e.aborts
	e.aborts = nil
	for _, s := range aborts {
		e.waiting = slices.DeleteFunc(e.waiting, func(w *sequence) bool { return w == s })
	}
	e.mu.Unlock()
	for _, s := range aborts {
		if s.ended {
			continue
		}
		e.running = slices.DeleteFunc(e.running, func(r *sequence) bool { return r == s })
		e.complete(s, "cancelled")
	}

	sb := &e.stepBuf
	work := sb.work[:0]
	budget := e.cfg.StepTokens
	preempted := false
	paused := 0
	// Decode tokens first: a generating sequence never waits behind prompts.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if len(s.tokens)-s.computed != 1 {
			continue
		}
		if s.backlogged() {
			paused++
			continue
		}
		if e.reserve(s, 1, i, &preempted) == 1 {
			work = append(work, planned{s, 1})
			budget--
		}
	}
	if e.cfg.AgingRate > 0 {
		work, budget = e.orderedPrompts(work, budget, preempted)
	}
	// Then prompt chunks of sequences admitted earlier.
	for i := 0; i < len(e.running) && budget > 0 && e.cfg.AgingRate == 0; i++ {
		s := e.running[i]
		want := len(s.tokens) - s.computed
		if want <= 1 {
			continue
		}
		if n := e.reserve(s, min(want, budget), -1, nil); n > 0 {
			work = append(work, planned{s, n})
			budget -= n
		}
	}
	// Then new sequences, unless this step had to preempt (admitting now would
	// only thrash).
	for !preempted && budget > 0 && len(e.running) < e.cfg.MaxBatch && e.cfg.AgingRate == 0 {
		e.mu.Lock()
		if len(e.waiting) == 0 {
			e.mu.Unlock()
			break
		}
		s := e.waiting[0]
		e.mu.Unlock()
		var ok bool
		if s.imported != nil {
			ok = e.admitImported(s, e.cfg.Now())
		} else {
			ok = e.admit(s)
		}
		if !ok {
			break
		}
		e.mu.Lock()
		e.waiting = e.waiting[1:]
		e.mu.Unlock()
		if s.ended { // a handed-off first token that was also its last
			continue
		}
		e.running = append(e.running, s)
		if n := e.reserve(s, min(len(s.tokens)-s.computed, budget), -1, nil); n > 0 {
			work = append(work, planned{s, n})
			budget -= n
		}
	}
	if len(work) == 0 {
		if paused > 0 && !preempted {
			return len(aborts) > 0
		}
		// Every running sequence is stuck on blocks held by the others (all
		// mid-prompt): give up the newest one so the rest can move.
		if len(e.running) > 0 {
			e.preempt(len(e.running) - 1)
		}
		e.recordStep(0, 0)
		return true
	}
	sb.work = work
	e.runBatch(work)
	return true
}

// admit tries to start s: it takes cached prefix blocks, and refuses (leaving
// s waiting) when the blocks its whole prompt needs are not available, so an
// admitted prompt does not stall halfway for lack of memory.
func (e *Engine) admit(s *sequence) bool {
	bs := e.cfg.BlockSize
	hashes := e.tokenHashes(s)
	hits, hostHits := e.cachedPrefix(hashes)
	need := (len(s.tokens)+bs)/bs - hits // blocks up to and including the first generated token
	if (hits+hostHits)*bs >= len(s.tokens) {
		need++ // the last prompt token is recomputed into a copy of a shared block
	}
	if need > e.alloc.Available() {
		return false
	}
	s.blocks = e.alloc.Acquire(hashes[:hits])
	s.hashes = append(s.hashes[:0], hashes[:len(s.blocks)]...)
	if hostHits > 0 && len(s.blocks) == hits {
		e.reload(s, hashes[hits:hits+hostHits])
	}
	// The last token always runs, even on a full hit: its logits are needed.
	s.computed = min(len(s.blocks)*bs, len(s.tokens)-1)
	if s.prefixHit < 0 {
		s.prefixHit = min(s.computed, s.promptLen)
		if e.host != nil {
			e.host.hitTokens.Add(uint64(max(0, s.prefixHit-hits*bs))) // s.blocks past hits were reloaded
		}
		e.mu.Lock()
		e.stats.PrefixHitTokens += uint64(s.prefixHit)
		e.mu.Unlock()
	}
	return true
}

// reload continues s's cached prefix with the host tier's blocks for
// hashes: each is copied into a fresh block of the cache and registered
// there as the prefix block it is. The tier's blocks are held meanwhile,
// as the allocations may evict other blocks into the tier. It stops early
// when the cache has no block left (the rest is recomputed).
func (e *Engine) reload(s *sequence, hashes []uint64) {
	from := e.host.take(hashes)
	defer e.host.give(from)
	for i, b := range from {
		id, _, ok := e.alloc.Allocate()
		if !ok {
			return
		}
		e.host.load(e.kv, id, b)
		e.alloc.Register(id, hashes[i])
		s.blocks = append(s.blocks, id)
		s.hashes = append(s.hashes, hashes[i])
	}
}

// reserve makes positions s.computed … s.computed+n-1 writable for s:
// allocating blocks as the sequence grows and copying shared blocks before
// writing into them (copy-on-write). With idx ≥ 0 (s is e.running[idx]) it
// may preempt sequences after idx, or s itself, to find a block. It returns
// how many positions it secured.
func (e *Engine) reserve(s *sequence, n, idx int, preempted *bool) int {
	bs := e.cfg.BlockSize
	for p := s.computed; p < s.computed+n; p++ {
		bi := p / bs
		switch {
		case bi == len(s.blocks):
			id, ok := e.allocate(s, idx, preempted)
			if !ok {
				return p - s.computed
			}
			s.blocks = append(s.blocks, id)
		case p == s.computed || p%bs == 0:
			old := s.blocks[bi]
			if !e.alloc.Shared(old) {
				continue
			}
			id, ok := e.allocate(s, idx, preempted)
			if !ok {
				return p - s.computed
			}
			e.kv.copyFrom(e.kv, int(id)*bs, int(old)*bs, p%bs)
			e.alloc.Release(old)
			s.blocks[bi] = id
			s.hashes = s.hashes[:min(len(s.hashes), bi)]
			e.mu.Lock()
			e.stats.CopyOnWrites++
			e.mu.Unlock()
		}
	}
	return n
}

// allocate gets a block, preempting the newest running sequences after idx
// (then s itself) when idx ≥ 0 and the cache is full.
func (e *Engine) allocate(s *sequence, idx int, preempted *bool) (int32, bool) {
	for {
		if id, _, ok := e.alloc.Allocate(); ok {
			return id, true
		}
		if idx < 0 || s.computed == 0 && len(s.blocks) == 0 {
			return -1, false
		}
		victim := len(e.running) - 1
		*preempted = true
		e.preempt(victim)
		if victim == idx {
			return -1, false // s itself went back to the queue
		}
	}
}

// preempt frees e.running[i]'s blocks and puts it back at the head of the
// queue; it will recompute its tokens (its full blocks stay cached, so often
// it only recomputes what was evicted meanwhile).
func (e *Engine) preempt(i int) {
	s := e.running[i]
	e.running = slices.Delete(e.running, i, i+1)
	e.releaseBlocks(s)
	s.computed = 0
	s.preempted = true
	e.mu.Lock()
	e.waiting = slices.Insert(e.waiting, 0, s)
	e.stats.Preemptions++
	e.mu.Unlock()
}

// releaseBlocks drops s's hold on its blocks, the last first, as vLLM frees
// them: the LRU list then evicts a sequence's tail before its head, so what
// stays cached of it is a prefix (what another prompt can reuse), and what
// the host tier receives continues that prefix.
func (e *Engine) releaseBlocks(s *sequence) {
	for _, b := range slices.Backward(s.blocks) {
		e.alloc.Release(b)
	}
	s.blocks, s.hashes = s.blocks[:0], s.hashes[:0]
}

// runBatch runs the planned work as one forward pass and handles its results.
func (e *Engine) runBatch(work []planned) {
	bs := e.cfg.BlockSize
	sb := &e.stepBuf
	b := &sb.b
	b.reset()
	for k, w := range work {
		s := w.s
		end := s.computed + w.n
		if len(sb.slots) <= k {
			sb.slots = append(sb.slots, nil)
		}
		sl := sb.slots[k][:0]
		for p := 0; p < end; p++ {
			sl = append(sl, s.blocks[p/bs]*int32(bs)+int32(p%bs))
		}
		sb.slots[k] = sl
		b.slots = append(b.slots, sl)
		for p := s.computed; p < end; p++ {
			b.tokens = append(b.tokens, s.tokens[p])
			b.pos = append(b.pos, int32(p))
			b.seq = append(b.seq, int32(k))
		}
		if end == len(s.tokens) {
			b.logits = append(b.logits, int32(len(b.tokens)-1))
		}
	}
	vocab := e.m.Config.Vocab
	if need := len(b.logits) * vocab; cap(sb.logits) < need {
		sb.logits = make([]float32, need)
	}
	e.m.forward(e.ws, b, e.kv, sb.logits)
	now := e.cfg.Now()

	var prefill, decode, li int
	var choices []*choiceJob
	for _, w := range work {
		s := w.s
		if w.n == 1 && s.generated() > 0 {
			decode++
		} else {
			prefill += w.n
		}
		s.computed += w.n
		e.registerBlocks(s)
		if s.computed < len(s.tokens) {
			continue
		}
		logits := sb.logits[li*vocab : (li+1)*vocab]
		li++
		if s.constraint != nil && !s.export && !e.cfg.ByteChoices {
			if j := e.choiceJob(s, logits); j != nil {
				choices = append(choices, j) // decided together below (constraint_choice.go)
				continue
			}
		}
		e.sampleNext(s, logits, now)
	}
	if len(choices) > 0 {
		e.decideChoices(choices, now)
	}
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.ended })
	e.recordStep(prefill, decode)
}

// sampleNext samples s's next token from logits and advances s past it.
func (e *Engine) sampleNext(s *sequence, logits []float32, now time.Time) {
	e.sampleNextWith(s, logits, now, s.sampler.sample)
}

// greedyDraw is the argmax of logits, for sampleNextWith.
func greedyDraw(logits []float32) int32 { return int32(argmax(logits)) }

// sampleNextWith is sampleNext drawing with draw.
func (e *Engine) sampleNextWith(s *sequence, logits []float32, now time.Time, draw func([]float32) int32) {
	tok := int32(0)
	if s.constraint == nil {
		tok = draw(logits)
	} else {
		var ok bool
		if tok, ok = s.constraint.Sample(draw, logits, s.stopInside); !ok {
			// Nothing may follow. A complete document stops; an unfinished
			// one the vocabulary cannot continue is cut, as at max_tokens,
			// never reported as a finished reply.
			reason := "stop"
			if !s.constraint.State.Accepting() {
				reason = "length"
			}
			e.complete(s, reason)
			return
		}
	}
	if s.export {
		e.exportSequence(s, tok)
		return
	}
	e.advance(s, tok, now)
}

// registerBlocks registers s's newly full blocks as reusable prefix blocks
// under their chained hashes.
func (e *Engine) registerBlocks(s *sequence) {
	bs := e.cfg.BlockSize
	for bi := len(s.hashes); (bi+1)*bs <= s.computed; bi++ {
		parent := uint64(kvcache.RootHash)
		if bi > 0 {
			parent = s.hashes[bi-1]
		}
		h := kvcache.NextHash(parent, bi, s.tokens[bi*bs:(bi+1)*bs])
		e.alloc.Register(s.blocks[bi], h)
		s.hashes = append(s.hashes, h)
	}
	if len(s.pins) > 0 {
		e.pinComputed(s)
	}
}

// advance appends a sampled token to s, streams its text and ends s when it
// is done.
func (e *Engine) advance(s *sequence, tok int32, now time.Time) {
	if s.firstTok.IsZero() {
		s.firstTok = now
	}
	latency := now.Sub(s.start)
	if !s.lastTok.IsZero() {
		latency = now.Sub(s.lastTok)
	}
	s.lastTok = now
	s.tokens = append(s.tokens, tok)
	if s.opt.onToken != nil {
		s.opt.onToken()
	}
	if e.m.tok.IsEOG(tok) && !s.opt.IgnoreEOS {
		e.complete(s, "stop")
		return
	}
	text, stopped := s.stop.push(s.decoder.Push(tok), s.stopCounts())
	if text != "" {
		s.emitText(text, tok, latency)
	}
	switch {
	case stopped, s.constraint != nil && s.constraint.State.Done():
		e.complete(s, "stop")
	case s.generated() >= s.opt.MaxTokens || len(s.tokens) >= e.m.Config.ContextLen:
		e.complete(s, "length")
	}
}

// stopCounts reports whether a stop sequence in s's text ends it now.
// Under a grammar only a complete document may be followed by a stop (the
// grammar appends the stops after the value), so a stop's text found
// before the document is done is part of it: the cloud model once ended
// {"city":"ia.C with finish_reason stop because it wrote "<|" inside the
// string.
func (s *sequence) stopCounts() bool {
	return s.constraint == nil || s.constraint.State.Done()
}

// stopInside refuses a token that would write a stop sequence inside the
// unfinished document: a stop means the end of the reply, which under a
// grammar only a complete document may have, so a model that wants to end
// its turn there ("<|" in a JSON string) is made to close what it opened
// instead of filling the string with markers until max_tokens.
func (s *sequence) stopInside(piece []byte, after grammar.State) bool {
	if len(s.stop.stops) == 0 || after.Done() {
		return false
	}
	text := s.stop.held + string(piece)
	for _, st := range s.stop.stops {
		if strings.Contains(text, st) {
			return true
		}
	}
	return false
}

// complete ends s: the text held back for a possible stop sequence or an
// incomplete character goes out (unless a stop was found), its blocks return
// to the cache, and Generate gets the final record.
func (e *Engine) complete(s *sequence, reason string) {
	if reason != "cancelled" {
		tail, stopped := s.stop.push(s.decoder.Flush(), s.stopCounts())
		if !stopped {
			tail += s.stop.flush(reason == "length")
		}
		last := s.tokens[len(s.tokens)-1]
		if tail != "" {
			s.emitText(tail, last, 0)
		}
		if s.tools != nil {
			for _, t := range s.tools.Flush(last) {
				s.push(t)
			}
			if s.tools.Calls() > 0 && reason == "stop" {
				reason = llm.FinishToolCalls
			}
		}
	}
	e.releaseBlocks(s)
	s.ended = true
	if s.opt.onDone != nil {
		s.opt.onDone(slices.Clone(s.tokens[s.promptLen:]))
	}
	e.mu.Lock()
	e.stats.Completed++
	e.stats.Running = e.live()
	e.mu.Unlock()
	s.finish(s.finalInfo(reason), nil)
}

// emitText streams text, through the tool-call parser when the request
// offered tools.
func (s *sequence) emitText(text string, tok int32, latency time.Duration) {
	if s.tools == nil {
		s.push(llm.Token{Text: text, ID: tok, EngineLatency: latency})
		return
	}
	for _, t := range s.tools.Push(text, tok) {
		t.EngineLatency = latency
		s.push(t)
	}
}

func (s *sequence) finalInfo(reason string) llm.Final {
	f := llm.Final{
		PromptTokens:     s.promptLen,
		CompletionTokens: max(0, s.generated()),
		FinishReason:     reason,
		PrefixHitTokens:  max(0, s.prefixHit),
		CacheUsage:       llm.CacheUsage{CacheWriteTokens: min(s.cacheWrite, s.promptLen)},
	}
	if !s.firstTok.IsZero() {
		f.TTFT = s.firstTok.Sub(s.start)
	}
	return f
}

// live is how many running sequences have not ended. A sequence that
// ends mid-step leaves e.running only when the step does; its caller has
// its answer before that, and Stats must not still count it running
// (TestSplitEqualsColocated read Running: 1 after every handoff had
// returned). The engine's goroutine only.
func (e *Engine) live() int {
	n := 0
	for _, s := range e.running {
		if !s.ended {
			n++
		}
	}
	return n
}

func (e *Engine) recordStep(prefill, decode int) {
	now := e.cfg.Now()
	as := e.alloc.Stats()
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.stats
	st.Steps++
	st.PrefillTokens += uint64(prefill)
	st.DecodeTokens += uint64(decode)
	st.LastStepTokens = prefill + decode
	st.Running = len(e.running)
	e.window = append(e.window, stepMark{at: now, faults: as.Evictions + st.Preemptions, tokens: prefill + decode})
	// Keep one mark older than the window as the baseline for rates.
	cut := now.Add(-e.cfg.FaultWindow)
	i := 0
	for i+1 < len(e.window) && e.window[i+1].at.Before(cut) {
		i++
	}
	e.window = slices.Delete(e.window, 0, i)
}
