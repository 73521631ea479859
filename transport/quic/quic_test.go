package quic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
)

func TestStreamOrderAndCompleteness(t *testing.T) {
	h := &scripted{n: 1000, meta: llm.Meta{Route: llm.RouteCloud, Pool: "decode-heavy", Worker: "w0", SchedulerHint: "MFRGG"}}
	s := startServer(t, h)
	c := dial(t, s.Addr().String(), "dev-1")

	ctx := guardCtx(t)
	var toks []llm.Token
	var begin *llm.Meta
	r := req("order")
	r.Stop, r.Temperature, r.Hints.Prefetch = []string{"<|"}, 0.4, "high"
	r.Tenant = "forged" // the server must overwrite it from the certificate
	final, err := c.Generate(ctx, r, func(tk llm.Token) error {
		if tk.Meta != nil {
			if begin != nil || len(toks) > 0 {
				t.Errorf("begin event %+v after %d tokens", tk.Meta, len(toks))
			}
			begin = tk.Meta
			return nil
		}
		toks = append(toks, tk)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkTokens(t, toks, 1000)
	if toks[999].EngineLatency != 999*time.Microsecond {
		t.Errorf("engine latency %v not carried", toks[999].EngineLatency)
	}
	if final.CompletionTokens != 1000 || final.FinishReason != "stop" || final.PromptTokens != 1 {
		t.Errorf("final %+v", final)
	}
	if begin == nil || *begin != h.meta {
		t.Errorf("begin event before the first token: %+v, want %+v", begin, h.meta)
	}
	got := h.request(0)
	if got.Tenant != "dev-1" {
		t.Errorf("tenant %q, want the certificate's device id", got.Tenant)
	}
	if got.ID != "order" || got.Stop[0] != "<|" || got.Temperature != 0.4 || got.Hints.Prefetch != "high" {
		t.Errorf("request not carried intact: %+v", got)
	}

	// A second device on its own connection is told apart.
	c2 := dial(t, s.Addr().String(), "dev-2")
	if _, _, err := collect(guardCtx(t), c2, req("two")); err != nil {
		t.Fatal(err)
	}
	if tenant := h.request(1).Tenant; tenant != "dev-2" {
		t.Errorf("second device tenant %q", tenant)
	}
	if st := c.Link(); !st.Connected || st.SmoothedRTT <= 0 {
		t.Errorf("link %+v", st)
	}
}

// blocker emits one token and then waits for its context, reporting the
// cause.
type blocker struct {
	started chan struct{}
	cause   chan error
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 16), cause: make(chan error, 16)}
}

func (b *blocker) Generate(ctx context.Context, _ *llm.Request, emit llm.Emit) (llm.Final, error) {
	if err := emit(llm.Token{Text: "first"}); err != nil {
		b.cause <- err
		return llm.Final{}, err
	}
	b.started <- struct{}{}
	<-ctx.Done()
	b.cause <- context.Cause(ctx)
	return llm.Final{}, context.Cause(ctx)
}

func TestClientCancelStopsServerWork(t *testing.T) {
	b := newBlocker()
	s := startServer(t, b)
	c := dial(t, s.Addr().String(), "dev-1")

	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			ctx, cancel := context.WithCancel(guardCtx(t))
			r := req("cancel")
			if keyed {
				r.IdempotencyKey = "cancel-key"
			}
			errc := make(chan error, 1)
			go func() {
				_, err := c.Generate(ctx, r, func(llm.Token) error { return nil })
				errc <- err
			}()
			<-b.started
			cancel()
			err := <-errc
			if llm.CodeOf(err) != llm.CodeCancelled || !errors.Is(err, context.Canceled) {
				t.Fatalf("client error %v (code %s), want cancelled", err, llm.CodeOf(err))
			}
			select {
			case cause := <-b.cause:
				if cause == nil {
					t.Fatal("server context ended without a cause")
				}
			case <-time.After(hangGuard):
				t.Fatal("server never saw the cancellation")
			}
		})
	}

	// An emit that fails (the app went away) cancels the server side too.
	stop := errors.New("app closed the response")
	_, err := c.Generate(guardCtx(t), req("emit-fails"), func(llm.Token) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("error %v, want the emit error", err)
	}
	select {
	case <-b.cause:
	case <-time.After(hangGuard):
		t.Fatal("server never saw the cancellation after emit failed")
	}
	<-b.started
}

type failing struct{ after int }

