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
)

func init() {
	requestExts = append(requestExts, ext[llm.Request]{
		tag: tagCacheBreakpoints, name: "cache breakpoints",
		append: func(b []byte, r *llm.Request) []byte {
			if len(r.CacheBreakpoints) == 0 {
				return b
			}
			b = binary.AppendUvarint(b, uint64(len(r.CacheBreakpoints)))
			for _, bp := range r.CacheBreakpoints {
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
			if n == 0 {
				return
			}
			r.CacheBreakpoints = make([]llm.CacheBreakpoint, n)
			for i := range r.CacheBreakpoints {
				r.CacheBreakpoints[i] = llm.CacheBreakpoint{Message: d.int(), Chars: d.int(), TTL: d.duration()}
			}
			// The messages come before the sections, so the breakpoints
			// are checked against them here: an engine never sees one
			// pointing outside its prompt.
			if d.err == nil {
				if err := r.CheckCache(); err != nil {
					d.fail("%v", err)
				}
			}
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
