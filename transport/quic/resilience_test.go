package quic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
)

// stepClock hands each wait to the test, which decides when it ends.
type stepClock struct {
	calls chan clockCall
}

type clockCall struct {
	d    time.Duration
	fire chan time.Time
}

func (c *stepClock) Now() time.Time { return time.Now() }
func (c *stepClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.calls <- clockCall{d, ch}
	return ch
}

// The agent may start before the cloud: it keeps trying with growing,
// jittered waits taken from its clock, and connects once the cloud is up.
func TestReconnectBackoffUntilCloudComes(t *testing.T) {
	// A port with nothing behind it, for now.
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.LocalAddr().String()
	probe.Close()

	clock := &stepClock{calls: make(chan clockCall)}
	c := dial(t, addr, "dev-1", func(cc *ClientConfig) {
		cc.Background = true
		// Only the attempts against the empty port wait this out; the
		// attempt that reaches the server is retried below if a loaded
		// machine (-race, shared cores) lets it expire, so it bounds the
		// test's length, never its outcome.
		cc.HandshakeTimeout = 250 * time.Millisecond
		cc.Backoff = Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond, Factor: 2}
		cc.Clock = clock
		cc.Rand = func() float64 { return 0.5 }
	})
	want := []time.Duration{75, 150, 300, 300}
	for i, w := range want {
		select {
		case call := <-clock.calls:
			if call.d != w*time.Millisecond {
				t.Fatalf("wait %d = %v, want %v", i, call.d, w*time.Millisecond)
			}
			if i == len(want)-1 {
				startServer(t, &scripted{n: 3}, func(sc *ServerConfig) { sc.Addr = addr })
			}
			call.fire <- time.Now()
		case <-time.After(hangGuard):
			t.Fatalf("no reconnect attempt %d", i)
		}
	}
	// From here on every wait the client asks for is taken off the
	// unbuffered channel, so no goroutine blocks on it. Another backoff
	// (after a handshake that a loaded machine let expire) ends at once;
	// Generate's ConnectWait (2 s) never does, so the request waits for the
	// handshake itself.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for call := range clock.calls {
			if call.d < time.Second {
				call.fire <- time.Now()
			}
		}
	}()
	waitFor(t, "the client to connect", func() bool { return c.Link().Connected })
	if st := c.Link(); st.Reconnects != 0 || st.LastError == "" {
		t.Fatalf("link %+v: the first connection is not a reconnect, and the failures should be recorded", st)
	}
	if _, _, err := collect(guardCtx(t), c, req("late")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	close(clock.calls)
	<-drained
}

func TestGenerateFailsFastWithoutLink(t *testing.T) {
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.LocalAddr().String()
	probe.Close()
	c := dial(t, addr, "dev-1", func(cc *ClientConfig) {
		cc.Background = true
		cc.HandshakeTimeout = 50 * time.Millisecond
		cc.ConnectWait = 20 * time.Millisecond
	})
	_, _, err = collect(guardCtx(t), c, req("offline"))
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != llm.CodeUnavailable || !le.Retryable {
		t.Fatalf("offline error %v, want retryable unavailable so the router falls back", err)
	}
	c.Close()
	c.Close() // idempotent
	if _, _, err := collect(guardCtx(t), c, req("closed")); llm.CodeOf(err) != llm.CodeUnavailable {
		t.Fatalf("after Close: %v", err)
	}
	// Dial without Background fails when the cloud is not there.
	tc, _ := pki.DeviceTLS(testPKI(t), "dev-1")
	if _, err := Dial(guardCtx(t), addr, ClientConfig{TLS: tc, HandshakeTimeout: 50 * time.Millisecond}); err == nil {
		t.Fatal("Dial to nothing succeeded")
	}
}

