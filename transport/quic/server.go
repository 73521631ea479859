package quic

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
)

// ServerConfig configures a Server. Zero values mean the defaults named on
// each field.
type ServerConfig struct {
	// Addr is the UDP address to listen on, e.g. ":4433".
	Addr string
	// PacketConn, when set, is served instead of listening on Addr. The
	// server does not close it.
	PacketConn net.PacketConn
	// TLS must require and verify client certificates (pki.ServerTLS). The
	// server adds the ALPN and its own session-ticket handling to a copy.
	TLS *tls.Config
	// Handler runs each request; the cloud plugs its scheduler in here.
	Handler llm.Generator
	// MaxStreamsPerConn bounds concurrent requests per device connection
	// (QUIC MaxIncomingStreams). Default DefaultMaxStreams.
	MaxStreamsPerConn int
	// KeepAlivePeriod, MaxIdleTimeout and HandshakeTimeout default to the
	// cellular-tuned Default* values.
	KeepAlivePeriod  time.Duration
	MaxIdleTimeout   time.Duration
	HandshakeTimeout time.Duration
	// RequestTimeout bounds the wait for the request frame after a stream
	// opens, and for writing the last frame. Default 10 s.
	RequestTimeout time.Duration
	// DedupeTTL is how long a finished idempotent request is remembered, and
	// also the age beyond which a session ticket no longer allows 0-RTT, so
	// every replay the server accepts falls inside the window in which it is
	// recognised. Default 10 min.
	DedupeTTL time.Duration
	// DedupeMaxEntries bounds remembered idempotent requests; the oldest
	// finished ones go first. Default 100000.
	DedupeMaxEntries int
	// MaxReplayBytes bounds the tokens buffered per keyed request (resume.go):
	// past it, tokens every stream has written are dropped, and a
	// generation nobody follows pauses. Default DefaultMaxReplayBytes.
	MaxReplayBytes int
	// ResumeWindow is how long a keyed request whose stream lost its link
	// keeps running (and its answer stays buffered) for a resume frame to
	// pick it up (resume.go). Default DefaultResumeWindow; negative: none,
	// a lost link cancels the request at once.
	ResumeWindow time.Duration
	// Revoked, when set, is asked for every request's device: a revoked
	// device's requests are refused and its connection closed, even on a
	// connection or 0-RTT session established before the revocation
	// (pki.DenyList.Revoked; the handshake refuses new ones, pki.DenyRevoked).
	Revoked func(deviceID string) bool
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Now is the clock for dedupe expiry and ticket age; default time.Now.
	Now func() time.Time
}

