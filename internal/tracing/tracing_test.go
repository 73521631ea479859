package tracing_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/internal/tracing"
	"github.com/phaseless/phaseless/internal/tracing/otlp"
	"github.com/phaseless/phaseless/internal/tracing/otlptest"
	"github.com/phaseless/phaseless/llm"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestExportOverOTLP: with the real exporter and a real OTLP receiver, a
// request continuing a traceparent exports its span and the stages'
// spans under it, in the caller's trace; Outgoing names this hop's span
// as the next hop's parent.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExportOverOTLP(t *testing.T) {
	rx := otlptest.New(t)
	p, err := otlp.New(context.Background(), otlp.Config{URL: rx.URL(), Service: "phaseless-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	req := &llm.Request{Trace: llm.Trace{Parent: parent, State: "congo=t61rcWkgMzE"}}
	ctx, root := tracing.Start(context.Background(), p.TracerProvider(), req, "phaseless.test.request")
	_, adm := tracing.Child(ctx, "admission")
	adm.End()
	emit, done := tracing.Generation(ctx, func(llm.Token) error { return nil })
	emit(llm.Token{Text: "a"})
	emit(llm.Token{Text: "b"})
	done(llm.Final{FinishReason: "stop"}, nil)
	out := tracing.Outgoing(ctx, req.Trace)
	root.End()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr := rx.Trace("4bf92f3577b34da6a3ce929d0e0e4736")
	r, ok := tr["phaseless.test.request"]
	if !ok || r.ParentSpanID != "00f067aa0ba902b7" || r.Service != "phaseless-test" {
		t.Fatalf("root span %+v in %+v", r, rx.Spans())
	}
	for _, name := range []string{"admission", "prefill", "decode"} {
		if s, ok := tr[name]; !ok || s.ParentSpanID != r.SpanID {
			t.Errorf("%s: %+v (root %s)", name, s, r.SpanID)
		}
	}
	if tr["decode"].Attributes["phaseless.completion_tokens"] != "2" {
		t.Errorf("decode attributes %v", tr["decode"].Attributes)
	}
	if !strings.HasPrefix(out.Parent, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+r.SpanID+"-01") || out.State != "congo=t61rcWkgMzE" {
		t.Errorf("outgoing %+v, want this hop's span %s as parent", out, r.SpanID)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

// TestNoopWithoutURL: without --otlp nothing records and Outgoing passes
// the incoming context through.
func TestNoopWithoutURL(t *testing.T) {
	p, err := otlp.New(context.Background(), otlp.Config{})
	if err != nil || p.Enabled() {
		t.Fatal(err)
	}
	req := &llm.Request{Trace: llm.Trace{Parent: parent}}
	ctx, span := tracing.Start(context.Background(), p.TracerProvider(), req, "x")
	defer span.End()
	if span.IsRecording() {
		t.Error("the no-op provider records")
	}
	// The no-op span carries the remote parent's context, so the next hop
	// still joins the caller's trace.
	if out := tracing.Outgoing(ctx, req.Trace); !strings.HasPrefix(out.Parent, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Errorf("outgoing %+v", out)
	}
	if _, err := otlp.New(context.Background(), otlp.Config{URL: "collector:4318"}); err == nil || !strings.Contains(err.Error(), "URL") {
		t.Errorf("bad URL: %v", err)
	}
}

func TestParse(t *testing.T) {
	if _, err := tracing.Parse(llm.Trace{Parent: parent}); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"} {
		if _, err := tracing.Parse(llm.Trace{Parent: bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParse: any header either parses to a valid span context or is an
// error, never a panic.
func FuzzParse(f *testing.F) {
	f.Add(parent, "a=b")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Fuzz(func(t *testing.T, p, s string) {
		sc, err := tracing.Parse(llm.Trace{Parent: p, State: s})
		if err == nil && p != "" && !sc.IsValid() {
			t.Fatalf("%q parsed to an invalid context", p)
		}
	})
}
