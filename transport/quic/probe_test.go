package quic

import (
	"testing"
	"time"
)

// TestLossProbeFollowsRequest: the client sends a loss probe after its
// request, in a packet of its own, which the server reads: with the
// packet that carried the request dropped, the probe still arrives (so the
// server's acknowledgement of it reveals the loss to the client; probe.go),
// and the request, resent, completes.
func TestLossProbeFollowsRequest(t *testing.T) {
	h := newPaced(3, 100*time.Millisecond) // the answer outlasts the probe's delay
	s := startServer(t, h)
	relay := newRelay(t, s.Addr(), 0, 0)
	c := dial(t, relay.Addr(), "dev-1")
	if _, _, err := collect(guardCtx(t), c, req("warm")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first request's probe", func() bool { return s.Stats().LossProbes == 1 })

	// The next client packet of a request's size is lost (ACK-only packets
	// and the probe's are under 60 bytes, path MTU probes over 1,200).
	relay.mu.Lock()
	relay.dropUp = func(p []byte) bool { return len(p) > 80 && len(p) < 400 }
	relay.mu.Unlock()
	toks, _, err := collect(guardCtx(t), c, req("lost"))
	if err != nil {
		t.Fatal(err)
	}
	checkTokens(t, toks, 3)
	relay.mu.Lock()
	dropped := relay.dropped[0]
	relay.mu.Unlock()
	if dropped != 1 {
		t.Fatalf("relay dropped %d client packets, want the request's", dropped)
	}
	if n := s.Stats().LossProbes; n != 2 {
		t.Fatalf("server read %d probes, want 2: the lost request's probe did not travel on its own", n)
	}
}