func (c *ServerConfig) fillDefaults() {
	if c.MaxStreamsPerConn == 0 {
		c.MaxStreamsPerConn = DefaultMaxStreams
	}
	if c.KeepAlivePeriod == 0 {
		c.KeepAlivePeriod = DefaultKeepAlivePeriod
	}
	if c.MaxIdleTimeout == 0 {
		c.MaxIdleTimeout = DefaultMaxIdleTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.DedupeTTL == 0 {
		c.DedupeTTL = 10 * time.Minute
	}
	if c.DedupeMaxEntries == 0 {
		c.DedupeMaxEntries = 100_000
	}
	if c.MaxReplayBytes == 0 {
		c.MaxReplayBytes = DefaultMaxReplayBytes
	}
	if c.ResumeWindow == 0 {
		c.ResumeWindow = DefaultResumeWindow
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate names the first bad field.
func (c *ServerConfig) Validate() error {
	switch {
	case c.Addr == "" && c.PacketConn == nil:
		return errors.New("quic server config: Addr: required unless PacketConn is set")
	case c.TLS == nil:
		return errors.New("quic server config: TLS: required (pki.ServerTLS)")
	case c.TLS.ClientAuth != tls.RequireAndVerifyClientCert:
		return errors.New("quic server config: TLS.ClientAuth: must be RequireAndVerifyClientCert; devices are known by their certificates")
	case c.Handler == nil:
		return errors.New("quic server config: Handler: required")
	case c.MaxStreamsPerConn < 0:
		return errors.New("quic server config: MaxStreamsPerConn: must not be negative")
	case c.KeepAlivePeriod < 0, c.MaxIdleTimeout < 0, c.HandshakeTimeout < 0, c.RequestTimeout < 0, c.DedupeTTL < 0:
		return errors.New("quic server config: timeouts must not be negative")
	case c.KeepAlivePeriod > 0 && c.MaxIdleTimeout > 0 && c.KeepAlivePeriod >= c.MaxIdleTimeout:
		return errors.New("quic server config: KeepAlivePeriod: must be shorter than MaxIdleTimeout")
	case c.DedupeMaxEntries < 0, c.MaxReplayBytes < 0:
		return errors.New("quic server config: DedupeMaxEntries and MaxReplayBytes must not be negative")
	}
	return nil
}

// ServerStats counts what the server has seen since it started.
type ServerStats struct {
	Conns             int64 // connections accepted
	RefusedHandshakes int64 // connections that never completed a handshake (bad or no certificate, replays)
	Streams           int64 // request streams opened
	Generations       int64 // handler runs
	Attached          int64 // keyed requests that joined an existing generation instead of running
	ProtocolErrors    int64 // streams reset for breaking the protocol
	Resumed           int64 // resume frames that rejoined a generation
	ResumeRefused     int64 // resume frames with no generation to rejoin
	BufferedBytes     int64 // bytes of tokens buffered for keyed requests now
	LossProbes        int64 // clients' loss probes received (probe.go)
}

// Server accepts device connections and runs their requests through Handler.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	udp    net.PacketConn
	ownUDP bool
	tr     *quicgo.Transport
	ln     *quicgo.EarlyListener
	dedupe *dedupeTable

	// base is cancelled by Close; generations of keyed requests hang off it
	// rather than off one connection, so a retry on a new connection can
	// attach to them.
	base       context.Context
	cancelBase context.CancelCauseFunc

	wg        sync.WaitGroup         // every connection, stream and generation goroutine
	mu        sync.Mutex             // guards conns, closed
	conns     map[*quicgo.Conn]*peer // nil until serveConn has one
	closed    bool
	closeOnce sync.Once
	closeErr  error

	nConns, refused, streams, generations, attached, protocolErrors, resumed, resumeRefused, lossProbes atomic.Int64
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("quic server closed")

// NewServer binds the UDP socket, so Addr is known before Serve runs.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tc := cfg.TLS.Clone()
	tc.NextProtos = []string{ALPN}
	if err := limitEarlyData(tc, cfg.DedupeTTL, cfg.Now); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, conns: map[*quicgo.Conn]*peer{}, dedupe: newDedupeTable(cfg.DedupeTTL, cfg.DedupeMaxEntries, cfg.Now)}
	s.udp = cfg.PacketConn
	if s.udp == nil {
		ua, err := net.ResolveUDPAddr("udp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("quic server: resolve %s: %w", cfg.Addr, err)
		}
		u, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, fmt.Errorf("quic server: listen %s: %w", cfg.Addr, err)
		}
		s.udp, s.ownUDP = u, true
	}
	s.tr = &quicgo.Transport{Conn: s.udp}
	ln, err := s.tr.ListenEarly(tc, &quicgo.Config{
		HandshakeIdleTimeout:  cfg.HandshakeTimeout,
		MaxIdleTimeout:        cfg.MaxIdleTimeout,
		KeepAlivePeriod:       cfg.KeepAlivePeriod,
		MaxIncomingStreams:    int64(cfg.MaxStreamsPerConn),
		MaxIncomingUniStreams: -1, // the protocol uses none
		Allow0RTT:             true,
		EnableDatagrams:       true, // clients' loss probes (probe.go)
	})
	if err != nil {
		s.tr.Close()
		if s.ownUDP {
			s.udp.Close()
		}
		return nil, fmt.Errorf("quic server: %w", err)
	}
	s.ln = ln
	s.base, s.cancelBase = context.WithCancelCause(context.Background())
	return s, nil
}

