package lm

import (
	"context"
	"slices"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// Prefill/decode disaggregation: Prefill runs a prompt to its first token on
// this engine and returns the sequence's KV as a Handoff; Resume, on another
// engine of the same model, writes those keys and values into its own paged
// cache and decodes from there. A request split this way produces the
// tokens it would have on one engine: the prompt's keys and values are the
// prefill engine's, bit for bit, the first token is the one that engine
// sampled, and the sampler continues from the same draw.

// Prefill runs prompt's prefill (in chunks, batched with whatever else the
// engine runs), samples the first token with opt's settings and returns the
// handoff; it emits nothing. The prompt's full blocks stay in this engine's
// prefix cache. Final reports the prompt and prefix-hit tokens.
func (e *Engine) Prefill(ctx context.Context, prompt []int32, opt GenOptions) (*Handoff, llm.Final, error) {
	s, err := e.newSequence(prompt, opt)
	if err != nil {
		return nil, llm.Final{}, err
	}
	s.export = true
	fin, err := e.run(ctx, s, nil)
	if err != nil {
		return nil, fin, err
	}
	return s.handoff, fin, nil
}

// PrefillChat is Prefill for a chat request, rendered as Generate renders it.
func (e *Engine) PrefillChat(ctx context.Context, req *llm.Request) (*Handoff, llm.Final, error) {
	prompt, opt, err := e.chatRequest(req)
	if err != nil {
		return nil, llm.Final{}, err
	}
	return e.Prefill(ctx, prompt, opt)
}

// Resume continues the sequence h describes: h.Next is its first generated
// token (streamed first), and generation goes on as GenerateTokens would have
// after it. opt must be the options the prefill ran with (the sampler is
// rebuilt from h.Seed and h.Draws). A handoff from another model, of other
// shapes, or that does not fit this engine's context is refused as invalid.
func (e *Engine) Resume(ctx context.Context, h *Handoff, opt GenOptions, emit llm.Emit) (llm.Final, error) {
	if err := e.accepts(h); err != nil {
		return llm.Final{}, err
	}
	opt.Seed = h.Seed
	s, err := e.newSequence(h.Prompt, opt)
	if err != nil {
		return llm.Final{}, err
	}
	s.sampler.skip(h.Draws)
	s.imported = h
	return e.run(ctx, s, emit)
}

// ResumeChat is Resume for a chat request: h must be the handoff of this
// request's prompt, so a handoff cannot be attached to another request.
func (e *Engine) ResumeChat(ctx context.Context, req *llm.Request, h *Handoff, emit llm.Emit) (llm.Final, error) {
	prompt, opt, err := e.chatRequest(req)
	if err != nil {
		return llm.Final{}, err
	}
	if !slices.Equal(prompt, h.Prompt) {
		return llm.Final{}, llm.Errorf(llm.CodeInvalid, "kv handoff of a %d-token prompt does not match this request's %d-token prompt", len(h.Prompt), len(prompt))
	}
	return e.Resume(ctx, h, opt, emit)
}

// accepts checks a handoff against this engine's model.
func (e *Engine) accepts(h *Handoff) error {
	cfg := e.m.Config
	switch {
	case h == nil:
		return llm.Errorf(llm.CodeInvalid, "no kv handoff")
	case h.Model != e.m.Fingerprint():
		return llm.Errorf(llm.CodeInvalid, "kv handoff from model %016x; this engine runs %016x", h.Model, e.m.Fingerprint())
	case h.check() != nil:
		return llm.Errorf(llm.CodeInvalid, "%v", h.check())
	case h.Layers != cfg.Layers || h.KVDim != cfg.KVHeads*cfg.HeadDim():
		return llm.Errorf(llm.CodeInvalid, "kv handoff of %d layers × %d, this model has %d × %d", h.Layers, h.KVDim, cfg.Layers, cfg.KVHeads*cfg.HeadDim())
	case h.Next < 0 || int(h.Next) >= cfg.Vocab:
		return llm.Errorf(llm.CodeInvalid, "kv handoff's next token %d is outside the vocabulary", h.Next)
	}
	return nil
}

// exportSequence ends a Prefill sequence whose prompt has just run: it
// copies the prompt's keys and values out of the paged cache, a block's
// run of slots at a time, with the token sampled from the last position.
func (e *Engine) exportSequence(s *sequence, next int32) {
	h := e.readKV(s.blocks, s.tokens[:s.promptLen])
	h.Next, h.Seed, h.Draws = next, s.seed, s.sampler.draws
	s.handoff = h
	s.firstTok = e.cfg.Now()
	e.releaseBlocks(s)
	s.ended = true
	e.mu.Lock()
	e.stats.HandoffsOut++
	e.stats.Completed++
	e.stats.Running = e.live()
	e.mu.Unlock()
	s.finish(s.finalInfo("prefill"), nil)
}

// admitImported starts a Resume sequence: it takes the blocks of the prompt's
// prefix this engine already caches, writes the handoff's keys and values
// into fresh blocks for the rest, registers the full blocks as prefix cache,
// and streams the handed-off first token. It refuses (s keeps waiting) while
// the blocks are not available.
func (e *Engine) admitImported(s *sequence, now time.Time) bool {
	h := s.imported
	bs, n := e.cfg.BlockSize, len(s.tokens)
	hashes := kvcache.BlockHashes(s.tokens, bs)
	hits := e.alloc.Probe(hashes)
	// Blocks for every prompt position and the first generated token's.
	if need := (n+bs)/bs - hits; need > e.alloc.Available() {
		return false
	}
	s.blocks = e.alloc.Acquire(hashes[:hits])
	s.hashes = append(s.hashes[:0], hashes[:len(s.blocks)]...)
	s.computed = len(s.blocks) * bs
	if got := e.reserve(s, n-s.computed, -1, nil); got != n-s.computed {
		e.releaseBlocks(s) // raced with nothing (the step loop is alone): defensive
		s.computed = 0
		return false
	}
	e.writeKV(s.blocks, h, s.computed, n)
	s.prefixHit = min(s.computed, n)
	s.computed = n
	e.registerBlocks(s)
	s.imported = nil
	e.mu.Lock()
	e.stats.HandoffsIn++
	e.stats.PrefixHitTokens += uint64(s.prefixHit)
	e.mu.Unlock()
	if s.constraint != nil && !s.constraint.Accept(h.Next) {
		// The prefill engine sampled outside this request's grammar: it
		// ran another request's options, which ResumeChat rules out.
		e.releaseBlocks(s)
		s.ended = true
		s.finish(s.finalInfo("stop"), llm.Errorf(llm.CodeInvalid, "kv handoff's first token %d is outside the request's grammar", h.Next))
		return true
	}
	e.advance(s, h.Next, now)
	return true
}

// readKV copies the keys and values of the positions of prompt out of the
// paged cache (position p lives in blocks[p/BlockSize]), a block's run of
// slots at a time, into a handoff of this engine's model.
func (e *Engine) readKV(blocks []int32, prompt []int32) *Handoff {
	bs, n, kvDim := e.cfg.BlockSize, len(prompt), e.kv.kvDim
	h := &Handoff{
		Model: e.m.Fingerprint(), Layers: len(e.kv.k), KVDim: kvDim, Prompt: slices.Clone(prompt),
		K: make([][]float32, len(e.kv.k)), V: make([][]float32, len(e.kv.k)),
	}
	for l := range e.kv.k {
		h.K[l], h.V[l] = make([]float32, n*kvDim), make([]float32, n*kvDim)
		for p := 0; p < n; p += bs {
			run := min(bs, n-p)
			src := int(blocks[p/bs]) * bs * kvDim
			copy(h.K[l][p*kvDim:(p+run)*kvDim], e.kv.k[l][src:src+run*kvDim])
			copy(h.V[l][p*kvDim:(p+run)*kvDim], e.kv.v[l][src:src+run*kvDim])
		}
	}
	return h
}

// writeKV copies h's keys and values of positions from … to-1 into the
// paged cache, position p into blocks[p/BlockSize].
func (e *Engine) writeKV(blocks []int32, h *Handoff, from, to int) {
	bs, kvDim := e.cfg.BlockSize, e.kv.kvDim
	for l := range e.kv.k {
		for p := from; p < to; {
			run := min(bs-p%bs, to-p)
			dst := (int(blocks[p/bs])*bs + p%bs) * kvDim
			copy(e.kv.k[l][dst:dst+run*kvDim], h.K[l][p*kvDim:(p+run)*kvDim])
			copy(e.kv.v[l][dst:dst+run*kvDim], h.V[l][p*kvDim:(p+run)*kvDim])
			p += run
		}
	}
}
