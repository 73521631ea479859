// Package otlp exports Phaseless' spans (internal/tracing) over
// OTLP/HTTP with the OpenTelemetry SDK and its official exporter, to any
// collector (the OpenTelemetry Collector, Jaeger, Tempo) at --otlp URL.
package otlp

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures a Provider.
type Config struct {
	// URL is the OTLP/HTTP endpoint (--otlp): a collector's base URL
	// (http://collector:4318, to which /v1/traces is added) or the full
	// traces URL. Empty records nothing.
	URL string
	// Service is the service.name resource attribute (phaseless-agent,
	// phaseless-cloud); Instance is service.instance.id (the device id).
	Service, Instance string
	// ExportTimeout bounds one export; default 10 s.
	ExportTimeout time.Duration
}

// Provider is a process's tracer provider: the OpenTelemetry SDK batching
// spans to OTLP/HTTP, or a no-op when Config.OTLP is empty.
type Provider struct {
	tp  trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil for the no-op

	once    sync.Once
	shutErr error // the first Shutdown's result
}

// New returns the provider cfg describes. A bad URL is an error naming
// the field; an unreachable collector is not (export failures are retried
// and dropped by the SDK, never felt by requests).
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.URL == "" {
		return &Provider{tp: noop.NewTracerProvider()}, nil
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp.Config.URL: %q is not an http(s) URL", cfg.URL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces" // the OTLP/HTTP default path, as OTEL_EXPORTER_OTLP_ENDPOINT adds it
	}
	if cfg.ExportTimeout == 0 {
		cfg.ExportTimeout = 10 * time.Second
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()), otlptracehttp.WithTimeout(cfg.ExportTimeout))
	if err != nil {
		return nil, fmt.Errorf("otlp.Config.URL: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	if cfg.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.Instance))
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	return &Provider{tp: sdk, sdk: sdk}, nil
}

// TracerProvider is what components that start spans take.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// Flush exports every span ended so far.
func (p *Provider) Flush(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter. Safe to call twice.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	p.once.Do(func() { p.shutErr = p.sdk.Shutdown(ctx) })
	return p.shutErr
}
