package quic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/linkemu"
)

// paced emits n tokens "t0 ".."t<n-1> " one every `every`, like an engine
// decoding; ended receives how its run ended (nil, or the context's cause).
type paced struct {
	n     int
	every time.Duration
	runs  atomic.Int64
	ended chan error
}

func newPaced(n int, every time.Duration) *paced {
	return &paced{n: n, every: every, ended: make(chan error, 4)}
}

func (p *paced) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	p.runs.Add(1)
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	for i := range p.n {
		select {
		case <-ctx.Done():
			p.ended <- context.Cause(ctx)
			return llm.Final{}, context.Cause(ctx)
		case <-tick.C:
		}
		if err := emit(llm.Token{Text: fmt.Sprintf("t%d ", i), ID: int32(i)}); err != nil {
			p.ended <- err
			return llm.Final{}, err
		}
	}
	p.ended <- nil
	return llm.Final{CompletionTokens: p.n, FinishReason: "length"}, nil
}

// emuRelay puts a transport/linkemu relay with a clean link in front of
// target; the tests black it out themselves.
func emuRelay(t *testing.T, target net.Addr) *linkemu.UDPRelay {
	t.Helper()
	r, err := linkemu.ListenUDP(linkemu.Config{Target: target.String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// resumeClient dials through relay with resuming on and a short stall
// timeout, so a blackout is noticed in a fraction of a second.
func resumeClient(t *testing.T, relay *linkemu.UDPRelay, deadline time.Duration) *Client {
	return dial(t, relay.Addr().String(), "dev-1", func(cc *ClientConfig) {
		cc.ResumeDeadline = deadline
		cc.StallTimeout = 300 * time.Millisecond
		cc.ConnectWait = time.Second
	})
}

// blackoutAt darkens relay once the stream has delivered `after` tokens,
// for each of the given durations in turn (a flapping link), and returns
// the emit that counts.
func blackoutAt(relay *linkemu.UDPRelay, after int, every int, dark ...time.Duration) (llm.Emit, *[]llm.Token) {
	var toks []llm.Token
	next := after
	return func(tk llm.Token) error {
		if tk.Meta != nil {
			return nil
		}
		toks = append(toks, tk)
		if len(dark) > 0 && len(toks) == next {
			d := dark[0]
			dark, next = dark[1:], next+every
			relay.BlackOut()
			time.AfterFunc(d, relay.Restore)
		}
		return nil
	}, &toks
}

// TestResumeAfterBlackout: the link goes dark mid-answer for longer than
// the stall timeout; the client reconnects and resumes from the last token
// it delivered, so the answer is the uninterrupted one — every token once,
// in order — from one run, and the cloud's buffer is empty afterwards. The
// reconnect is a 0-RTT one.
func TestResumeAfterBlackout(t *testing.T) {
	if raceEnabled {
		// The resume stream opens in 0-RTT while the handshake completes:
		// quic-go#4303, as in TestZeroRTTRunsOnce (it was reported here at
		// load average 20).
		t.Skip("quic-go#4303: a data race inside quic-go on 0-RTT streams; make test runs this without -race (RACE_FULL)")
	}
	h := newPaced(120, 5*time.Millisecond)
	s := startServer(t, h)
	relay := emuRelay(t, s.Addr())
	c := resumeClient(t, relay, 20*time.Second)
	emit, toks := blackoutAt(relay, 20, 0, time.Second)
	if _, err := c.Generate(guardCtx(t), req("tunnel"), emit); err != nil {
		t.Fatal(err)
	}
	checkTokens(t, *toks, 120)
	st := s.Stats()
	if h.runs.Load() != 1 || st.Resumed == 0 {
		t.Fatalf("runs %d, stats %+v: want one run, resumed", h.runs.Load(), st)
	}
	l := c.Link()
	if l.Resumes == 0 || l.Reconnects == 0 {
		t.Fatalf("link %+v: the stream was not resumed on a new connection", l)
	}
	// The redials while the link was dark failed their handshakes; the
	// one that worked must still have had the session ticket (tickets.go).
	if !l.Used0RTT {
		t.Fatalf("link %+v: the resumed connection did a full handshake, not 0-RTT", l)
	}
	waitFor(t, "the delivered answer's buffer to be freed", func() bool { return s.Stats().BufferedBytes == 0 })
}

// TestResumeFlappingLink: three blackouts in one answer, each resumed.
func TestResumeFlappingLink(t *testing.T) {
	if raceEnabled {
		t.Skip("several reconnects through the relay: make test runs it without -race (RACE_FULL)")
	}
	// The engine is slow enough that after each blackout the buffered
	// tokens arrive, and the answer goes live again, before the next one.
	h := newPaced(150, 20*time.Millisecond)
	s := startServer(t, h)
	relay := emuRelay(t, s.Addr())
	c := resumeClient(t, relay, 20*time.Second)
	emit, toks := blackoutAt(relay, 20, 50, 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond)
	if _, err := c.Generate(guardCtx(t), req("flap"), emit); err != nil {
		t.Fatal(err)
	}
	checkTokens(t, *toks, 150)
	if h.runs.Load() != 1 || s.Stats().Resumed < 3 {
		t.Fatalf("runs %d, stats %+v: want one run resumed three times", h.runs.Load(), s.Stats())
	}
}

// TestResumeDeadlinePasses: a blackout longer than the resume deadline ends
// the request with a retryable unavailable error after the tokens it
// delivered, saying so; when the link returns, the client cancels the run
// the cloud kept for it, and its buffer is freed before the window ends.
func TestResumeDeadlinePasses(t *testing.T) {
	h := newPaced(100_000, 5*time.Millisecond)
	s := startServer(t, h) // the default 60 s window: only the cancel can end it in time
	relay := emuRelay(t, s.Addr())
	c := resumeClient(t, relay, 800*time.Millisecond)
	var n int
	_, err := c.Generate(guardCtx(t), req("deadline"), func(tk llm.Token) error {
		if tk.Meta == nil {
			if n++; n == 10 {
				relay.BlackOut()
			}
		}
		return nil
	})
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != llm.CodeUnavailable || !le.Retryable || !strings.Contains(le.Message, "resume deadline") || n < 10 {
		t.Fatalf("after %d tokens: %v, want a retryable unavailable error naming the resume deadline", n, err)
	}
	if s.Stats().BufferedBytes == 0 {
		t.Fatal("nothing buffered in the cloud during the blackout")
	}
	relay.Restore()
	if cause := <-h.ended; !errors.Is(cause, errDeviceCancelled) {
		t.Fatalf("the cloud's run ended with %v, want the device's cancel", cause)
	}
	waitFor(t, "the cancelled run's buffer to be freed", func() bool { return s.Stats().BufferedBytes == 0 })
}

// TestCancelDuringBlackout: the app cancels while the link is dark; the
// cloud learns it when the link returns and stops the run at once.
func TestCancelDuringBlackout(t *testing.T) {
	h := newPaced(100_000, 5*time.Millisecond)
	s := startServer(t, h)
	relay := emuRelay(t, s.Addr())
	c := resumeClient(t, relay, 20*time.Second)
	ctx, cancel := context.WithCancel(guardCtx(t))
	defer cancel()
	var n int
	_, err := c.Generate(ctx, req("cancel-dark"), func(tk llm.Token) error {
		if tk.Meta == nil {
			if n++; n == 10 {
				relay.BlackOut()
				time.AfterFunc(600*time.Millisecond, cancel) // after the stall, while resuming
			}
		}
		return nil
	})
	if llm.CodeOf(err) != llm.CodeCancelled {
		t.Fatalf("%v, want cancelled", err)
	}
	relay.Restore()
	if cause := <-h.ended; !errors.Is(cause, errDeviceCancelled) {
		t.Fatalf("the cloud's run ended with %v, want the device's cancel", cause)
	}
	waitFor(t, "the cancelled run's buffer to be freed", func() bool { return s.Stats().BufferedBytes == 0 })
}

// TestResumeWindowExpires: a device that never comes back leaves its run
// going for the resume window only; then it is cancelled and freed.
func TestResumeWindowExpires(t *testing.T) {
	h := newPaced(100_000, 5*time.Millisecond)
	s := startServer(t, h, func(sc *ServerConfig) {
		sc.ResumeWindow = 300 * time.Millisecond
		sc.KeepAlivePeriod, sc.MaxIdleTimeout = 100*time.Millisecond, 500*time.Millisecond
	})
	relay := emuRelay(t, s.Addr())
	c := dial(t, relay.Addr().String(), "dev-1", func(cc *ClientConfig) { cc.StallTimeout = 300 * time.Millisecond })
	r := req("gone")
	r.IdempotencyKey = ResumeKeyPrefix + "gone-1"
	var n int
	c.Generate(guardCtx(t), r, func(tk llm.Token) error {
		if tk.Meta == nil {
			if n++; n == 10 {
				relay.BlackOut() // for good
			}
		}
		return nil
	})
	if cause := <-h.ended; !errors.Is(cause, errWindowPassed) {
		t.Fatalf("the cloud's run ended with %v, want the window's end", cause)
	}
	waitFor(t, "the expired run's buffer to be freed", func() bool { return s.Stats().BufferedBytes == 0 })
}

// TestCleanCloseStopsRun: a device that closes its connection itself (the
// agent shutting down) will resume nothing, so the cloud stops its run at
// once, as for a cancel, instead of keeping it for the 60 s window that a
// lost link gets (TestResumeWindowExpires).
func TestCleanCloseStopsRun(t *testing.T) {
	h := newPaced(100_000, 5*time.Millisecond)
	s := startServer(t, h) // the default 60 s window
	relay := emuRelay(t, s.Addr())
	c := resumeClient(t, relay, 20*time.Second)
	started := make(chan struct{})
	var n int
	go c.Generate(guardCtx(t), req("closing"), func(tk llm.Token) error {
		if tk.Meta == nil {
			if n++; n == 10 {
				close(started)
			}
		}
		return nil
	})
	<-started
	c.Close()
	select {
	case cause := <-h.ended:
		if !errors.Is(cause, errDeviceCancelled) {
			t.Fatalf("the cloud's run ended with %v, want the device's cancel", cause)
		}
	case <-time.After(hangGuard):
		t.Fatal("the cloud kept running a request whose device closed its connection")
	}
	waitFor(t, "the closed request's buffer to be freed", func() bool { return s.Stats().BufferedBytes == 0 })
}

// TestGenerationWindow steps a detached generation through its window on
// a fake clock: a resume inside the window stops the timer; the window
// passing cancels a running generation and frees a finished one's tokens.
func TestGenerationWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab := newDedupeTable(time.Hour, 16, time.Now)
		var cause error
		g, _ := tab.join("dev\x00"+ResumeKeyPrefix+"a", [32]byte{}, func(err error) { cause = err })
		c := g.attach(0)
		for range 3 {
			g.append(t.Context(), llm.Token{Text: "abcd"}, 1<<20)
		}
		g.leave(c, leftLinkLost, time.Minute)
		time.Sleep(59 * time.Second)
		if cause != nil || tab.rejoin("dev\x00"+ResumeKeyPrefix+"a") != g {
			t.Fatalf("inside the window: cause %v, no rejoin", cause)
		}
		c = g.attach(1)
		if v := g.since(c); len(v.tokens) != 2 || v.tokens[0].Text != "abcd" {
			t.Fatalf("resumed from 1: %+v", v)
		}
		g.leave(c, leftLinkLost, time.Minute)
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if cause != errWindowPassed || tab.buffered.n.Load() != 3*20 {
			t.Fatalf("after the window: cause %v, buffered %d", cause, tab.buffered.n.Load())
		}
		g.finish(llm.Final{}, cause, time.Now())
		tab.finished(g)
		if tab.buffered.n.Load() != 0 || tab.rejoin("dev\x00"+ResumeKeyPrefix+"a") != nil {
			t.Fatalf("a cancelled run still buffered (%d) or rejoinable", tab.buffered.n.Load())
		}

		// Finished while detached: its tokens wait one window, then go.
		f, _ := tab.join("dev\x00"+ResumeKeyPrefix+"b", [32]byte{}, func(error) {})
		c = f.attach(0)
		f.append(t.Context(), llm.Token{Text: "x"}, 1<<20)
		f.leave(c, leftLinkLost, time.Minute)
		f.finish(llm.Final{CompletionTokens: 1}, nil, time.Now())
		tab.finished(f)
		if tab.buffered.n.Load() == 0 {
			t.Fatal("a finished answer freed before anyone resumed it")
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if tab.buffered.n.Load() != 0 {
			t.Fatalf("finished answer still buffered after the window: %d", tab.buffered.n.Load())
		}
	})
}
