package quic

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// stallHandler emits `tokens` tokens, then waits `pause` (or forever when
// pause is 0) before emitting `after` more.
type stallHandler struct {
	tokens, after int
	pause         time.Duration
}

func (h *stallHandler) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	for i := 0; i < h.tokens; i++ {
		if err := emit(llm.Token{Text: "t", ID: int32(i)}); err != nil {
			return llm.Final{}, err
		}
	}
	var wait <-chan time.Time
	if h.pause > 0 {
		wait = time.After(h.pause)
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return llm.Final{}, context.Cause(ctx)
	}
	for i := 0; i < h.after; i++ {
		if err := emit(llm.Token{Text: "u"}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{CompletionTokens: h.tokens + h.after, FinishReason: "stop"}, nil
}

// A cloud that goes silent mid-stream (killed, unplugged: every datagram
// lost from then on) ends the stream with a retryable unavailable error once
// StallTimeout passes without a frame, instead of waiting for QUIC's idle
// timeout; the dead connection is dropped so the next request redials.
func TestStallEndsStreamWhenPeerGoesSilent(t *testing.T) {
	s := startServer(t, &stallHandler{tokens: 3})
	relay := newRelay(t, s.Addr(), 0, 0)
	c := dial(t, relay.Addr(), "dev-1", func(cc *ClientConfig) { cc.StallTimeout = 300 * time.Millisecond })
	ctx := guardCtx(t)
	n := 0
	_, err := c.Generate(ctx, req("stall"), func(llm.Token) error {
		n++
		if n == 3 {
			relay.mu.Lock()
			relay.drop = 1 // the cloud is gone: nothing reaches either side
			relay.mu.Unlock()
		}
		return nil
	})
	if ctx.Err() != nil {
		t.Fatalf("the stream hung until the guard: %v", err)
	}
	if llm.CodeOf(err) != llm.CodeUnavailable || !strings.Contains(err.Error(), "stalled") || !strings.Contains(err.Error(), "after 3 tokens") {
		t.Fatalf("error %v, want a stall after 3 tokens", err)
	}
	if st := c.Link(); st.Connected || !strings.Contains(st.LastError, "stalled") {
		t.Fatalf("link %+v: a stalled connection must be dropped", st)
	}
}

// Heartbeats keep a request that produces nothing for several stall
// timeouts (queued, a long prefill) alive; the answer arrives whole.
func TestHeartbeatsKeepSilentRequestAlive(t *testing.T) {
	const stall = 400 * time.Millisecond
	s := startServer(t, &stallHandler{pause: 4 * stall, after: 5})
	c := dial(t, s.Addr().String(), "dev-1", func(cc *ClientConfig) { cc.StallTimeout = stall })
	toks, fin, err := collect(guardCtx(t), c, req("slow"))
	if err != nil || len(toks) != 5 || fin.CompletionTokens != 5 {
		t.Fatalf("slow request: %d tokens, final %+v, err %v", len(toks), fin, err)
	}
}

func TestHeartbeatInterval(t *testing.T) {
	for _, c := range []struct{ stall, want time.Duration }{
		{-1, 0}, {0, 0}, {DefaultStallTimeout, 200 * time.Millisecond}, {time.Millisecond, minHeartbeat}, {time.Hour, maxHeartbeat},
	} {
		if got := heartbeatInterval(c.stall); got != c.want {
			t.Errorf("heartbeatInterval(%v) = %v, want %v", c.stall, got, c.want)
		}
	}
}
