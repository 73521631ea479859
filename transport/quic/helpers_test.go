package quic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hangGuard bounds waits that should finish quickly; it never decides a
// pass on timing, it only turns a hang into a failure.
const hangGuard = 30 * time.Second

var (
	pkiOnce sync.Once
	pkiDir  string
	pkiErr  error
)

// testPKI is one fleet PKI shared by the package's tests (key generation is
// the slow part), with devices dev-1, dev-2 and dev-3.
func testPKI(t testing.TB) string {
	t.Helper()
	pkiOnce.Do(func() {
		pkiDir, pkiErr = os.MkdirTemp("", "phaseless-quic-pki-")
		if pkiErr == nil {
			pkiErr = pki.EnsureDev(pkiDir, "dev-1", "dev-2", "dev-3")
		}
	})
	if pkiErr != nil {
		t.Fatal(pkiErr)
	}
	return pkiDir
}

type testServer struct {
	*Server
	done chan error
}

func startServer(t testing.TB, h llm.Generator, mods ...func(*ServerConfig)) *testServer {
	t.Helper()
	tc, err := pki.ServerTLS(testPKI(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := ServerConfig{Addr: "127.0.0.1:0", TLS: tc, Handler: h}
	for _, m := range mods {
		m(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { ts.done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ts.done; err != nil && !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func dial(t testing.TB, addr string, device string, mods ...func(*ClientConfig)) *Client {
	t.Helper()
	tc, err := pki.DeviceTLS(testPKI(t), device)
	if err != nil {
		t.Fatal(err)
	}
	// The stall watchdog's 1.2 s default is a wall-clock bound that a loaded
	// CI machine can exceed between two heartbeats (TestConnectionMigration
	// failed so at load average 25); tests that are about stalls set their own.
	cfg := ClientConfig{TLS: tc, Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}, StallTimeout: hangGuard}
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	c, err := Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// collect runs req through g and returns the tokens emitted.
func collect(ctx context.Context, g llm.Generator, req *llm.Request) ([]llm.Token, llm.Final, error) {
	var toks []llm.Token
	f, err := g.Generate(ctx, req, func(t llm.Token) error {
		toks = append(toks, t)
		return nil
	})
	return toks, f, err
}

func guardCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// scripted emits n tokens "t0".."t<n-1>" with ids 0..n-1, records every
// request it ran, and can pause after `pauseAt` tokens until release is
// closed.
type scripted struct {
	n       int
	calls   atomic.Int64
	mu      sync.Mutex // guards reqs
	reqs    []*llm.Request
	pauseAt int
	paused  chan struct{} // closed when the pause point is reached
	release chan struct{}
	meta    llm.Meta // sent as the begin event when set
}

func (s *scripted) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	s.calls.Add(1)
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	if s.meta != (llm.Meta{}) {
		m := s.meta
		if err := emit(llm.Token{Meta: &m}); err != nil {
			return llm.Final{}, err
		}
	}
	start := time.Now()
	for i := range s.n {
		if s.release != nil && i == s.pauseAt && s.calls.Load() == 1 {
			close(s.paused)
			select {
			case <-s.release:
			case <-ctx.Done():
				return llm.Final{}, context.Cause(ctx)
			}
		}
		if err := emit(llm.Token{Text: fmt.Sprintf("t%d ", i), ID: int32(i), EngineLatency: time.Duration(i) * time.Microsecond}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: len(req.Messages), CompletionTokens: s.n, FinishReason: "stop", Total: time.Since(start)}, nil
}

// request returns the i-th request the handler ran.
func (s *scripted) request(i int) *llm.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[i]
}

func checkTokens(t testing.TB, toks []llm.Token, n int) {
	t.Helper()
	if len(toks) != n {
		t.Fatalf("got %d tokens, want %d", len(toks), n)
	}
	for i, tk := range toks {
		if tk.ID != int32(i) || tk.Text != fmt.Sprintf("t%d ", i) {
			t.Fatalf("token %d = %+v, out of order or corrupt", i, tk)
		}
	}
}

func req(id string) *llm.Request {
	return &llm.Request{ID: id, Model: "auto", MaxTokens: 100, Messages: []llm.Message{{Role: "user", Content: "hello " + id}}}
}

// udpRelay forwards datagrams between clients and a server on loopback,
// dropping and delaying them at random: a lossy, jittery link that also
// reorders. It can record what clients send, to replay it later.
type udpRelay struct {
	front  *net.UDPConn
	target *net.UDPAddr
	drop   float64
	jitter time.Duration

	mu       sync.Mutex // guards rng, sessions, recorded, dropped, closed
	rng      *rand.Rand
	sessions map[string]*net.UDPConn
	recorded [][]byte
	record   bool
	// hold0RTT holds server datagrams back until the client has sent a
	// 0-RTT packet, so that packet still carries the client's original
	// destination connection ID and a replay of the flight reaches a new
	// server connection whatever the scheduling.
	hold0RTT bool
	held     []func()
	// dropUp, when set, picks one client datagram to drop (then unsets).
	dropUp  func([]byte) bool
	dropped [2]int // [0] client→server, [1] server→client
	closed  bool
	wg      sync.WaitGroup
}

func newRelay(t testing.TB, target net.Addr, drop float64, jitter time.Duration) *udpRelay {
	t.Helper()
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &udpRelay{front: front, target: target.(*net.UDPAddr), drop: drop, jitter: jitter,
		rng: rand.New(rand.NewPCG(1, 2)), sessions: map[string]*net.UDPConn{}}
	r.wg.Add(1)
	go r.fromClients()
	t.Cleanup(r.Close)
	return r
}

func (r *udpRelay) Addr() string { return r.front.LocalAddr().String() }

// fate decides a datagram's drop and delay; dir is 0 upstream, 1 down.
func (r *udpRelay) fate(dir int) (bool, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drop > 0 && r.rng.Float64() < r.drop {
		r.dropped[dir]++
		return true, 0
	}
	if r.jitter > 0 {
		return false, time.Duration(r.rng.Int64N(int64(r.jitter)))
	}
	return false, 0
}

func (r *udpRelay) send(dir int, write func([]byte) error, p []byte) {
	drop, d := r.fate(dir)
	if drop {
		return
	}
	if d == 0 {
		write(p)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.wg.Add(1)
	time.AfterFunc(d, func() {
		defer r.wg.Done()
		write(p)
	})
}

func (r *udpRelay) fromClients() {
	defer r.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := r.front.ReadFromUDP(buf)
		if err != nil {
			return
		}
		p := append([]byte(nil), buf[:n]...)
		r.mu.Lock()
		if r.record {
			r.recorded = append(r.recorded, p)
		}
		if r.dropUp != nil && r.dropUp(p) {
			r.dropUp = nil
			r.dropped[0]++
			r.mu.Unlock()
			continue
		}
		var release []func()
		if r.hold0RTT && is0RTT(p) {
			r.hold0RTT, release, r.held = false, r.held, nil
		}
		back := r.sessions[from.String()]
		if back == nil && !r.closed {
			back, err = net.DialUDP("udp", nil, r.target)
			if err != nil {
				r.mu.Unlock()
				return
			}
			r.sessions[from.String()] = back
			r.wg.Add(1)
			go r.fromServer(back, from)
		}
		r.mu.Unlock()
		if back != nil {
			r.send(0, func(b []byte) error { _, err := back.Write(b); return err }, p)
		}
		for _, f := range release {
			f()
		}
	}
}

// is0RTT reports a QUIC v1 long-header 0-RTT packet (RFC 9000 §17.2; the
// type bits are not header-protected).
func is0RTT(p []byte) bool { return len(p) > 0 && p[0]&0x80 != 0 && p[0]&0x30 == 0x10 }

func (r *udpRelay) fromServer(back *net.UDPConn, client *net.UDPAddr) {
	defer r.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := back.Read(buf)
		if err != nil {
			return
		}
		p := append([]byte(nil), buf[:n]...)
		write := func() { r.send(1, func(b []byte) error { _, err := r.front.WriteToUDP(b, client); return err }, p) }
		r.mu.Lock()
		hold := r.hold0RTT
		if hold {
			r.held = append(r.held, write)
		}
		r.mu.Unlock()
		if !hold {
			write()
		}
	}
}

// Dropped returns the datagrams dropped upstream and downstream.
func (r *udpRelay) Dropped() (up, down int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped[0], r.dropped[1]
}

func (r *udpRelay) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.front.Close()
	for _, b := range r.sessions {
		b.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
