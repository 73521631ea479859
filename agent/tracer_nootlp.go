//go:build nootlp

package agent

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// newTracer in a nootlp build: no exporter is linked, so --otlp is refused
// rather than ignored. Spans are still started (a no-op), and a request's
// traceparent still reaches the cloud.
func newTracer(cfg Config) (tracerProvider, error) {
	if cfg.OTLP.IsSet() {
		return nil, errors.New("this agent was built without the OTLP exporter (build tag nootlp)")
	}
	return noopTracer{}, nil
}

type noopTracer struct{}

func (noopTracer) TracerProvider() trace.TracerProvider { return noop.NewTracerProvider() }
func (noopTracer) Shutdown(context.Context) error       { return nil }
