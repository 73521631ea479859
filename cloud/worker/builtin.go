package worker

import (
	"context"
	"slices"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// Builtin is the in-process engine: requests join its continuous batch
// directly and its counters are read without a network hop.
type Builtin struct {
	eng      *lm.Engine
	handoffs *HandoffStore // where handoffs for requests naming one wait; nil: none
}

// NewBuiltin wraps an engine; the Builtin owns it and closes it.
func NewBuiltin(e *lm.Engine) *Builtin { return &Builtin{eng: e} }

// NewBuiltinWithHandoffs is NewBuiltin for a process that serves as another
// coordinator's decode worker: a request naming a KV handoff
// (llm.Request.KVHandoff) resumes the handoff parked in s.
func NewBuiltinWithHandoffs(e *lm.Engine, s *HandoffStore) *Builtin {
	return &Builtin{eng: e, handoffs: s}
}

// LM returns the wrapped engine.
func (b *Builtin) LM() *lm.Engine { return b.eng }

// Generate implements llm.Generator. Cancelling ctx frees the engine's
// sequence and KV blocks (lm.Engine.Generate). A Prompt in ctx
// (WithPrompt) runs as it is.
func (b *Builtin) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.KVHandoff != "" {
		if b.handoffs == nil {
			return llm.Final{}, llm.Errorf(llm.CodeInvalid, "this worker holds no kv handoffs")
		}
		h, ok := b.handoffs.Take(req.KVHandoff)
		if !ok {
			return llm.Final{}, llm.Errorf(llm.CodeInvalid, "kv handoff %q is unknown or expired", req.KVHandoff)
		}
		return b.resume(ctx, req, h, emit)
	}
	p, opt, err := b.given(ctx, req)
	switch {
	case err != nil:
		return llm.Final{}, err
	case p == nil:
		return b.eng.Generate(ctx, req, emit)
	}
	return b.eng.GenerateTokens(ctx, p.IDs, opt, emit)
}

// resume continues handoff h of req's prompt on this engine.
func (b *Builtin) resume(ctx context.Context, req *llm.Request, h *lm.Handoff, emit llm.Emit) (llm.Final, error) {
	p, opt, err := b.given(ctx, req)
	switch {
	case err != nil:
		return llm.Final{}, err
	case p == nil:
		return b.eng.ResumeChat(ctx, req, h, emit)
	case !slices.Equal(p.IDs, h.Prompt):
		// As ResumeChat refuses it: a handoff is not attached to another
		// request.
		return llm.Final{}, llm.Errorf(llm.CodeInvalid, "kv handoff of a %d-token prompt does not match this request's %d-token prompt", len(h.Prompt), len(p.IDs))
	}
	return b.eng.Resume(ctx, h, opt, emit)
}

// PrefillTo implements Splitter: the prefill runs in this engine's batch,
// then the handoff passes in memory to a built-in dst or is POSTed to a
// remote one.
func (b *Builtin) PrefillTo(ctx context.Context, req *llm.Request, dst Engine) (Handoff, error) {
	h, out, err := b.prefill(ctx, req)
	if err != nil {
		return Handoff{}, err
	}
	start := time.Now()
	switch d := dst.(type) {
	case *Builtin:
		if fp := d.eng.Model().Fingerprint(); fp != h.Model {
			return Handoff{}, stageErr(StageTransfer, llm.Errorf(llm.CodeInvalid, "decode engine runs model %016x, the prefill ran %016x", fp, h.Model))
		}
		out.local = h
	case *Remote:
		raw, err := h.MarshalBinary()
		if err != nil {
			return Handoff{}, stageErr(StageTransfer, err)
		}
		if out.id, err = d.park(ctx, raw); err != nil {
			return Handoff{}, stageErr(StageTransfer, err)
		}
		out.Bytes = int64(len(raw))
	default:
		return Handoff{}, stageErr(StageTransfer, ErrSplitUnsupported)
	}
	out.Transfer = time.Since(start)
	return out, nil
}

// prefill runs req's prefill and describes the handoff it made.
func (b *Builtin) prefill(ctx context.Context, req *llm.Request) (*lm.Handoff, Handoff, error) {
	start := time.Now()
	var (
		h   *lm.Handoff
		fin llm.Final
	)
	p, opt, err := b.given(ctx, req)
	switch {
	case err != nil:
	case p == nil:
		h, fin, err = b.eng.PrefillChat(ctx, req)
	default:
		h, fin, err = b.eng.Prefill(ctx, p.IDs, opt)
	}
	if err != nil {
		return nil, Handoff{}, stageErr(StagePrefill, err)
	}
	return h, Handoff{
		Bytes: int64(h.EncodedSize()), PromptTokens: fin.PromptTokens, PrefixHitTokens: fin.PrefixHitTokens,
		Prefill: time.Since(start),
	}, nil
}

// Resume implements Splitter for a handoff delivered in memory.
func (b *Builtin) Resume(ctx context.Context, req *llm.Request, h Handoff, emit llm.Emit) (llm.Final, error) {
	if h.local == nil {
		return llm.Final{}, stageErr(StageResume, llm.Errorf(llm.CodeInvalid, "the kv handoff was not delivered to this engine"))
	}
	fin, err := b.resume(ctx, req, h.local, emit)
	if err != nil {
		return fin, stageErr(StageResume, err)
	}
	return fin, nil
}

// Probe implements Engine from the engine's counters.
func (b *Builtin) Probe(context.Context) (Load, error) {
	s := b.eng.Stats()
	l := Load{
		Running:         s.Running,
		Waiting:         s.Waiting,
		Capacity:        b.eng.Config().MaxBatch,
		KVFaultsPerMs:   s.KVFaultsPerMs,
		PrefixHitTokens: s.PrefixHitTokens,
		PromptTokens:    s.PrefillTokens + s.PrefixHitTokens,
	}
	if s.KVBlocksTotal > 0 {
		l.KVUsage = float64(s.KVBlocksUsed) / float64(s.KVBlocksTotal)
	}
	return l, nil
}

// CachedPrefixBlocks implements Engine from the engine's own block table.
func (b *Builtin) CachedPrefixBlocks(hashes []uint64) int { return b.eng.CachedPrefixBlocks(hashes) }

// Close implements Engine.
func (b *Builtin) Close() error { return b.eng.Close() }
