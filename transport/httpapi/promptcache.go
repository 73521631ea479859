package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// cacheControl is Anthropic's cache_control object on a system, message or
// tool block: {"type": "ephemeral", "ttl": "5m" | "1h"}.
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl"`
}

// cachedPart is a content block as far as prompt caching reads it.
type cachedPart struct {
	Type         string        `json:"type"`
	Text         string        `json:"text"`
	CacheControl *cacheControl `json:"cache_control"`
}

// isToolResult says whether p, in a message of role, became a tool turn of
// its own (anthropicMessages: each tool_result of a user message does,
// ahead of the message's text).
func (p cachedPart) isToolResult(role string) bool {
	return p.Type == "tool_result" && role == "user"
}

// cachedBody is the part of either API's body that can carry cache_control.
type cachedBody struct {
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		CacheControl *cacheControl `json:"cache_control"`
	} `json:"tools"`
}

// defaultCacheTTL is a cache_control block's lifetime when it names none and
// no x-cache-ttl header sets one: Anthropic's default, five minutes.
const defaultCacheTTL = 5 * time.Minute

// promptCache turns the body's cache_control blocks and the x-cache-ttl
// header into req's cache breakpoints. A block's breakpoint covers the
// prompt up to and including it (a tool's: the tool definitions up to and
// including it); x-cache-ttl alone marks the whole prompt
// and, beside cache_control, is the lifetime of the blocks that name none.
// It runs after the API's decoder accepted the body, so req.Messages maps
// onto the body's messages (Anthropic's system, when set, is message 0).
func promptCache(a api, body []byte, req *llm.Request) *apiError {
	ttl := req.Hints.CacheTTL
	if !bytes.Contains(body, []byte(`"cache_control"`)) {
		if ttl > 0 && len(req.Messages) > 0 {
			last := len(req.Messages) - 1
			req.CacheBreakpoints = []llm.CacheBreakpoint{{Message: last, Chars: len(req.Messages[last].Content), TTL: ttl}}
		}
		return nil
	}
	if ttl == 0 {
		ttl = defaultCacheTTL
	}
	var cb cachedBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return invalid("", "request body: %v", err)
	}
	var bps []llm.CacheBreakpoint
	// A tool's cache_control ends a prefix after its definition: the
	// engines render the tools ahead of every turn, in the body's order,
	// so the prefix is the definitions up to it and nothing else.
	for i, t := range cb.Tools {
		if t.CacheControl == nil {
			continue
		}
		param := fmt.Sprintf("tools.%d.cache_control", i)
		d, e := t.CacheControl.lifetime(param, ttl)
		if e != nil {
			return e
		}
		if i >= len(req.Tools) || !req.HasTools() {
			return invalid(param, "%s: the tools are not part of the prompt (tool_choice none)", param)
		}
		bps = append(bps, llm.CacheBreakpoint{Tools: i + 1, TTL: d})
	}
	// add reads the cache_control blocks of one body message, which the
	// decoder turned into req.Messages[msg:] (one turn, or with tool
	// results one tool turn each and then the turn of its text), and
	// returns how many turns that was.
	add := func(param string, msg int, role string, raw json.RawMessage) (int, *apiError) {
		s := strings.TrimSpace(string(raw))
		if s == "" || s[0] != '[' {
			return 1, nil // a plain string carries no cache_control
		}
		var parts []cachedPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return 0, invalid(param, "%s: %v", param, err)
		}
		results, calls := 0, false
		for _, p := range parts {
			results += b2i(p.isToolResult(role))
			calls = calls || p.Type == "tool_use"
		}
		var text strings.Builder
		var toolBPs, textBPs []llm.CacheBreakpoint
		tool := msg
		for _, p := range parts {
			if p.isToolResult(role) {
				tool++
			} else {
				text.WriteString(p.Text)
			}
			if p.CacheControl == nil {
				continue
			}
			d, e := p.CacheControl.lifetime(param+".cache_control", ttl)
			if e != nil {
				return 0, e
			}
			// A tool result's prefix ends after its tool turn; a text
			// block's after the text so far of the message's own turn
			// (the decoder concatenates its text blocks, after the tool
			// turns); a block it did not render (an empty system prompt)
			// has no place in the prompt to end a prefix at.
			at, bp := tool-1, llm.CacheBreakpoint{TTL: d}
			if !p.isToolResult(role) {
				at = msg + results
			}
			if at < 0 || at >= len(req.Messages) {
				return 0, invalid(param+".cache_control", "%s: cache_control on a block that is not part of the prompt", param)
			}
			turn := req.Messages[at]
			if p.isToolResult(role) {
				bp.Message, bp.Chars = at, len(turn.Content)
				if turn.Role != "tool" {
					return 0, invalid(param+".cache_control", "%s: cache_control on a block that is not part of the prompt", param)
				}
				toolBPs = append(toolBPs, bp)
				continue
			}
			// A text block is part of a tool turn only when the body
			// message is one (OpenAI role tool); an Anthropic message's
			// text is its own turn after its tool results.
			bp.Message, bp.Chars = at, text.Len()
			if (turn.Role == "tool") != (role == "tool") || !strings.HasPrefix(turn.Content, text.String()) {
				return 0, invalid(param+".cache_control", "%s: cache_control on a block that is not part of the prompt", param)
			}
			textBPs = append(textBPs, bp)
		}
		bps = append(append(bps, toolBPs...), textBPs...)
		turns := results
		if text.Len() > 0 || calls || results == 0 {
			turns++
		}
		return turns, nil
	}
	first := 0
	if a == apiAnthropic {
		sys := -1
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
			sys, first = 0, 1
		}
		if _, e := add("system", sys, "system", cb.System); e != nil {
			return e
		}
	}
	next := first
	for _, m := range cb.Messages {
		n, e := add("messages.content", next, m.Role, m.Content)
		if e != nil {
			return e
		}
		if a == apiAnthropic {
			next += n
		} else {
			next++ // the OpenAI decoder keeps one turn per message
		}
	}
	if len(bps) > llm.MaxCacheBreakpoints {
		return invalid("cache_control", "%d blocks with cache_control; at most %d", len(bps), llm.MaxCacheBreakpoints)
	}
	req.CacheBreakpoints = bps
	if err := req.CheckCache(); err != nil {
		return invalid("cache_control", "cache_control: %v", err)
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lifetime reads a cache_control's ttl; def is the lifetime when it names
// none.
func (c *cacheControl) lifetime(param string, def time.Duration) (time.Duration, *apiError) {
	if c.Type != "ephemeral" {
		return 0, invalid(param, "%s.type: %q is not \"ephemeral\"", param, c.Type)
	}
	switch c.TTL {
	case "":
		return def, nil
	case "5m":
		return 5 * time.Minute, nil
	case "1h":
		return time.Hour, nil
	}
	return 0, invalid(param, "%s.ttl: %q is not one of 5m, 1h", param, c.TTL)
}

// antUsageOf is Anthropic's usage for a final record: prompt tokens written
// to the cache are reported as cache_creation_input_tokens and those read
// from it (the engine's prefix hits) as cache_read_input_tokens, neither as
// input.
func antUsageOf(fin llm.Final) antUsage {
	hit := min(fin.PrefixHitTokens, fin.PromptTokens)
	return antUsage{
		InputTokens: max(0, fin.PromptTokens-hit-fin.CacheWriteTokens), OutputTokens: fin.CompletionTokens,
		CacheReadInputTokens: hit, CacheCreationInputTokens: fin.CacheWriteTokens,
	}
}
