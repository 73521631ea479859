package quic

import "github.com/phaseless/phaseless/llm"

// The trace section (tag 10; tags 10-19 belong to the client/tracing
// work) carries llm.Request.Trace, the W3C traceparent and tracestate, so
// the cloud's spans join the trace the app or the agent started. The
// strings are passed as they are: the receiver parses them
// (internal/tracing) and ignores a malformed one, as W3C asks.
const extTagTrace = 10

// maxTraceField bounds each string: traceparent is 55 bytes, and W3C
// caps tracestate at 32 entries of 256 bytes at most.
const maxTraceField = 8 << 10

func init() {
	requestExts = append(requestExts, ext[llm.Request]{
		tag: extTagTrace, name: "trace",
		append: func(b []byte, r *llm.Request) []byte {
			if r.Trace == (llm.Trace{}) {
				return b
			}
			b = appendString(b, r.Trace.Parent)
			return appendString(b, r.Trace.State)
		},
		decode: func(d *decoder, r *llm.Request) {
			r.Trace.Parent = d.string()
			r.Trace.State = d.string()
			if len(r.Trace.Parent) > maxTraceField || len(r.Trace.State) > maxTraceField {
				d.fail("trace context over %d bytes", maxTraceField)
			}
		},
	})
}
