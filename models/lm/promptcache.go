package lm

import (
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// pinPoint is one cache breakpoint in prompt tokens: the first tokens
// prompt positions are pinned for ttl once their blocks are computed. A
// disk point is instead the chat's stable prefix, whose blocks go to the
// prompt cache on disk (promptdisk.go).
type pinPoint struct {
	tokens int
	ttl    time.Duration
	disk   bool
	done   bool
}

// pinPoints turns a request's cache breakpoints into prompt positions. A
// breakpoint's prefix is rendered on its own and matched against the whole
// prompt: the common leading tokens are what a later request with the same
// prefix shares. A prefix the chat template refuses to render alone (some
// templates insist on a final user turn) pins nothing.
func (m *Model) pinPoints(req *llm.Request, r chatfmt.Rendered, prompt []int32) []pinPoint {
	var out []pinPoint
	for _, bp := range req.CacheBreakpoints {
		msgs := r.Prefix(bp)
		if msgs == nil {
			continue
		}
		ids, err := m.ChatPromptTokens(msgs)
		if err != nil {
			continue
		}
		n := 0
		for n < len(ids) && n < len(prompt) && ids[n] == prompt[n] {
			n++
		}
		out = append(out, pinPoint{tokens: n, ttl: bp.TTL})
	}
	return out
}

// pinComputed pins each of s's breakpoints whose full blocks are now
// computed and registered, and counts the tokens newly pinned as s's cache
// writes. It runs in the step loop after a batch registered its blocks.
func (e *Engine) pinComputed(s *sequence) {
	bs := e.cfg.BlockSize
	for i := range s.pins {
		p := &s.pins[i]
		k := p.tokens / bs
		if p.done || len(s.hashes) < k {
			continue
		}
		p.done = true
		if k == 0 {
			continue
		}
		if p.disk {
			e.persistPrefix(s, k)
			continue
		}
		r := e.alloc.Pin(s.opt.tenant, s.hashes[:k], p.ttl)
		s.cacheWrite += r.Added * bs
		e.mu.Lock()
		e.stats.CacheWriteTokens += uint64(r.Added * bs)
		e.mu.Unlock()
	}
}

// pinConfig sizes the pinned share of n blocks of perBlock bytes: the
// configured bytes, never so many that a full-context sequence (ctxBlocks)
// could not be admitted beside them.
func (c EngineConfig) pinConfig(n, ctxBlocks int, perBlock int64) kvcache.PinConfig {
	total := int(c.PinnedBytes / perBlock)
	if c.PinnedBytes == 0 {
		total = n / 2
	}
	total = max(0, min(total, n-ctxBlocks))
	tenant := total / 2
	if c.PinTenantBytes > 0 {
		tenant = int(c.PinTenantBytes / perBlock)
	}
	return kvcache.PinConfig{MaxBlocks: total, TenantBlocks: max(0, min(tenant, total)), Now: c.Now}
}
