package agent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/internal/tracing/otlptest"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// traceRecorder is a cloud end that records the trace context each
// request arrived with over QUIC.
type traceRecorder struct {
	mu     sync.Mutex // guards traces
	traces []llm.Trace
}

func (r *traceRecorder) Generate(_ context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	r.mu.Lock()
	r.traces = append(r.traces, req.Trace)
	r.mu.Unlock()
	if err := emit(llm.Token{Text: "ok"}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{PromptTokens: 2, CompletionTokens: 1, FinishReason: "stop"}, nil
}

// TestAgentSpansAndTracePropagation: with --otlp at a real OTLP receiver,
// a local request is exported as the agent's request span (under the
// app's traceparent) with scheduling, queueing, prefill and decode under
// it; a request sent to the cloud carries the agent's span as parent over
// QUIC, in the app's trace.
func TestAgentSpansAndTracePropagation(t *testing.T) {
	rx := otlptest.New(t)
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	tc, err := pki.ServerTLS(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	rec := &traceRecorder{}
	srv, err := quic.NewServer(quic.ServerConfig{Addr: "127.0.0.1:0", TLS: tc, Handler: rec})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	defer func() { srv.Close(); <-served }()

	cfg := testConfig(t)
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = srv.Addr().String(), "car-1", pkiDir
	if err := cfg.OTLP.Set(rx.URL()); err != nil {
		t.Fatal(err)
	}
	a, url := startAgent(t, cfg)
	waitUntil(t, "the agent to connect", func() bool { return a.cloud.Link().Connected })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := "00-" + traceID + "-00f067aa0ba902b7-01"
	body := `{"messages":[{"role":"user","content":"turn on the fan"}],"max_tokens":3}`
	for _, route := range []string{"local", "cloud"} {
		if resp := post(t, url+"/v1/chat/completions", body, "x-phaseless-route", route, "traceparent", tp); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", route, resp.StatusCode)
		}
	}
	if err := a.tracer.(interface{ Flush(context.Context) error }).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var roots []otlptest.Span
	byParent := map[string][]string{}
	for _, s := range rx.Spans() {
		if s.TraceID != traceID || s.Service != "phaseless-agent" {
			t.Errorf("span %+v not in the app's trace", s)
		}
		if s.Name == "phaseless.agent.request" {
			roots = append(roots, s)
		}
		byParent[s.ParentSpanID] = append(byParent[s.ParentSpanID], s.Name)
	}
	if len(roots) != 2 || roots[0].ParentSpanID != "00f067aa0ba902b7" {
		t.Fatalf("request spans %+v", roots)
	}
	local, cloud := roots[0], roots[1]
	if local.Attributes["phaseless.route"] != "local" {
		local, cloud = cloud, local
	}
	if got := strings.Join(byParent[local.SpanID], ","); got != "scheduling,queueing,prefill,decode" {
		t.Errorf("local request's stages: %s", got)
	}
	if got := strings.Join(byParent[cloud.SpanID], ","); got != "scheduling" {
		t.Errorf("cloud request's stages on the device: %s", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.traces) != 1 || rec.traces[0].Parent != "00-"+traceID+"-"+cloud.SpanID+"-01" {
		t.Errorf("the cloud got trace context %+v, want the agent's span %s as parent", rec.traces, cloud.SpanID)
	}
}