// Addr is the bound UDP address.
func (s *Server) Addr() net.Addr { return s.udp.LocalAddr() }

// Stats returns the counters so far.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Conns: s.nConns.Load(), RefusedHandshakes: s.refused.Load(), Streams: s.streams.Load(),
		Generations: s.generations.Load(), Attached: s.attached.Load(), ProtocolErrors: s.protocolErrors.Load(),
		Resumed: s.resumed.Load(), ResumeRefused: s.resumeRefused.Load(), BufferedBytes: s.dedupe.buffered.n.Load(),
		LossProbes: s.lossProbes.Load(),
	}
}

// Serve accepts connections until ctx ends or Close is called, then closes
// the server and waits for every request to stop. It returns nil when
// stopped that way.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	for {
		conn, err := s.ln.Accept(s.base)
		if err != nil {
			if s.base.Err() != nil {
				return s.Close()
			}
			s.Close()
			return fmt.Errorf("quic server: accept: %w", err)
		}
		if !s.track(conn) {
			conn.CloseWithError(connShutdown, "server shutting down")
			continue
		}
		s.nConns.Add(1)
		go s.serveConn(conn)
	}
}

// Close stops accepting, closes every connection, cancels every running
// request and waits for them. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns := make([]*quicgo.Conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		s.cancelBase(ErrServerClosed)
		s.ln.Close()
		for _, c := range conns {
			c.CloseWithError(connShutdown, "server shutting down")
		}
		s.wg.Wait()
		s.closeErr = s.tr.Close()
		if s.ownUDP {
			if err := s.udp.Close(); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// track registers conn and its goroutine unless the server is closing;
// wg.Add happens under mu so it never races Close's Wait.
func (s *Server) track(conn *quicgo.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = nil
	s.wg.Add(1)
	return true
}

// peer is what the server knows about the device at the other end of a
// connection, learnt once: quic-go's ConnectionState and RemoteAddr race with
// a path switch, and a client may migrate only after the handshake is
// confirmed (RFC 9000 §9), so both are read before that can happen.
type peer struct {
	written lastWrite // any frame on any of its streams, for heartbeats
	remote  string
	ready   chan struct{} // closed once id and err are set
	id      string
	err     error
}

func (s *Server) serveConn(conn *quicgo.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	p := &peer{remote: conn.RemoteAddr().String(), ready: make(chan struct{})}
	s.mu.Lock()
	s.conns[conn] = p
	s.mu.Unlock()
	identified := make(chan struct{})
	go func() {
		defer close(identified)
		defer close(p.ready)
		select {
		case <-conn.HandshakeComplete():
			if st := conn.ConnectionState().TLS; st.HandshakeComplete {
				p.id, p.err = pki.DeviceIDFromState(st)
			} else {
				p.err = fmt.Errorf("handshake failed: %w", context.Cause(conn.Context()))
			}
		case <-conn.Context().Done():
			p.err = context.Cause(conn.Context())
		}
	}()
	probes := make(chan struct{})
	go func() {
		defer close(probes)
		s.discardProbes(conn)
	}()
	for {
		str, err := conn.AcceptStream(conn.Context())
		if err != nil {
			break
		}
		s.wg.Add(1)
		go s.serveStream(conn, p, str)
	}
	<-identified
	<-probes
	if !conn.ConnectionState().TLS.HandshakeComplete {
		s.refused.Add(1)
		s.log.Warn("quic: handshake not completed", "remote", p.remote, "err", context.Cause(conn.Context()))
		return
	}
	s.log.Debug("quic: connection closed", "remote", p.remote, "device", p.id, "err", context.Cause(conn.Context()))
}

// identify returns the device id of the connection's client certificate. A
// request that arrived in 0-RTT is identified by the certificate in its
// session ticket (verified when the ticket was issued) only if it carries an
// idempotency key; any other request waits for the handshake to complete,
// so a replayed 0-RTT flight, which never completes, cannot run it.
func (s *Server) identify(ctx context.Context, conn *quicgo.Conn, p *peer, keyed bool) (string, error) {
	select {
	case <-p.ready:
		return p.id, p.err
	default:
	}
	if keyed {
		// Before the handshake completes no path switch can race this read.
		if st := conn.ConnectionState(); st.Used0RTT {
			if id, err := pki.DeviceIDFromState(st.TLS); err == nil {
				return id, nil
			}
		}
	}
	select {
	case <-p.ready:
		return p.id, p.err
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// streamWriter serialises frame writes on one stream.
type streamWriter struct {
	mu   sync.Mutex // guards buf and writes to str
	str  *quicgo.Stream
	buf  []byte
	conn *lastWrite // the connection's last write, for heartbeats (nil: none)
	// stopHeartbeat stops the heartbeat writer before the last frame and
	// the end of the stream (nil when none runs).
	stopHeartbeat func()
}

func (w *streamWriter) write(f *Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, err := AppendFrame(w.buf[:0], f)
	if err != nil {
		return err
	}
	w.buf = b
	_, err = w.str.Write(b)
	if w.conn != nil {
		w.conn.touch()
	}
	return err
}

func (s *Server) serveStream(conn *quicgo.Conn, p *peer, str *quicgo.Stream) {
	defer s.wg.Done()
	s.streams.Add(1)
	fr := newFrameReader(str)
	str.SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
	f, err := fr.next()
	str.SetReadDeadline(time.Time{})
	if err == nil && f.Type != FrameRequest && f.Type != FrameResume {
		err = protoErr("first frame is %v, want request or resume", f.Type)
	}
	if err != nil {
		var pe *ProtocolError
		if errors.As(err, &pe) {
			s.protocolErrors.Add(1)
			s.log.Warn("quic: protocol error", "remote", p.remote, "err", err)
			w := &streamWriter{str: str}
			w.write(&Frame{Type: FrameError, Err: &llm.Error{Code: llm.CodeInvalid, Message: err.Error()}})
			str.Close()
			str.CancelRead(streamProtocol)
			return
		}
		str.CancelRead(streamCancelled)
		str.CancelWrite(streamCancelled)
		return
	}
	req := f.Request
	keyed := f.Type == FrameResume || req.IdempotencyKey != ""
	device, err := s.identify(conn.Context(), conn, p, keyed)
	if err != nil {
		str.CancelRead(streamCancelled)
		str.CancelWrite(streamCancelled)
		return
	}
	if req != nil {
		req.Tenant = device
	}
	if s.cfg.Revoked != nil && s.cfg.Revoked(device) {
		s.log.Warn("quic: request from a revoked device refused", "device", device, "remote", p.remote)
		conn.CloseWithError(connRevoked, "device certificate revoked")
		return
	}

	ctx, cancel := context.WithCancelCause(conn.Context())
	defer cancel(nil)
	// The client keeps its side open until it has the final frame; a cancel
	// frame, an early end or a reset means it gave up, and its end after
	// the final frame says it has the whole answer. clientEnd is what
	// fr.next returned: nil for a frame (a cancel).
	watched := make(chan struct{})
	var clientEnd error
	go func() {
		defer close(watched)
		_, clientEnd = fr.next()
		cancel(errClientCancelled)
	}()
	// A write blocked on flow control must not outlive the request. The
	// reset runs on its own goroutine; resetting lets us wait for it.
	var resetting sync.WaitGroup
	resetting.Add(1)
	stopReset := sync.OnceValue(context.AfterFunc(ctx, func() {
		defer resetting.Done()
		str.CancelWrite(streamCancelled)
	}))
	w := &streamWriter{str: str, conn: &p.written}
	w.stopHeartbeat = w.startHeartbeats(f.Heartbeat)
	defer w.stopHeartbeat()
	var (
		g   *generation
		cur *cursor
		out followResult
	)
	switch {
	case f.Type == FrameResume:
		g, cur, out = s.resume(ctx, w, device, f.Resume, stopReset)
	case keyed:
		g, cur, out = s.followRequest(ctx, w, req, stopReset)
	default:
		s.run(ctx, w, req, stopReset)
	}
	cancel(nil)
	if stopReset() {
		resetting.Done()
	}
	resetting.Wait()
	if g != nil && out.ended && g.ephemeral {
		// The device closes its side once it has the last frame: that is
		// its acknowledgement that the whole answer arrived, and a resume
		// key's answer can go.
		t := time.NewTimer(s.cfg.RequestTimeout)
		select {
		case <-watched:
			if errors.Is(clientEnd, io.EOF) {
				g.acknowledged()
			}
		case <-t.C:
		}
		t.Stop()
	}
	str.CancelRead(streamDone) // ends the watcher
	<-watched
	if g != nil {
		g.leave(cur, s.leaveReason(conn, out, clientEnd), s.cfg.ResumeWindow)
	}
}

// leaveReason classifies how a follower's stream ended (resume.go): it
// wrote the last frame, the device cancelled (a cancel frame, a reset, an
// early end), the device closed its connection on purpose, or the
// connection died under it.
func (s *Server) leaveReason(conn *quicgo.Conn, out followResult, clientEnd error) leaveReason {
	switch {
	case out.ended || s.base.Err() != nil:
		return leftDone
	case closedByDevice(context.Cause(conn.Context()), clientEnd, out.writeErr):
		return leftClosed
	case conn.Context().Err() != nil, connectionError(clientEnd), connectionError(out.writeErr):
		return leftLinkLost
	}
	return leftCancelled
}

// closedByDevice reports whether any of errs is the device closing the
// connection itself (CONNECTION_CLOSE with connClosed: the agent shutting
// down or closing its uplink). Nothing will resume its requests, so their
// runs stop now rather than at the end of the resume window. The stall
// watchdog's close (connStalled) never reaches the server over a dead link
// and, when it does, means the device will redial and resume.
func closedByDevice(errs ...error) bool {
	for _, err := range errs {
		var ae *quicgo.ApplicationError
		if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == connClosed {
			return true
		}
	}
	return false
}

// run executes a request without an idempotency key, writing each token
// straight to the stream.
func (s *Server) run(ctx context.Context, w *streamWriter, req *llm.Request, stopReset func() bool) {
	s.generations.Add(1)
	metaSent := false
	emit := func(t llm.Token) error {
		var err error
		switch {
		case t.Meta == nil:
			err = w.write(&Frame{Type: FrameToken, Token: t})
		case !metaSent: // the begin event becomes the meta frame
			metaSent = true
			err = w.write(&Frame{Type: FrameMeta, Meta: *t.Meta})
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return llm.Errorf(llm.CodeCancelled, "write token: %v", err)
		}
		return nil
	}
	final, err := s.cfg.Handler.Generate(ctx, req, emit)
	s.end(ctx, w, final, err, stopReset)
}

// end writes the terminal frame unless the client is gone, and reports
// whether it did.
func (s *Server) end(ctx context.Context, w *streamWriter, final llm.Final, err error, stopReset func() bool) bool {
	if w.stopHeartbeat != nil {
		w.stopHeartbeat() // no heartbeat may follow the last frame or race Close
	}
	if !stopReset() {
		return false // the stream was reset: the client cancelled or the connection ended
	}
	if ctx.Err() != nil {
		w.str.CancelWrite(streamCancelled)
		return false
	}
	w.str.SetWriteDeadline(time.Now().Add(s.cfg.RequestTimeout))
	if err != nil {
		err = w.write(&Frame{Type: FrameError, Err: toLLMError(err)})
	} else {
		err = w.write(&Frame{Type: FrameFinal, Final: final})
	}
	w.str.Close()
	return err == nil
}

// followRequest serves a request with an idempotency key: the first stream
// for (device, key) starts a generation, every stream — first, replay or
// retry — follows its token log from the start.
func (s *Server) followRequest(ctx context.Context, w *streamWriter, req *llm.Request, stopReset func() bool) (*generation, *cursor, followResult) {
	fp := fingerprint(req)
	genCtx, genCancel := context.WithCancelCause(s.base)
	g, created := s.dedupe.join(req.Tenant+"\x00"+req.IdempotencyKey, fp, genCancel)
	if created {
		s.wg.Add(1)
		go s.generate(genCtx, g, req)
	} else {
		genCancel(nil)
		s.attached.Add(1)
		if g.fingerprint != fp {
			return g, nil, followResult{ended: s.end(ctx, w, llm.Final{}, llm.Errorf(llm.CodeInvalid, "idempotency key %q was already used for a different request", req.IdempotencyKey), stopReset)}
		}
	}
	c := g.attach(0)
	return g, c, s.follow(ctx, w, g, c, stopReset)
}

// followResult is how a follower's stream ended.
type followResult struct {
	ended    bool  // the last frame (final or error) was written
	writeErr error // the write that failed, when one did
}

// follow writes g's stream from c on: the begin event, each token as it is
// logged, and the last frame.
func (s *Server) follow(ctx context.Context, w *streamWriter, g *generation, c *cursor, stopReset func() bool) followResult {
	metaSent := false
	for {
		v := g.since(c)
		if v.gone {
			return followResult{ended: s.end(ctx, w, llm.Final{}, errNotBuffered, stopReset)}
		}
		if !metaSent && v.meta != nil {
			metaSent = true
			if err := w.write(&Frame{Type: FrameMeta, Meta: *v.meta}); err != nil {
				return followResult{writeErr: err}
			}
		}
		for i := range v.tokens {
			if err := w.write(&Frame{Type: FrameToken, Token: v.tokens[i]}); err != nil {
				return followResult{writeErr: err}
			}
		}
		if v.done {
			return followResult{ended: s.end(ctx, w, v.final, v.err, stopReset)}
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return followResult{}
		}
	}
}

// generate runs a keyed request into its log. It is owned by the server: it
// stops when its last follower leaves or the server closes.
func (s *Server) generate(ctx context.Context, g *generation, req *llm.Request) {
	defer s.wg.Done()
	s.generations.Add(1)
	final, err := s.cfg.Handler.Generate(ctx, req, func(t llm.Token) error {
		if err := g.append(ctx, t, s.cfg.MaxReplayBytes); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	})
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	g.finish(final, err, s.cfg.Now())
	s.dedupe.finished(g)
}

// fingerprint identifies a request's content, so a key reused for a
// different request is refused rather than answered with another's tokens.
func fingerprint(req *llm.Request) [32]byte {
	r := *req
	r.Tenant = ""
	return sha256.Sum256(appendRequest(nil, &r))
}

// issuedPrefix marks the session-ticket extra that records when the ticket
// was issued.
const issuedPrefix = "phaseless-issued:"

// limitEarlyData makes tc accept 0-RTT only on tickets younger than window.
// crypto/tls accepts a ticket for up to 7 days; without this a 0-RTT flight
// could be replayed after its dedupe entry expired and run twice. Tickets
// are encrypted with a key made here, so they die with the server, as does
// its dedupe table.
func limitEarlyData(tc *tls.Config, window time.Duration, now func() time.Time) error {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("quic server: session ticket key: %w", err)
	}
	tc.SetSessionTicketKeys([][32]byte{key})
	keys := tc.Clone() // EncryptTicket/DecryptTicket with the same keys, without these hooks
	tc.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, binary.BigEndian.AppendUint64([]byte(issuedPrefix), uint64(now().UnixNano())))
		return keys.EncryptTicket(cs, ss)
	}
	tc.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := keys.DecryptTicket(identity, cs)
		if err != nil || ss == nil {
			return ss, err
		}
		fresh := false
		for _, e := range ss.Extra {
			if rest, ok := bytes.CutPrefix(e, []byte(issuedPrefix)); ok && len(rest) == 8 {
				issued := time.Unix(0, int64(binary.BigEndian.Uint64(rest)))
				fresh = now().Sub(issued) < window
			}
		}
		if !fresh {
			ss.EarlyData = false
		}
		return ss, nil
	}
	return nil
}
