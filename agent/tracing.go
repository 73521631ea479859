package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
)

// A traced request's spans on the device: phaseless.agent.request (under
// the app's traceparent, when it sent one), with scheduling (the router's
// decision, agent/route), and on the local path queueing, prefill and
// decode (agent/local). A request that goes to the cloud carries this
// span as its parent over QUIC, so the cloud's spans join the same trace.

// tracerProvider is what the agent needs of its span exporter: the OTLP
// one (tracer_otlp.go) or, in a nootlp build, none (tracer_nootlp.go).
type tracerProvider interface {
	TracerProvider() trace.TracerProvider
	Shutdown(context.Context) error
}

// traced starts each request's span and names it as the parent of the
// next hop.
type traced struct {
	next llm.Generator
	tp   trace.TracerProvider
}

var _ llm.Generator = traced{}

func (t traced) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	ctx, span := tracing.Start(ctx, t.tp, req, "phaseless.agent.request", attribute.String("phaseless.request_id", req.ID))
	req.Trace = tracing.Outgoing(ctx, req.Trace) // the cloud continues from this span
	route := ""
	fin, err := t.next.Generate(ctx, req, func(tok llm.Token) error {
		if tok.Meta != nil {
			route = tok.Meta.RouteHeader()
		}
		return emit(tok)
	})
	span.SetAttributes(attribute.String("phaseless.route", route), attribute.Int("phaseless.prompt_tokens", fin.PromptTokens),
		attribute.Int("phaseless.completion_tokens", fin.CompletionTokens))
	tracing.End(span, err)
	return fin, err
}
