package lm

import (
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// pinPoint is one cache breakpoint in prompt tokens: the first tokens
// prompt positions are pinned for ttl once their blocks are computed.
type pinPoint struct {
	tokens int
	ttl    time.Duration
	done   bool
}

// rendered is a request's conversation as the engine renders it: tool
// turns in text form and, when it offers tools, their definitions in a
// first system turn (toolMessages).
type rendered struct {
	msgs     []llm.Message
	toolEnds []int // bytes of msgs[0].Content up to each tool's end
	shift    int   // turns ahead of req.Messages[0]
	src      []llm.Message
}

func render(req *llm.Request, templated bool) rendered {
	if !req.HasTools() && !hasToolTurns(req.Messages) {
		return rendered{msgs: req.Messages}
	}
	msgs, ends := toolMessages(req, templated)
	r := rendered{msgs: msgs, toolEnds: ends, src: req.Messages}
	if len(ends) > 0 {
		r.shift = 1
	}
	return r
}

// prefix is the conversation whose rendering is bp's cached prefix: the
// tool definitions up to bp's tool, or the turns up to bp's message cut
// after its Chars bytes (a turn's own text comes first in its rendered
// form, so Chars means the same there, except after the words a failed
// tool result begins with: llm.Message.ToolResultChars). nil when bp
// covers nothing that is rendered (tools the request does not offer).
func (r rendered) prefix(bp llm.CacheBreakpoint) []llm.Message {
	if bp.Tools > 0 {
		if bp.Tools > len(r.toolEnds) {
			return nil
		}
		return []llm.Message{{Role: r.msgs[0].Role, Content: r.msgs[0].Content[:r.toolEnds[bp.Tools-1]]}}
	}
	k, chars := bp.Message+r.shift, bp.Chars
	if bp.Message < len(r.src) && r.src[bp.Message].Role == "tool" {
		chars = r.src[bp.Message].ToolResultChars(chars)
	}
	if k >= len(r.msgs) || chars > len(r.msgs[k].Content) {
		return nil
	}
	msgs := append([]llm.Message(nil), r.msgs[:k+1]...)
	msgs[k].Content = msgs[k].Content[:chars]
	return msgs
}

// PromptMessages is req's conversation as an engine renders it, templated
// or with ChatPrompt: what a coordinator tokenizes to predict the engine's
// prefix blocks.
func PromptMessages(req *llm.Request, templated bool) []llm.Message {
	return render(req, templated).msgs
}

// CachePrefix is the conversation whose rendering ends bp's cached prefix
// (nil when nothing of it is rendered): its common leading tokens with the
// whole prompt are what the engine pins.
func CachePrefix(req *llm.Request, bp llm.CacheBreakpoint, templated bool) []llm.Message {
	return render(req, templated).prefix(bp)
}

// pinPoints turns a request's cache breakpoints into prompt positions. A
// breakpoint's prefix is rendered on its own and matched against the whole
// prompt: the common leading tokens are what a later request with the same
// prefix shares. A prefix the chat template refuses to render alone (some
// templates insist on a final user turn) pins nothing.
func (m *Model) pinPoints(req *llm.Request, r rendered, prompt []int32) []pinPoint {
	var out []pinPoint
	for _, bp := range req.CacheBreakpoints {
		msgs := r.prefix(bp)
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
