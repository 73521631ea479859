package quic

import (
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestClientRefusesRaw: the request frame carries chat only, so a raw
// completion fails on the device as invalid and nothing reaches the cloud
// (sent as chat it would run an empty conversation there).
func TestClientRefusesRaw(t *testing.T) {
	h := &scripted{n: 3}
	s := startServer(t, h)
	c := dial(t, s.Addr().String(), "dev-1")
	r := req("raw")
	r.Messages, r.Raw, r.Prompt = nil, true, "Once upon a time"
	_, err := c.Generate(guardCtx(t), r, nil)
	if llm.CodeOf(err) != llm.CodeInvalid || h.calls.Load() != 0 {
		t.Errorf("err %v, cloud calls %d", err, h.calls.Load())
	}
}
