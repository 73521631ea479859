package quic

import (
	"encoding/binary"

	"github.com/phaseless/phaseless/transport/llm"
)

// Prompt-caching sections (tags 20-29): a request's cache breakpoints, so a
// worker behind the QUIC hop pins the same prefixes the API asked for, and
// the final record's cache writes, so usage reports them at the edge.
const (
	tagCacheBreakpoints = 20 // request: count, then (message, chars, ttl) each
	tagCacheUsage       = 20 // final: cache write tokens
	// Breakpoints after tool definitions came later than section 20, so
	// they have their own section and a peer from before them reads the
	// message breakpoints as it always did.
	tagToolBreakpoints = 21 // request: count, then (tools, ttl) each
)

// splitBreakpoints is r's tool breakpoints (they come first, CheckCache
// says so) and its message breakpoints.
func splitBreakpoints(r *llm.Request) (tools, msgs []llm.CacheBreakpoint) {
	n := 0
	for n < len(r.CacheBreakpoints) && r.CacheBreakpoints[n].Tools != 0 {
		n++
	}
	return r.CacheBreakpoints[:n], r.CacheBreakpoints[n:]
}

// checkBreakpoints fails d when r's breakpoints do not fit its prompt, so
// an engine never sees one pointing outside it. It runs once every section
// is read: the tools a tool breakpoint counts come in a section of their
// own.
func checkBreakpoints(d *decoder, r *llm.Request) {
	if d.err == nil && r != nil && len(r.CacheBreakpoints) > 0 {
		if err := r.CheckCache(); err != nil {
			d.fail("%v", err)
		}
	}
}

func init() {
	requestExts = append(requestExts, ext[llm.Request]{
		tag: tagCacheBreakpoints, name: "cache breakpoints",
		append: func(b []byte, r *llm.Request) []byte {
			_, msgs := splitBreakpoints(r)
			if len(msgs) == 0 {
				return b
			}
			b = binary.AppendUvarint(b, uint64(len(msgs)))
			for _, bp := range msgs {
				b = binary.AppendVarint(b, int64(bp.Message))
				b = binary.AppendVarint(b, int64(bp.Chars))
				b = appendDuration(b, bp.TTL)
			}
			return b
		},
		decode: func(d *decoder, r *llm.Request) {
			n := d.count(3)
			if n > llm.MaxCacheBreakpoints {
				d.fail("%d cache breakpoints; at most %d", n, llm.MaxCacheBreakpoints)
				return
			}
			for range n {
				r.CacheBreakpoints = append(r.CacheBreakpoints, llm.CacheBreakpoint{Message: d.int(), Chars: d.int(), TTL: d.duration()})
			}
		},
	}, ext[llm.Request]{
		tag: tagToolBreakpoints, name: "tool cache breakpoints",
		append: func(b []byte, r *llm.Request) []byte {
			tools, _ := splitBreakpoints(r)
			if len(tools) == 0 {
				return b
			}
			b = binary.AppendUvarint(b, uint64(len(tools)))
			for _, bp := range tools {
				b = binary.AppendVarint(b, int64(bp.Tools))
				b = appendDuration(b, bp.TTL)
			}
			return b
		},
		decode: func(d *decoder, r *llm.Request) {
			n := d.count(2)
			if n > llm.MaxCacheBreakpoints {
				d.fail("%d tool cache breakpoints; at most %d", n, llm.MaxCacheBreakpoints)
				return
			}
			tools := make([]llm.CacheBreakpoint, n)
			for i := range tools {
				tools[i] = llm.CacheBreakpoint{Tools: d.int(), TTL: d.duration()}
			}
			// Sections may come in any order; tool breakpoints go first.
			r.CacheBreakpoints = append(tools, r.CacheBreakpoints...)
		},
	})
	finalExts = append(finalExts, ext[llm.Final]{
		tag: tagCacheUsage, name: "cache usage",
		append: func(b []byte, f *llm.Final) []byte {
			if f.CacheWriteTokens == 0 {
				return b
			}
			return binary.AppendVarint(b, int64(f.CacheWriteTokens))
		},
		decode: func(d *decoder, f *llm.Final) {
			if f.CacheWriteTokens = d.int(); f.CacheWriteTokens < 0 {
				d.fail("negative cache write tokens %d", f.CacheWriteTokens)
			}
		},
	})
}
