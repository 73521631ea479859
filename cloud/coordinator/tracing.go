package coordinator

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/llm"
)

// A traced request's spans, all children of phaseless.cloud.request:
// admission (the budget charge), queueing (the tenant-fair queue here, the
// batcher's in cloud/worker), scheduling (the placement decision), then
// prefill and decode on the worker. The request's span continues the
// trace the app or agent sent (llm.Request.Trace).

// queueTenant tells the coordinator's queue from the worker's batcher.
var queueTenant = attribute.String("phaseless.queue", "tenant")

// Generate implements llm.Generator.
func (c *Coordinator) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	tp := c.cfg.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	ctx, span := tracing.Start(ctx, tp, req, "phaseless.cloud.request",
		attribute.String("phaseless.request_id", req.ID), attribute.String("phaseless.tenant", req.Tenant))
	fin, err := c.generate(ctx, req, emit)
	span.SetAttributes(attribute.Int("phaseless.prompt_tokens", fin.PromptTokens), attribute.Int("phaseless.completion_tokens", fin.CompletionTokens))
	tracing.End(span, err)
	return fin, err
}

// endScheduling ends the scheduling span with where the request goes.
func endScheduling(span trace.Span, d sched.Decision, err error) {
	if err == nil {
		span.SetAttributes(attribute.String("phaseless.pool", d.Pool.String()), attribute.Int("phaseless.worker", d.Worker),
			attribute.String("phaseless.reason", d.Reason.String()))
	}
	tracing.End(span, err)
}
