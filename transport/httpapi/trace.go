package httpapi

import (
	"net/http"
	"strings"

	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
)

// parseTrace reads the W3C traceparent and tracestate request headers
// into the request's trace context, which every hop continues. A
// malformed traceparent, or a tracestate without one, is refused like any
// other bad header (DESIGN.md §4: none is accepted and ignored).
func parseTrace(hdr http.Header) (llm.Trace, *apiError) {
	t := llm.Trace{Parent: strings.TrimSpace(hdr.Get("traceparent")), State: strings.TrimSpace(strings.Join(hdr.Values("tracestate"), ","))}
	if t.Parent == "" {
		if t.State != "" {
			return llm.Trace{}, invalid("tracestate", "header tracestate needs a traceparent")
		}
		return llm.Trace{}, nil
	}
	if _, err := tracing.Parse(t); err != nil {
		return llm.Trace{}, invalid("traceparent", "header %v", err)
	}
	return t, nil
}

// setTraceHeaders writes the trace context for the next hop: the span in
// the request's context as parent when there is one, else the request's.
func setTraceHeaders(hdr http.Header, t llm.Trace) {
	if t.Parent != "" {
		hdr.Set("traceparent", t.Parent)
	}
	if t.State != "" {
		hdr.Set("tracestate", t.State)
	}
}
