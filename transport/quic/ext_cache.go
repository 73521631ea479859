package quic

import (
	"encoding/binary"

	"github.com/phaseless/phaseless/llm"
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

// splitBreakpoints is the tool breakpoints (they come first, CheckCache
// says so) and the message breakpoints.
func splitBreakpoints(bps []llm.CacheBreakpoint) (tools, msgs []llm.CacheBreakpoint) {
	n := 0
	for n < len(bps) && bps[n].Tools != 0 {
		n++
	}
	return bps[:n], bps[n:]
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

// breakpointSection is a request section holding some of its cache
// breakpoints: a count, then each one's fields (at least minSize bytes).
// pick chooses them from a request; add puts the decoded ones back.
func breakpointSection(tag uint64, name string, minSize int, pick func([]llm.CacheBreakpoint) []llm.CacheBreakpoint,
	put func([]byte, llm.CacheBreakpoint) []byte, get func(*decoder) llm.CacheBreakpoint, add func(*llm.Request, []llm.CacheBreakpoint)) ext[llm.Request] {
	return ext[llm.Request]{
		tag: tag, name: name,
		append: func(b []byte, r *llm.Request) []byte {
			bps := pick(r.CacheBreakpoints)
			if len(bps) == 0 {
				return b
			}
			b = binary.AppendUvarint(b, uint64(len(bps)))
			for _, bp := range bps {
				b = put(b, bp)
			}
			return b
		},
		decode: func(d *decoder, r *llm.Request) {
			n := d.count(minSize)
			if n > llm.MaxCacheBreakpoints {
				d.fail("%d %s; at most %d", n, name, llm.MaxCacheBreakpoints)
				return
			}
			bps := make([]llm.CacheBreakpoint, n)
			for i := range bps {
				bps[i] = get(d)
			}
			add(r, bps)
		},
	}
}

func init() {
	requestExts = append(requestExts,
		breakpointSection(tagCacheBreakpoints, "cache breakpoints", 3,
			func(bps []llm.CacheBreakpoint) []llm.CacheBreakpoint { _, msgs := splitBreakpoints(bps); return msgs },
			func(b []byte, bp llm.CacheBreakpoint) []byte {
				b = binary.AppendVarint(b, int64(bp.Message))
				b = binary.AppendVarint(b, int64(bp.Chars))
				return appendDuration(b, bp.TTL)
			},
			func(d *decoder) llm.CacheBreakpoint {
				return llm.CacheBreakpoint{Message: d.int(), Chars: d.int(), TTL: d.duration()}
			},
			func(r *llm.Request, bps []llm.CacheBreakpoint) {
				r.CacheBreakpoints = append(r.CacheBreakpoints, bps...)
			}),
		breakpointSection(tagToolBreakpoints, "tool cache breakpoints", 2,
			func(bps []llm.CacheBreakpoint) []llm.CacheBreakpoint { tools, _ := splitBreakpoints(bps); return tools },
			func(b []byte, bp llm.CacheBreakpoint) []byte {
				return appendDuration(binary.AppendVarint(b, int64(bp.Tools)), bp.TTL)
			},
			func(d *decoder) llm.CacheBreakpoint { return llm.CacheBreakpoint{Tools: d.int(), TTL: d.duration()} },
			// Sections may come in any order; tool breakpoints go first.
			func(r *llm.Request, bps []llm.CacheBreakpoint) {
				r.CacheBreakpoints = append(bps, r.CacheBreakpoints...)
			}),
	)
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
