package quic

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestTraceSectionRoundTrip: the trace context crosses the frame; a
// request without one keeps its bytes; an oversized one fails the frame.
func TestTraceSectionRoundTrip(t *testing.T) {
	req := &llm.Request{ID: "r1", Model: "auto", MaxTokens: 4}
	plain := encode(t, &Frame{Type: FrameRequest, Request: req})
	traced := *req
	traced.Trace = llm.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE"}
	b := encode(t, &Frame{Type: FrameRequest, Request: &traced})
	if len(b) <= len(plain) {
		t.Fatalf("traced frame %x is no longer than the plain one %x", b, plain)
	}
	f, _, err := DecodeFrame(b)
	if err != nil || f.Request.Trace != traced.Trace {
		t.Fatalf("decoded %+v, %v", f.Request, err)
	}
	f, _, err = DecodeFrame(plain)
	if err != nil || f.Request.Trace != (llm.Trace{}) {
		t.Fatalf("plain %+v, %v", f.Request, err)
	}
	huge := traced
	huge.Trace.State = strings.Repeat("x", maxTraceField+1)
	if _, _, err := DecodeFrame(encode(t, &Frame{Type: FrameRequest, Request: &huge})); err == nil {
		t.Fatal("an oversized tracestate was accepted")
	}
}