func (f failing) Generate(ctx context.Context, _ *llm.Request, emit llm.Emit) (llm.Final, error) {
	for i := range f.after {
		if err := emit(llm.Token{Text: "x", ID: int32(i)}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{}, &llm.Error{Code: llm.CodeOverloaded, Message: "decode pool full", Retryable: true, RetryAfter: 3 * time.Second}
}

func TestServerFailureIsTypedOnClient(t *testing.T) {
	s := startServer(t, failing{after: 3})
	c := dial(t, s.Addr().String(), "dev-1")
	toks, _, err := collect(guardCtx(t), c, req("fail"))
	var le *llm.Error
	if !errors.As(err, &le) {
		t.Fatalf("error %T %v, want *llm.Error", err, err)
	}
	if le.Code != llm.CodeOverloaded || !le.Retryable || le.Message != "decode pool full" || le.RetryAfter != 3*time.Second {
		t.Errorf("error %+v", le)
	}
	if len(toks) != 3 {
		t.Errorf("%d tokens before the error, want 3", len(toks))
	}
}

func TestServerShutdownEndsClientRead(t *testing.T) {
	b := newBlocker()
	s := startServer(t, b)
	c := dial(t, s.Addr().String(), "dev-1", func(cc *ClientConfig) { cc.ConnectWait = 50 * time.Millisecond })
	errc := make(chan error, 1)
	go func() {
		_, _, err := collect(guardCtx(t), c, req("shutdown"))
		errc <- err
	}()
	<-b.started
	s.Close()
	err := <-errc
	var le *llm.Error
	if !errors.As(err, &le) || le.Code != llm.CodeUnavailable || !le.Retryable {
		t.Fatalf("error %v, want a retryable unavailable *llm.Error", err)
	}
	if cause := <-b.cause; !errors.Is(cause, ErrServerClosed) && cause == nil {
		t.Fatalf("handler cause %v", cause)
	}
}

func TestAuthRefused(t *testing.T) {
	h := &scripted{n: 1}
	s := startServer(t, h)
	ours, err := pki.DeviceTLS(testPKI(t), "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := pki.EnsureDev(other, "dev-1"); err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.DeviceTLS(other, "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	foreign.RootCAs = ours.RootCAs // it trusts our cloud, but our cloud does not trust it

	noCert := ours.Clone()
	noCert.Certificates = nil
	noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }

	if _, err := Dial(guardCtx(t), s.Addr().String(), ClientConfig{TLS: &tls.Config{RootCAs: ours.RootCAs}}); err == nil {
		t.Fatal("Dial without a certificate passed validation")
	}
	for name, tc := range map[string]*tls.Config{"foreign CA": foreign, "no certificate": noCert} {
		t.Run(name, func(t *testing.T) {
			refused := s.Stats().RefusedHandshakes
			cfg := ClientConfig{TLS: tc, ConnectWait: 100 * time.Millisecond, Backoff: Backoff{Initial: time.Second, Max: time.Second}}
			c, err := Dial(guardCtx(t), s.Addr().String(), cfg)
			if err == nil {
				// TLS 1.3 finishes the client's side before the server
				// checks its certificate: the refusal arrives as the
				// connection closes.
				defer c.Close()
				_, _, err = collect(guardCtx(t), c, req("auth"))
			}
			var le *llm.Error
			if !errors.As(err, &le) || le.Code != llm.CodeAuth {
				t.Fatalf("error %v, want an authentication failure", err)
			}
			if c != nil && c.Link().LastError == "" {
				t.Error("link state does not say why")
			}
			deadline := time.Now().Add(hangGuard)
			for s.Stats().RefusedHandshakes == refused && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if s.Stats().RefusedHandshakes == refused {
				t.Error("server did not count the refused handshake")
			}
		})
	}
	if h.calls.Load() != 0 {
		t.Fatalf("handler ran %d times for unauthenticated clients", h.calls.Load())
	}
}

func TestReconnectAfterServerRestart(t *testing.T) {
	h := &scripted{n: 20}
	s1 := startServer(t, h)
	addr := s1.Addr().String()
	c := dial(t, addr, "dev-1", func(cc *ClientConfig) { cc.ConnectWait = hangGuard })
	if _, _, err := collect(guardCtx(t), c, req("before")); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	deadline := time.Now().Add(hangGuard)
	for c.Link().Connected && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := c.Link(); st.Connected || st.LastError == "" {
		t.Fatalf("after shutdown: %+v", st)
	}
	startServer(t, h, func(sc *ServerConfig) { sc.Addr = addr })
	toks, _, err := collect(guardCtx(t), c, req("after"))
	if err != nil {
		t.Fatal(err)
	}
	checkTokens(t, toks, 20)
	if st := c.Link(); !st.Connected || st.Reconnects < 1 {
		t.Fatalf("after restart: %+v", st)
	}
}

func TestThousandConcurrentStreams(t *testing.T) {
	const n = 1000
	var inFlight atomic.Int64
	all := make(chan struct{})
	h := llmFunc(func(ctx context.Context, r *llm.Request, emit llm.Emit) (llm.Final, error) {
		if inFlight.Add(1) == n {
			close(all)
		}
		// Every request waits until all n run at once: the test fails
		// (by its hang guard) unless the connection carries n streams.
		select {
		case <-all:
		case <-ctx.Done():
			return llm.Final{}, ctx.Err()
		}
		for i := range 5 {
			if err := emit(llm.Token{Text: fmt.Sprintf("%s/%d", r.ID, i), ID: int32(i)}); err != nil {
				return llm.Final{}, err
			}
		}
		return llm.Final{CompletionTokens: 5}, nil
	})
	s := startServer(t, h, func(sc *ServerConfig) { sc.MaxStreamsPerConn = n })
	c := dial(t, s.Addr().String(), "dev-1", func(cc *ClientConfig) {
		cc.MaxStreams = n
		// Both ends of a thousand streams in one process under -race on
		// two shared cores can keep quic-go's loops from reading a packet
		// for longer than the 1.2 s stall timeout; in production each end
		// has its own process. This test is about stream limits, so the
		// stall detector waits as long as the hang guard.
		cc.StallTimeout = hangGuard
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("r%d", i)
			toks, f, err := collect(guardCtx(t), c, req(id))
			if err == nil && (len(toks) != 5 || toks[4].Text != id+"/4" || f.CompletionTokens != 5) {
				err = fmt.Errorf("%s: %d tokens, final %+v", id, len(toks), f)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

type llmFunc func(context.Context, *llm.Request, llm.Emit) (llm.Final, error)

func (f llmFunc) Generate(ctx context.Context, r *llm.Request, e llm.Emit) (llm.Final, error) {
	return f(ctx, r, e)
}

func TestLossyLink(t *testing.T) {
	const streams, tokens = 20, 500
	h := &scripted{n: tokens}
	s := startServer(t, h)
	relay := newRelay(t, s.Addr(), 0.1, 15*time.Millisecond)
	c := dial(t, relay.Addr(), "dev-1", func(cc *ClientConfig) { cc.TLS.ServerName = "localhost" })
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Go(func() {
			toks, _, err := collect(guardCtx(t), c, req(fmt.Sprint(i)))
			if err == nil && len(toks) != tokens {
				err = fmt.Errorf("%d tokens", len(toks))
			}
			for j, tk := range toks {
				if tk.ID != int32(j) {
					err = fmt.Errorf("token %d has id %d", j, tk.ID)
					break
				}
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	up, down := relay.Dropped()
	if up == 0 || down == 0 {
		t.Fatalf("the relay dropped %d datagrams up and %d down: the test did not exercise loss both ways", up, down)
	}
	st := c.Link()
	t.Logf("relay dropped %d up, %d down; client counted %d/%d of its packets lost, srtt %v", up, down, st.PacketsLost, st.PacketsSent, st.SmoothedRTT)
}

func TestConnectionMigration(t *testing.T) {
	h := &scripted{n: 100, pauseAt: 50, paused: make(chan struct{}), release: make(chan struct{})}
	s := startServer(t, h)
	var mu sync.Mutex
	var socks []*cuttableConn
	c := dial(t, s.Addr().String(), "dev-1", func(cc *ClientConfig) {
		cc.LocalAddr = "127.0.0.1:0"
		cc.listenPacket = func(la *net.UDPAddr) (net.PacketConn, error) {
			u, err := net.ListenUDP("udp", la)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			socks = append(socks, &cuttableConn{u: u})
			return socks[len(socks)-1], nil
		}
	})
	before := c.Link().LocalAddr
	type result struct {
		toks []llm.Token
		err  error
	}
	res := make(chan result, 1)
	go func() {
		toks, _, err := collect(guardCtx(t), c, req("migrate"))
		res <- result{toks, err}
	}()
	<-h.paused
	if err := c.Migrate(guardCtx(t)); err != nil {
		t.Fatal(err)
	}
	after := c.Link().LocalAddr
	// The old socket goes dark: the second half of the stream, and the
	// final, can only arrive over the new one.
	mu.Lock()
	socks[0].cut.Store(true)
	mu.Unlock()
	close(h.release)
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	checkTokens(t, r.toks, 100)
	if before == after {
		t.Fatalf("local address unchanged: %s", after)
	}
	if _, _, err := collect(guardCtx(t), c, req("after-migration")); err != nil {
		t.Fatal(err)
	}
	if st := c.Link(); st.Reconnects != 0 || !st.Connected {
		t.Fatalf("migration reconnected instead: %+v", st)
	}
}

// cuttableConn is a UDP socket that can be made to drop everything, like a
// network interface that went away. It hides *net.UDPConn's other methods
// so quic-go uses exactly these.
type cuttableConn struct {
	u   *net.UDPConn
	cut atomic.Bool
}

func (c *cuttableConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.cut.Load() {
		return len(p), nil
	}
	return c.u.WriteTo(p, addr)
}

func (c *cuttableConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.u.ReadFrom(p)
		if err != nil || !c.cut.Load() {
			return n, addr, err
		}
	}
}

func (c *cuttableConn) Close() error                       { return c.u.Close() }
func (c *cuttableConn) LocalAddr() net.Addr                { return c.u.LocalAddr() }
func (c *cuttableConn) SetDeadline(t time.Time) error      { return c.u.SetDeadline(t) }
func (c *cuttableConn) SetReadDeadline(t time.Time) error  { return c.u.SetReadDeadline(t) }
func (c *cuttableConn) SetWriteDeadline(t time.Time) error { return c.u.SetWriteDeadline(t) }
