package llm

import (
	"fmt"
	"time"
)

// Prompt caching (Anthropic's cache_control, the x-cache-ttl header): a
// request marks where a prefix of its prompt ends and how long the engine
// keeps that prefix's KV blocks pinned; the final record says how many
// prompt tokens the request wrote into the pinned cache. Reads are
// Final.PrefixHitTokens, as for any prefix-cache hit.

// MaxCacheBreakpoints is how many breakpoints a request may carry: four, as
// Anthropic's Messages API allows.
const MaxCacheBreakpoints = 4

// Lifetimes a breakpoint may ask for: Anthropic's "5m" and "1h", and
// anything between them in whole seconds through x-cache-ttl.
const (
	MinCacheTTL = 5 * time.Minute
	MaxCacheTTL = time.Hour
)

// CacheBreakpoint ends a cached prefix: everything the prompt renders
// before the end of Messages[Message]'s first Chars bytes of content, or,
// when Tools is set, the rendered definitions of the first Tools tools and
// nothing after them (Anthropic's order: tools, then system, then
// messages; engines render the tools ahead of every turn).
type CacheBreakpoint struct {
	Message int
	Chars   int // bytes of Messages[Message].Content the prefix covers
	// Tools > 0 makes this a breakpoint after Tools[Tools-1]'s
	// definition; Message and Chars are then 0.
	Tools int
	TTL   time.Duration
}

// CacheRequest is embedded in Request.
type CacheRequest struct {
	// CacheBreakpoints, in prompt order, are the prefixes to pin.
	CacheBreakpoints []CacheBreakpoint
}

// CacheUsage is embedded in Final.
type CacheUsage struct {
	// CacheWriteTokens are prompt tokens this request newly pinned
	// (cache_creation_input_tokens); a prefix already pinned only has its
	// lifetime refreshed and counts as read.
	CacheWriteTokens int
}

// CheckCache reports the first breakpoint that does not fit the request's
// messages or the allowed lifetimes.
func (r *Request) CheckCache() error {
	if n := len(r.CacheBreakpoints); n > MaxCacheBreakpoints {
		return fmt.Errorf("%d cache breakpoints; at most %d", n, MaxCacheBreakpoints)
	}
	prevMsg, prevChars, prevTools := -1, -1, 0
	for i, bp := range r.CacheBreakpoints {
		if bp.TTL < MinCacheTTL || bp.TTL > MaxCacheTTL {
			return fmt.Errorf("cache breakpoint %d: lifetime %v outside %v..%v", i, bp.TTL, MinCacheTTL, MaxCacheTTL)
		}
		if bp.Tools != 0 {
			switch {
			case bp.Tools < 0 || bp.Tools > len(r.Tools):
				return fmt.Errorf("cache breakpoint %d: after tool %d of %d", i, bp.Tools, len(r.Tools))
			case bp.Message != 0 || bp.Chars != 0:
				return fmt.Errorf("cache breakpoint %d: a tools breakpoint names message %d, %d bytes", i, bp.Message, bp.Chars)
			case prevMsg >= 0 || bp.Tools <= prevTools:
				return fmt.Errorf("cache breakpoint %d comes before breakpoint %d", i, i-1)
			}
			prevTools = bp.Tools
			continue
		}
		switch {
		case bp.Message < 0 || bp.Message >= len(r.Messages):
			return fmt.Errorf("cache breakpoint %d: message %d of %d", i, bp.Message, len(r.Messages))
		case bp.Chars < 0 || bp.Chars > len(r.Messages[bp.Message].Content):
			return fmt.Errorf("cache breakpoint %d: %d bytes into a %d-byte message", i, bp.Chars, len(r.Messages[bp.Message].Content))
		case bp.Message < prevMsg || bp.Message == prevMsg && bp.Chars < prevChars:
			return fmt.Errorf("cache breakpoint %d comes before breakpoint %d", i, i-1)
		}
		prevMsg, prevChars = bp.Message, bp.Chars
	}
	return nil
}
