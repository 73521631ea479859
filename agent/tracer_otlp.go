//go:build !nootlp

package agent

import (
	"context"

	"github.com/phaseless/phaseless/internal/tracing/otlp"
)

// newTracer is the OTLP exporter for --otlp, a no-op without it. Builds
// tagged nootlp leave the exporter (the OpenTelemetry SDK and its protobuf
// client) out of the binary; see tracer_nootlp.go.
func newTracer(cfg Config) (tracerProvider, error) {
	p, err := otlp.New(context.Background(), otlp.Config{URL: cfg.OTLP.String(), Service: "phaseless-agent", Instance: cfg.DeviceID})
	if err != nil {
		return nil, err // not a typed nil in the interface: Close checks for nil
	}
	return p, nil
}