// A retry with the same key while the first attempt still runs attaches to
// it: both streams get every token, the handler runs once, and the first
// stream's connection ending does not stop the work the second still
// wants. (A cancel would: see TestCancelStopsEveryFollower.)
func TestRetryAttachesToRunningGeneration(t *testing.T) {
	h := &scripted{n: 40, pauseAt: 20, paused: make(chan struct{}), release: make(chan struct{})}
	s := startServer(t, h)
	c1 := dial(t, s.Addr().String(), "dev-1")
	c2 := dial(t, s.Addr().String(), "dev-1")
	r := req("attach")
	r.IdempotencyKey = "attach-1"

	got1 := make(chan int, 1)
	go func() {
		toks, _, _ := collect(guardCtx(t), c1, r)
		got1 <- len(toks)
	}()
	<-h.paused
	type result struct {
		toks []llm.Token
		err  error
	}
	res2 := make(chan result, 1)
	go func() {
		toks, _, err := collect(guardCtx(t), c2, r)
		res2 <- result{toks, err}
	}()
	waitFor(t, "the retry to attach", func() bool { return s.Stats().Attached == 1 })
	c1.Close() // the first device connection ends (e.g. the agent restarted)
	if n := <-got1; n > 20 {
		t.Fatalf("first stream got %d tokens before the pause", n)
	}
	close(h.release)
	r2 := <-res2
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	checkTokens(t, r2.toks, 40)
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// Everyone leaving a keyed generation cancels it, and a later retry runs it
// afresh: nothing was delivered that it could duplicate.
//
// The handler lingers after its cancellation (it reports the cause, then
// returns only once the test lets it), so the retry always arrives while
// the abandoned generation is still in the dedupe table: the window that
// made this test fail once under -race, when the retry joined the
// cancelled run instead of starting its own.
func TestAbandonedGenerationIsForgotten(t *testing.T) {
	b := &lingerer{blocker: newBlocker(), linger: make(chan struct{})}
	s := startServer(t, b)
	defer b.let()
	c := dial(t, s.Addr().String(), "dev-1")
	r := req("abandon")
	r.IdempotencyKey = "abandon-1"
	for range 2 {
		ctx, cancel := context.WithCancel(guardCtx(t))
		errc := make(chan error, 1)
		go func() {
			_, _, err := collect(ctx, c, r)
			errc <- err
		}()
		select { // a request that fails before its generation starts would leave the test waiting
		case <-b.started:
		case err := <-errc:
			cancel()
			t.Fatalf("the request ended before its generation started: %v", err)
		}
		cancel()
		<-errc
		if cause := <-b.cause; cause == nil {
			t.Fatal("generation not cancelled")
		}
	}
	b.let()
	if st := s.Stats(); st.Generations != 2 || st.Attached != 0 {
		t.Fatalf("stats %+v: the retry should have run afresh", st)
	}
}

// A peer that breaks the protocol gets a clear error on that stream; the
// connection and other streams carry on.
func TestProtocolErrors(t *testing.T) {
	h := &scripted{n: 2}
	s := startServer(t, h)
	tc, err := pki.DeviceTLS(testPKI(t), "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	tc.NextProtos, tc.ServerName = []string{ALPN}, "localhost"
	conn, err := quicgo.DialAddr(guardCtx(t), s.Addr().String(), tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	for _, c := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"future version", []byte{9, 1, 0, 0, 0, 0}, "unsupported version 9"},
		{"unknown type", []byte{1, 77, 0, 0, 0, 0}, "unknown frame type 77"},
		{"token first", mustFrame(t, &Frame{Type: FrameToken}), "want request"},
		{"oversized", []byte{1, 1, 0xff, 0xff, 0xff, 0xff}, "over the"},
	} {
		t.Run(c.name, func(t *testing.T) {
			str, err := conn.OpenStreamSync(guardCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			str.Write(c.raw)
			f, err := newFrameReader(str).next()
			if err != nil || f.Type != FrameError || f.Err.Code != llm.CodeInvalid || !strings.Contains(f.Err.Message, c.want) {
				t.Fatalf("got %+v %v, want an invalid_request error frame mentioning %q", f.Err, err, c.want)
			}
			str.CancelRead(0)
			str.Close()
		})
	}
	// The same connection still serves a valid request.
	str, err := conn.OpenStreamSync(guardCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	str.Write(mustFrame(t, &Frame{Type: FrameRequest, Request: req("ok")}))
	fr := newFrameReader(str)
	var types []FrameType
	for {
		f, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, f.Type)
		if f.Type == FrameFinal {
			break
		}
	}
	str.Close()
	if fmt.Sprint(types) != "[token token final]" {
		t.Fatalf("frames %v", types)
	}
	if s.Stats().ProtocolErrors != 4 {
		t.Fatalf("protocol errors counted: %d", s.Stats().ProtocolErrors)
	}
	// A peer without our ALPN does not get in.
	other := tc.Clone()
	other.NextProtos = []string{"h3"}
	if c, err := quicgo.DialAddr(guardCtx(t), s.Addr().String(), other, nil); err == nil {
		c.CloseWithError(0, "")
		t.Fatal("handshake with a foreign ALPN succeeded")
	}
}

func mustFrame(t *testing.T, f *Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfigValidation(t *testing.T) {
	dir := testPKI(t)
	srvTLS, _ := pki.ServerTLS(dir)
	devTLS, _ := pki.DeviceTLS(dir, "dev-1")
	h := &scripted{}
	noClientAuth := srvTLS.Clone()
	noClientAuth.ClientAuth = tls.NoClientCert
	for name, cfg := range map[string]ServerConfig{
		"Addr":              {TLS: srvTLS, Handler: h},
		"TLS":               {Addr: ":0", Handler: h},
		"TLS.ClientAuth":    {Addr: ":0", TLS: noClientAuth, Handler: h},
		"Handler":           {Addr: ":0", TLS: srvTLS},
		"MaxStreamsPerConn": {Addr: ":0", TLS: srvTLS, Handler: h, MaxStreamsPerConn: -1},
		"KeepAlivePeriod":   {Addr: ":0", TLS: srvTLS, Handler: h, KeepAlivePeriod: time.Minute, MaxIdleTimeout: time.Second},
	} {
		if _, err := NewServer(cfg); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("server config without a good %s: %v", name, err)
		}
	}
	for name, cfg := range map[string]ClientConfig{
		"TLS":             {},
		"Certificates":    {TLS: &tls.Config{}},
		"Backoff.Factor":  {TLS: devTLS, Backoff: Backoff{Factor: 0.5}},
		"LocalAddr":       {TLS: devTLS, LocalAddr: "not an address"},
		"KeepAlivePeriod": {TLS: devTLS, KeepAlivePeriod: time.Minute, MaxIdleTimeout: time.Second},
	} {
		if _, err := Dial(context.Background(), "127.0.0.1:1", cfg); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("client config without a good %s: %v", name, err)
		}
	}
	if _, err := Dial(context.Background(), "no-port", ClientConfig{TLS: devTLS}); err == nil {
		t.Error("address without a port accepted")
	}
}

func TestDedupeTableExpiry(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	tab := newDedupeTable(time.Minute, 2, clock)
	nop := func(error) {}
	finish := func(g *generation, err error) {
		g.finish(llm.Final{}, err, clock())
		tab.finished(g)
	}

	a, created := tab.join("a", [32]byte{}, nop)
	if !created {
		t.Fatal("first join did not create")
	}
	if again, created := tab.join("a", [32]byte{}, nop); created || again != a {
		t.Fatal("second join did not attach")
	}
	finish(a, nil)
	advance(30 * time.Second)
	if _, created := tab.join("a", [32]byte{}, nop); created {
		t.Fatal("finished entry forgotten inside the TTL")
	}
	advance(31 * time.Second)
	if _, created := tab.join("a", [32]byte{}, nop); !created {
		t.Fatal("entry kept past the TTL")
	}

	// Cancelled and retryable failures are forgotten at once.
	for _, err := range []error{context.Canceled, &llm.Error{Code: llm.CodeOverloaded, Retryable: true}} {
		g, _ := tab.join("c", [32]byte{}, nop)
		finish(g, err)
		if _, created := tab.join("c", [32]byte{}, nop); !created {
			t.Fatalf("entry kept after %v", err)
		}
		delete(tab.entries, "c")
	}
	// A final failure is remembered like a success.
	g, _ := tab.join("f", [32]byte{}, nop)
	finish(g, &llm.Error{Code: llm.CodeInvalid})
	if _, created := tab.join("f", [32]byte{}, nop); created {
		t.Fatal("final failure forgotten")
	}

	// Over MaxEntries, the oldest finished entries go first.
	tab = newDedupeTable(time.Hour, 2, clock)
	for _, k := range []string{"1", "2", "3"} {
		g, _ := tab.join(k, [32]byte{}, nop)
		finish(g, nil)
	}
	if tab.len() != 2 {
		t.Fatalf("%d entries, want 2", tab.len())
	}
	if _, created := tab.join("1", [32]byte{}, nop); !created {
		t.Fatal("oldest entry kept over the limit")
	}
}

// lingerer is a blocker whose Generate, once cancelled and its cause
// reported, returns only after let.
type lingerer struct {
	*blocker
	linger chan struct{}
	once   sync.Once
}

func (l *lingerer) Generate(ctx context.Context, r *llm.Request, emit llm.Emit) (llm.Final, error) {
	f, err := l.blocker.Generate(ctx, r, emit)
	<-l.linger
	return f, err
}

func (l *lingerer) let() { l.once.Do(func() { close(l.linger) }) }

// TestDedupeRetryAfterAbandon is the window behind the flake of
// TestAbandonedGenerationIsForgotten, step by step: every follower left (so
// the run was cancelled) but its handler has not returned, or has ended
// but finished has not removed it yet. A retry in either state must start
// a new generation, not follow the cancelled one; the late finished of the
// old run must not remove the new one.
func TestDedupeRetryAfterAbandon(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newDedupeTable(time.Minute, 16, func() time.Time { return now })
	var cause error
	old, _ := tab.join("k", [32]byte{}, func(err error) { cause = err })
	old.leave(nil, leftDone, 0)
	if cause != errNoFollowers {
		t.Fatalf("last follower leaving: cause %v", cause)
	}
	retry, created := tab.join("k", [32]byte{}, func(error) {})
	if !created || retry == old {
		t.Fatal("a retry joined a generation its every follower had left")
	}
	old.finish(llm.Final{}, cause, now)
	tab.finished(old)
	if again, created := tab.join("k", [32]byte{}, func(error) {}); created || again != retry {
		t.Fatal("the cancelled run's finish removed the retry's generation")
	}

	// Ended cancelled, not yet removed by finished.
	g, _ := tab.join("e", [32]byte{}, func(error) {})
	g.finish(llm.Final{}, context.Canceled, now)
	if g2, created := tab.join("e", [32]byte{}, func(error) {}); !created || g2 == g {
		t.Fatal("a retry joined a cancelled generation before finished removed it")
	}
}

// TestReplayLimit: a keyed answer far longer than MaxReplayBytes streams
// whole, while the server never buffers more than the limit (tokens the
// stream has written are dropped from the front), and nothing stays
// buffered once it was delivered.
func TestReplayLimit(t *testing.T) {
	const limit, n = 10_000, 2000
	var srv atomic.Pointer[testServer]
	var peak atomic.Int64
	h := llmFunc(func(ctx context.Context, r *llm.Request, emit llm.Emit) (llm.Final, error) {
		for i := range n {
			if err := emit(llm.Token{Text: strings.Repeat("x", 100), ID: int32(i)}); err != nil {
				return llm.Final{}, err
			}
			if b := srv.Load().Stats().BufferedBytes; b > peak.Load() {
				peak.Store(b)
			}
		}
		return llm.Final{CompletionTokens: n}, nil
	})
	s := startServer(t, h, func(sc *ServerConfig) { sc.MaxReplayBytes = limit })
	srv.Store(s)
	c := dial(t, s.Addr().String(), "dev-1")
	r := req("big")
	r.IdempotencyKey = ResumeKeyPrefix + "big-1"
	toks, _, err := collect(guardCtx(t), c, r)
	if err != nil || len(toks) != n {
		t.Fatalf("%d tokens, err %v: want the whole answer", len(toks), err)
	}
	if p := peak.Load(); p > limit || p == 0 {
		t.Fatalf("buffered up to %d bytes, limit %d", p, limit)
	}
	waitFor(t, "the delivered answer to be freed", func() bool { return s.Stats().BufferedBytes == 0 })
}

// Every way a request can end — done, failed, cancelled, keyed or not —
// must give its stream back: with room for two streams, a leak shows as a
// request that can never open one (the hang guard fails the test).
func TestStreamCreditReturnedOnEveryOutcome(t *testing.T) {
	h := llmFunc(func(ctx context.Context, r *llm.Request, emit llm.Emit) (llm.Final, error) {
		if err := emit(llm.Token{Text: "a"}); err != nil {
			return llm.Final{}, err
		}
		switch {
		case strings.HasPrefix(r.ID, "block"):
			<-ctx.Done()
			return llm.Final{}, ctx.Err()
		case strings.HasPrefix(r.ID, "fail"):
			return llm.Final{}, llm.Errorf(llm.CodeOverloaded, "busy")
		}
		return llm.Final{CompletionTokens: 1}, nil
	})
	s := startServer(t, h, func(sc *ServerConfig) { sc.MaxStreamsPerConn = 2 })
	c := dial(t, s.Addr().String(), "dev-1")
	for i := range 12 {
		for _, kind := range []string{"ok", "fail", "block"} {
			r := req(fmt.Sprintf("%s-%d", kind, i))
			if i%2 == 1 {
				r.IdempotencyKey = r.ID
			}
			ctx, cancel := context.WithCancel(guardCtx(t))
			_, err := c.Generate(ctx, r, func(llm.Token) error {
				if kind == "block" {
					cancel()
				}
				return nil
			})
			cancel()
			if want := map[string]llm.Code{"ok": "", "fail": llm.CodeOverloaded, "block": llm.CodeCancelled}[kind]; llm.CodeOf(err) != want {
				t.Fatalf("%s: %v, want code %q", r.ID, err, want)
			}
		}
	}
	if st := c.Link(); st.Reconnects != 0 {
		t.Fatalf("the connection was replaced: %+v", st)
	}
}

// A client that redials a dead cloud with 0-RTT gets a connection whose
// handshake never completes. A request without an idempotency key waits for
// the handshake; it must give up when that connection dies, not hang until
// the caller's deadline.
func TestUnkeyedRequestDoesNotHangOnDeadRedial(t *testing.T) {
	h := &scripted{n: 5}
	s := startServer(t, h)
	addr := s.Addr().String()
	c := dial(t, addr, "dev-1", func(cc *ClientConfig) {
		// Long enough that the first, live handshake never expires on a
		// loaded machine; the dead redial is bounded by it, far inside
		// hangGuard.
		cc.HandshakeTimeout = 2 * time.Second
		cc.ConnectWait = 2 * time.Second
	})
	if _, _, err := collect(guardCtx(t), c, req("warm")); err != nil { // leaves a session ticket
		t.Fatal(err)
	}
	s.Close()
	ctx := guardCtx(t)
	_, _, err := collect(ctx, c, req("after"))
	if err == nil {
		t.Fatal("request to a dead cloud succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("request hung until the guard deadline: %v", err)
	}
	if code := llm.CodeOf(err); code != llm.CodeUnavailable {
		t.Fatalf("error %v has code %q, want unavailable", err, code)
	}
	// A redial the cloud never answered is not a link the router may use.
	if st := c.Link(); st.Connected {
		t.Fatalf("Link reports connected to a dead cloud: %+v", st)
	}
}
