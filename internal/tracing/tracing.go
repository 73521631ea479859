// Package tracing is Phaseless' OpenTelemetry tracing: the W3C trace
// context a request carries (llm.Trace: the traceparent header an app
// sends, the QUIC request's trace section, a remote engine's header), the
// spans each hop records — admission, scheduling, queueing, prefill,
// decode — and their export over OTLP/HTTP when a binary runs with
// --otlp URL.
//
// How it fits: the entry point of a hop (the cloud's coordinator, the
// agent's API) starts the request's span with Start, continuing the trace
// the request names; every stage below starts its own with Child, which
// takes the tracer from the span in the context. Without --otlp the
// provider is OpenTelemetry's no-op one, so the stages cost a context
// lookup and nothing is recorded. A hop that sends the request on writes
// Outgoing's context, naming its own span as the next hop's parent.
//
// This package links only the OpenTelemetry API; the SDK and the OTLP
// exporter live in internal/tracing/otlp, which a binary links only when
// it can export (the agent's nootlp build tag drops it).
package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/phaseless/phaseless/llm"
)

// Scope is the instrumentation scope every Phaseless span is recorded under.
const Scope = "github.com/phaseless/phaseless"

var w3c = propagation.TraceContext{}

// Parse reads t as W3C trace context. An empty Parent is no parent; a
// malformed one is an error (the HTTP API refuses it rather than start an
// unrelated trace silently).
func Parse(t llm.Trace) (trace.SpanContext, error) {
	if t.Parent == "" {
		return trace.SpanContext{}, nil
	}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), carrier(t)))
	if !sc.IsValid() {
		return trace.SpanContext{}, fmt.Errorf("traceparent %q is not W3C trace context (version-traceid-parentid-flags)", t.Parent)
	}
	return sc, nil
}

// carrier exposes an llm.Trace to the W3C propagator.
type carrier llm.Trace

func (c carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.Parent
	case "tracestate":
		return c.State
	}
	return ""
}
func (c carrier) Set(string, string) {}
func (c carrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// outCarrier collects what the propagator injects.
type outCarrier struct{ t *llm.Trace }

func (c outCarrier) Get(string) string { return "" }
func (c outCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.t.Parent = value
	case "tracestate":
		c.t.State = value
	}
}
func (c outCarrier) Keys() []string { return nil }

// Start begins this hop's span for req, as a child of the span req.Trace
// names (a new trace when it names none, or names one badly: a peer's
// mistake must not fail its request). The span is a server span.
func Start(ctx context.Context, tp trace.TracerProvider, req *llm.Request, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if req.Trace.Parent != "" {
		ctx = w3c.Extract(ctx, carrier(req.Trace))
	}
	return tp.Tracer(Scope).Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// Child begins a stage's span under the one in ctx, from that span's own
// provider: a no-op when the request is not traced.
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(Scope).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Outgoing is the trace context to send to the next hop: the span in ctx
// as the parent when there is one, else what the request came with.
func Outgoing(ctx context.Context, in llm.Trace) llm.Trace {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return in
	}
	var out llm.Trace
	w3c.Inject(ctx, outCarrier{&out})
	return out
}

// End ends span, recording err (a cancelled request is not an error of
// the span's stage, so it is noted as an event instead).
func End(span trace.Span, err error) {
	if err != nil {
		if llm.CodeOf(err) == llm.CodeCancelled {
			span.AddEvent("cancelled")
		} else {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// Generation wraps an engine's emit with the prefill span (from now to
// the first token) and the decode span (first token to the end); done
// ends whichever is open, with the generation's outcome.
func Generation(ctx context.Context, emit llm.Emit) (llm.Emit, func(llm.Final, error)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return emit, func(llm.Final, error) {}
	}
	_, prefill := Child(ctx, "prefill")
	var decode trace.Span
	tokens := 0
	wrapped := func(t llm.Token) error {
		if t.Meta == nil {
			if tokens == 0 {
				prefill.End()
				_, decode = Child(ctx, "decode")
			}
			tokens++
		}
		return emit(t)
	}
	done := func(fin llm.Final, err error) {
		if decode == nil {
			prefill.SetAttributes(attribute.Int("phaseless.prompt_tokens", fin.PromptTokens), attribute.Int("phaseless.prefix_hit_tokens", fin.PrefixHitTokens))
			End(prefill, err)
			return
		}
		decode.SetAttributes(attribute.Int("phaseless.completion_tokens", tokens), attribute.String("phaseless.finish_reason", fin.FinishReason))
		End(decode, err)
	}
	return wrapped, done
}
