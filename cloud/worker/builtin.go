package worker

import (
	"context"

	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/llm"
)

// Builtin is the in-process engine: requests join its continuous batch
// directly and its counters are read without a network hop.
type Builtin struct {
	eng *lm.Engine
}

// NewBuiltin wraps an engine; the Builtin owns it and closes it.
func NewBuiltin(e *lm.Engine) *Builtin { return &Builtin{eng: e} }

// LM returns the wrapped engine.
func (b *Builtin) LM() *lm.Engine { return b.eng }

// Generate implements llm.Generator. Cancelling ctx frees the engine's
// sequence and KV blocks (lm.Engine.Generate).
func (b *Builtin) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	return b.eng.Generate(ctx, req, emit)
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
