package quic

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/phaseless/phaseless/internal/backoff"
	"github.com/phaseless/phaseless/llm"
)

// ClientConfig configures a Client. Zero values mean the defaults named on
// each field.
type ClientConfig struct {
	// TLS holds the device certificate and the fleet CA (pki.DeviceTLS). The
	// client adds the ALPN, the server name from the address when none is
	// set, and a session cache for 0-RTT when none is set. A session cache
	// must not be shared between device identities: a resumed session
	// keeps the identity it was first issued to.
	TLS *tls.Config
	// KeepAlivePeriod, MaxIdleTimeout and HandshakeTimeout default to the
	// cellular-tuned Default* values.
	KeepAlivePeriod  time.Duration
	MaxIdleTimeout   time.Duration
	HandshakeTimeout time.Duration
	// MaxStreams bounds requests in flight; more wait for a slot. The
	// server's MaxStreamsPerConn bounds it too. Default DefaultMaxStreams.
	MaxStreams int
	// Backoff is the reconnect schedule.
	Backoff Backoff
	// StableAfter: a connection that ends sooner than this counts as a
	// failed attempt, so a server that accepts and then drops us (a refused
	// certificate, a crash loop) is retried with growing waits. Default 5 s.
	StableAfter time.Duration
	// ConnectWait is how long Generate waits for a connection that is being
	// re-established before failing with a retryable CodeUnavailable, so
	// the router can fall back to the device. Default 2 s.
	ConnectWait time.Duration
	// StallTimeout: while requests are in flight, a connection that has
	// received no packet at all (tokens, heartbeats, acks) for this long is
	// closed as dead and its requests end with a retryable CodeUnavailable
	// (heartbeat.go). Default DefaultStallTimeout; negative turns heartbeats
	// and the watchdog off, leaving dead peers to MaxIdleTimeout.
	StallTimeout time.Duration
	// ResumeDeadline turns resuming on (resume.go): a request whose link
	// drops after its first token is resumed on the next connection, for as
	// long as the cloud has been silent less than this; past it Generate
	// returns the link's error. Requests without an idempotency key get one
	// (ResumeKeyPrefix). 0 turns resuming off.
	ResumeDeadline time.Duration
	// Background makes Dial return at once and connect in the background;
	// otherwise Dial fails unless the first connection succeeds.
	Background bool
	// LocalAddr is the local UDP address to bind; default ":0".
	LocalAddr string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Clock and Rand drive the backoff; tests inject fakes. Defaults are
	// the wall clock and math/rand/v2.
	Clock Clock
	Rand  func() float64

	// listenPacket opens each local socket; tests wrap it to cut a path.
	listenPacket func(laddr *net.UDPAddr) (net.PacketConn, error)
}

func (c *ClientConfig) fillDefaults() {
	if c.KeepAlivePeriod == 0 {
		c.KeepAlivePeriod = DefaultKeepAlivePeriod
	}
	if c.MaxIdleTimeout == 0 {
		c.MaxIdleTimeout = DefaultMaxIdleTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	c.Backoff.FillDefaults()
	if c.StableAfter == 0 {
		c.StableAfter = 5 * time.Second
	}
	if c.ConnectWait == 0 {
		c.ConnectWait = 2 * time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.LocalAddr == "" {
		c.LocalAddr = ":0"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = backoff.System{}
	}
	if c.Rand == nil {
		c.Rand = backoff.Rand
	}
	if c.listenPacket == nil {
		c.listenPacket = func(la *net.UDPAddr) (net.PacketConn, error) { return net.ListenUDP("udp", la) }
	}
}

// Validate names the first bad field.
func (c *ClientConfig) Validate() error {
	switch {
	case c.TLS == nil:
		return errors.New("quic client config: TLS: required (pki.DeviceTLS)")
	case len(c.TLS.Certificates) == 0 && c.TLS.GetClientCertificate == nil:
		return errors.New("quic client config: TLS.Certificates: a device certificate is required")
	case c.KeepAlivePeriod < 0, c.MaxIdleTimeout < 0, c.HandshakeTimeout < 0, c.StableAfter < 0, c.ConnectWait < 0, c.ResumeDeadline < 0:
		return errors.New("quic client config: timeouts must not be negative")
	case c.KeepAlivePeriod > 0 && c.MaxIdleTimeout > 0 && c.KeepAlivePeriod >= c.MaxIdleTimeout:
		return errors.New("quic client config: KeepAlivePeriod: must be shorter than MaxIdleTimeout")
	case c.MaxStreams < 0:
		return errors.New("quic client config: MaxStreams: must not be negative")
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("quic client config: %w", err)
	}
	if _, err := net.ResolveUDPAddr("udp", c.LocalAddr); err != nil {
		return fmt.Errorf("quic client config: LocalAddr: %w", err)
	}
	return nil
}

// LinkState is what the agent's router reads to decide whether to use the
// cloud.
type LinkState struct {
	Connected   bool
	Used0RTT    bool          // the current connection resumed with 0-RTT
	RTT         time.Duration // latest sample
	SmoothedRTT time.Duration
	PacketsSent uint64 // on the current connection
	PacketsLost uint64
	LossRate    float64 // PacketsLost / PacketsSent on the current connection
	LastError   string  // why the last connection or attempt failed
	Reconnects  int     // connections established after the first
	Resumes     int     // streams resumed after a lost link (resume.go)
	LocalAddr   string
}

// Client is a device's uplink to the cloud: one QUIC connection, redialled
// with backoff when it drops, carrying one stream per request.
type Client struct {
	cfg  ClientConfig
	addr string
	tls  *tls.Config
	// tickets is tls's session cache, which keeps a ticket a redial into a
	// dark link would otherwise throw away (tickets.go).
	tickets *ticketKeeper
	qconf   *quicgo.Config
	log     *slog.Logger
	sem     chan struct{}
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns

	mu         sync.Mutex // guards the fields below
	cur        *link
	ready      chan struct{} // closed while cur != nil
	lastErr    string
	lastAuth   bool // the last failure was the cloud refusing our certificate
	reconnects int
	connected  bool // a connection was ever established
	closed     bool
	// cancels are the keys of requests given up while the link was down:
	// the next connection tells the cloud (resume.go).
	cancels []string
	resumes int // streams resumed after a lost link
	// resuming counts streams waiting to resume; hurry cuts a backoff
	// wait short when one starts (backoff).
	resuming atomic.Int32
	hurry    chan struct{}

	flushing  sync.WaitGroup // sendCancels goroutines, waited for by Close
	closeOnce sync.Once
}

var _ llm.Generator = (*Client)(nil)

// link is one connection and the sockets it uses: the first, plus one per
// migration. quic-go ties a connection to every Transport it has used, so
// they close together.
type link struct {
	conn      *quicgo.Conn
	mu        sync.Mutex // guards trs, udps, closed
	trs       []*quicgo.Transport
	udps      []net.PacketConn
	closed    bool
	local     string // the socket in use: quic-go's Conn.LocalAddr races with a path switch
	closeOnce sync.Once
	// settled is closed once the handshake ended and used0RTT is recorded.
	// quic-go's ConnectionState races with a path switch, so it is read
	// once here, before Migrate may switch.
	settled  chan struct{}
	used0RTT atomic.Bool
	// inflight counts requests on the connection; the stall watchdog runs
	// only while there are some. stalled records that it closed the
	// connection; watched is closed when it returns (or never started).
	inflight atomic.Int32
	stalled  atomic.Bool
	watched  chan struct{}
}

// confirmed reports whether the handshake completed.
func (l *link) confirmed() bool {
	select {
	case <-l.conn.HandshakeComplete():
		return true
	default:
		return false
	}
}

// settle records the handshake's outcome; run calls it once per link.
func (l *link) settle(ctx context.Context) {
	select {
	case <-l.conn.HandshakeComplete():
		l.used0RTT.Store(l.conn.ConnectionState().Used0RTT)
	case <-l.conn.Context().Done():
	case <-ctx.Done():
	}
	close(l.settled)
}

// adopt ties a transport to l's lifetime; it closes it at once when l is
// already closed.
func (l *link) adopt(tr *quicgo.Transport, udp net.PacketConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		tr.Close()
		udp.Close()
		return
	}
	l.trs = append(l.trs, tr)
	l.udps = append(l.udps, udp)
}

func (l *link) close(code quicgo.ApplicationErrorCode, msg string) {
	l.closeOnce.Do(func() {
		l.conn.CloseWithError(code, msg)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.closed = true
		for _, t := range l.trs {
			t.Close()
		}
		for _, u := range l.udps {
			u.Close()
		}
	})
}

// ErrClientClosed is the cause of requests failing after Close.
var ErrClientClosed = errors.New("quic client closed")

// Dial connects to the cloud at addr (host:port). Unless cfg.Background is
// set it returns an error when the first connection fails; afterwards the
// client reconnects by itself until Close.
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("quic dial: address %q: %w", addr, err)
	}
	tc := cfg.TLS.Clone()
	tc.NextProtos = []string{ALPN}
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	if tc.ClientSessionCache == nil {
		tc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	}
	tickets := newTicketKeeper(tc.ClientSessionCache)
	tc.ClientSessionCache = tickets
	c := &Client{
		cfg: cfg, addr: addr, tls: tc, tickets: tickets, log: cfg.Logger,
		qconf: &quicgo.Config{
			HandshakeIdleTimeout:  cfg.HandshakeTimeout,
			MaxIdleTimeout:        cfg.MaxIdleTimeout,
			KeepAlivePeriod:       cfg.KeepAlivePeriod,
			MaxIncomingStreams:    -1, // the server opens no streams
			MaxIncomingUniStreams: -1,
			EnableDatagrams:       true, // for loss probes (probe.go)
		},
		sem:   make(chan struct{}, cfg.MaxStreams),
		hurry: make(chan struct{}, 1),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var first *link
	if !cfg.Background {
		first, err = c.connect(ctx)
		if err != nil {
			c.cancel()
			return nil, fmt.Errorf("quic dial %s: %w", addr, err)
		}
	}
	go c.run(first)
	return c, nil
}

func (c *Client) connect(ctx context.Context) (*link, error) {
	ua, err := net.ResolveUDPAddr("udp", c.addr)
	if err != nil {
		return nil, err
	}
	udp, err := c.listenUDP()
	if err != nil {
		return nil, err
	}
	tr := &quicgo.Transport{Conn: udp}
	conn, err := tr.DialEarly(ctx, ua, c.tls, c.qconf)
	if err != nil {
		tr.Close()
		udp.Close()
		return nil, err
	}
	return &link{conn: conn, trs: []*quicgo.Transport{tr}, udps: []net.PacketConn{udp}, local: udp.LocalAddr().String(), settled: make(chan struct{}), watched: make(chan struct{})}, nil
}

func (c *Client) listenUDP() (net.PacketConn, error) {
	la, err := net.ResolveUDPAddr("udp", c.cfg.LocalAddr)
	if err != nil {
		return nil, err
	}
	return c.cfg.listenPacket(la)
}

// run owns the connection: it dials, waits for the connection to end and
// dials again with backoff, until Close.
func (c *Client) run(l *link) {
	defer close(c.done)
	failures := 0
	for {
		if l == nil {
			var err error
			l, err = c.connect(c.ctx)
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				c.tickets.settle(err)
				c.noteErr(err)
				if !c.backoff(&failures) {
					return
				}
				continue
			}
		}
		c.setLink(l)
		c.mu.Lock()
		if len(c.cancels) > 0 {
			c.flushing.Add(1)
			go c.sendCancels(l)
		}
		c.mu.Unlock()
		if c.cfg.StallTimeout > 0 {
			go l.watch(c.cfg.StallTimeout)
		} else {
			close(l.watched)
		}
		up := c.cfg.Clock.Now()
		l.settle(c.ctx)
		select {
		case <-l.conn.Context().Done():
			c.tickets.settle(context.Cause(l.conn.Context()))
			c.dropLink(l, context.Cause(l.conn.Context()))
			<-l.watched
			l = nil
			if c.cfg.Clock.Now().Sub(up) >= c.cfg.StableAfter {
				failures = 0
			} else if !c.backoff(&failures) {
				return
			}
		case <-c.ctx.Done():
			c.dropLink(l, ErrClientClosed)
			<-l.watched
			return
		}
	}
}

// backoff waits before the next attempt; false means the client closed.
// While a stream waits to resume, the wait is at most resumeRedial and a
// resume that starts waiting cuts a longer one short: after a long
// blackout the schedule has grown to CloudRetryMax-like waits, and the
// answer would sit out its resume deadline behind one.
func (c *Client) backoff(failures *int) bool {
	d := c.cfg.Backoff.Delay(*failures, c.cfg.Rand())
	if c.resuming.Load() > 0 {
		d = min(d, resumeRedial)
	}
	*failures++
	c.log.Debug("quic: reconnecting", "addr", c.addr, "in", d, "attempt", *failures)
	select {
	case <-c.cfg.Clock.After(d):
		return true
	case <-c.hurry:
		return c.ctx.Err() == nil
	case <-c.ctx.Done():
		return false
	}
}

func (c *Client) noteErr(err error) {
	c.mu.Lock()
	c.lastErr = err.Error()
	c.lastAuth = linkError(err, 0).Code == llm.CodeAuth
	c.mu.Unlock()
	c.log.Warn("quic: cloud connection failed", "addr", c.addr, "err", err)
}

func (c *Client) setLink(l *link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connected {
		c.reconnects++
	}
	c.connected = true
	c.cur = l
	close(c.ready)
}

// dropLink forgets l if it is current; safe to call more than once.
func (c *Client) dropLink(l *link, cause error) {
	c.mu.Lock()
	if c.cur == l {
		c.cur = nil
		c.ready = make(chan struct{})
		if cause != nil {
			c.lastErr = cause.Error()
			c.lastAuth = linkError(cause, 0).Code == llm.CodeAuth
		}
	}
	c.mu.Unlock()
	l.close(connClosed, "")
}

// waitLink returns a live connection, waiting up to wait while one is
// being established.
func (c *Client) waitLink(ctx context.Context, wait time.Duration) (*link, error) {
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		l, ready, closed, lastErr, lastAuth := c.cur, c.ready, c.closed, c.lastErr, c.lastAuth
		c.mu.Unlock()
		if closed {
			return nil, &llm.Error{Code: llm.CodeUnavailable, Message: ErrClientClosed.Error()}
		}
		if l != nil {
			if l.conn.Context().Err() == nil {
				return l, nil
			}
			c.dropLink(l, context.Cause(l.conn.Context()))
			continue
		}
		if timeout == nil {
			timeout = c.cfg.Clock.After(wait)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, cancelled(ctx)
		case <-c.ctx.Done():
		case <-timeout:
			if lastAuth {
				// Keep the refusal's class: retrying will not help, and the
				// operator must see it is the certificate (revoked, foreign).
				return nil, &llm.Error{Code: llm.CodeAuth, Message: "no connection to the cloud: " + lastErr}
			}
			return nil, &llm.Error{Code: llm.CodeUnavailable, Message: "no connection to the cloud: " + lastErr, Retryable: true}
		}
	}
}

func cancelled(ctx context.Context) error {
	return fmt.Errorf("cloud request: %w", ctx.Err())
}

// Generate sends req on a new stream and passes each token to emit as soon
// as it is read. Server failures come back as *llm.Error; cancelling ctx
// cancels the request on the server. A request with an idempotency key may
// go out in 0-RTT, and is re-sent on the next connection if the link drops
// before its first token (the server runs it once). With ResumeDeadline
// set, a link that drops later is resumed from the last token delivered
// (resume.go).
func (c *Client) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.Raw { // the request frame has no field for it
		return llm.Final{}, llm.RawUnsupported("the cloud uplink")
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return llm.Final{}, cancelled(ctx)
	}
	defer func() { <-c.sem }()
	resumable := c.cfg.ResumeDeadline > 0
	if resumable && req.IdempotencyKey == "" {
		r := *req
		r.IdempotencyKey = ResumeKeyPrefix + rand.Text()
		req = &r
	}
	keyed := req.IdempotencyKey != ""
	st := &streamState{}
	for attempt := 0; ; attempt++ {
		l, err := c.waitLink(ctx, c.cfg.ConnectWait)
		if err != nil {
			return llm.Final{}, err
		}
		if !keyed {
			// Only idempotent requests may ride in 0-RTT: the server could
			// see a replay of anything else.
			select {
			case <-l.conn.HandshakeComplete():
			case <-ctx.Done():
				return llm.Final{}, cancelled(ctx)
			case <-c.cfg.Clock.After(c.cfg.ConnectWait):
				// A cloud that does not answer a redial within ConnectWait
				// is treated as unreachable, so the caller can fall back
				// now rather than after the handshake timeout.
				return llm.Final{}, &llm.Error{Code: llm.CodeUnavailable, Message: "cloud did not complete the handshake within " + c.cfg.ConnectWait.String(), Retryable: true}
			case <-l.conn.Context().Done():
				// The handshake failed (a dead server never answers a
				// redial): nothing was sent, so try the next link.
				cause := context.Cause(l.conn.Context())
				c.dropLink(l, cause)
				if attempt < 2 {
					continue
				}
				return llm.Final{}, linkError(cause, 0)
			}
		}
		first := &Frame{Type: FrameRequest, Request: req, Heartbeat: heartbeatInterval(c.cfg.StallTimeout)}
		final, rt := c.stream(ctx, l, first, st, emit)
		switch {
		case rt.err == nil:
			return final, nil
		case ctx.Err() != nil:
			c.forget(resumable, req.IdempotencyKey, rt)
			return llm.Final{}, cancelled(ctx)
		case errors.Is(rt.err, quicgo.Err0RTTRejected) && attempt < 2:
			// The server discarded the early data, so nothing ran; continue
			// on the completed handshake.
			if _, err := l.conn.NextConnection(ctx); err != nil && ctx.Err() != nil {
				return llm.Final{}, cancelled(ctx)
			}
			continue
		case resumable && rt.linkLost && st.delivered > 0 && llm.CodeOf(rt.err) != llm.CodeAuth && !serverClosing(rt.cause):
			return c.resume(ctx, req.IdempotencyKey, st, rt.err, emit)
		case attempt < 2 && rt.linkLost && !rt.stalled && (!rt.sent || keyed && st.delivered == 0) && llm.CodeOf(rt.err) != llm.CodeAuth:
			// A stalled link is not retried: the cloud stopped answering,
			// and a redial would only add ConnectWait before the caller
			// can fall back.
			continue
		case errors.Is(rt.err, quicgo.Err0RTTRejected):
			return llm.Final{}, linkError(rt.err, 0)
		}
		c.forget(resumable, req.IdempotencyKey, rt)
		return llm.Final{}, rt.err
	}
}

// streamState is what a request has delivered so far, across the streams
// that carry it (the first, then resumes).
type streamState struct {
	delivered int  // tokens passed to emit
	metaSeen  bool // the begin event was passed to emit
	// heard is when the last frame from the cloud (or the request's
	// start) was read, Clock.Now in Unix nanoseconds; resume's deadline
	// timer reads it while roundTrip writes it.
	heard atomic.Int64
}

func (st *streamState) hear(t time.Time)     { st.heard.Store(t.UnixNano()) }
func (st *streamState) lastHeard() time.Time { return time.Unix(0, st.heard.Load()) }

type roundTripResult struct {
	err      error
	sent     bool  // the first frame was handed to the stream
	ended    bool  // the server's last frame (final or error) arrived
	linkLost bool  // the connection, not the server, failed
	stalled  bool  // the watchdog closed the connection: the peer is presumed dead
	cause    error // the transport's error behind err
	// unconfirmed: the connection's handshake had not completed when the
	// stream ended, so a cancel written on it may never arrive.
	unconfirmed bool
}

// serverClosing reports a server that closed the connection because it is
// shutting down: its generations went with it, so there is nothing to resume.
func serverClosing(err error) bool {
	var ae *quicgo.ApplicationError
	return errors.As(err, &ae) && ae.Remote && ae.ErrorCode == connShutdown
}

// connectionError reports an error that ends the whole connection, which
// quic-go may hand to a stream just before the connection's context ends.
func connectionError(err error) bool {
	var (
		te  *quicgo.TransportError
		ae  *quicgo.ApplicationError
		ite *quicgo.IdleTimeoutError
		hte *quicgo.HandshakeTimeoutError
		sre *quicgo.StatelessResetError
	)
	return errors.As(err, &te) || errors.As(err, &ae) || errors.As(err, &ite) || errors.As(err, &hte) || errors.As(err, &sre)
}

// stream is roundTrip, then what the link's state says of the result: a
// lost link is dropped now rather than when run notices, so Link agrees
// with the error the caller is about to see.
func (c *Client) stream(ctx context.Context, l *link, first *Frame, st *streamState, emit llm.Emit) (llm.Final, roundTripResult) {
	final, rt := c.roundTrip(ctx, l, first, st, emit)
	rt.unconfirmed = !l.confirmed()
	if rt.linkLost {
		c.dropLink(l, rt.cause)
	}
	return final, rt
}

// roundTrip sends first (a request or resume frame) on a new stream and
// reads the answer into emit, counting in st.
func (c *Client) roundTrip(ctx context.Context, l *link, first *Frame, st *streamState, emit llm.Emit) (llm.Final, roundTripResult) {
	conn := l.conn
	l.inflight.Add(1)
	defer l.inflight.Add(-1)
	if st.heard.Load() == 0 {
		st.hear(c.cfg.Clock.Now())
	}
	var rt roundTripResult
	fail := func(err error) (llm.Final, roundTripResult) {
		if errors.Is(err, quicgo.Err0RTTRejected) {
			rt.err = err
			return llm.Final{}, rt
		}
		rt.linkLost = conn.Context().Err() != nil || connectionError(err)
		rt.cause = err
		rt.err = linkError(err, st.delivered)
		return llm.Final{}, rt
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(err)
	}
	w := &streamWriter{str: str}
	// abort tells the server we gave up: a cancel frame and the end of our
	// side when the writer is free, a reset otherwise, and no more reading.
	// The Once also lets the deferred call wait for an abort in flight.
	var abortOnce sync.Once
	abort := func() {
		abortOnce.Do(func() {
			if w.mu.TryLock() {
				str.SetWriteDeadline(time.Now().Add(time.Second))
				b, _ := AppendFrame(w.buf[:0], &Frame{Type: FrameCancel})
				if _, err := str.Write(b); err == nil {
					str.Close()
				} else {
					str.CancelWrite(streamCancelled)
				}
				w.mu.Unlock()
			} else {
				str.CancelWrite(streamCancelled)
			}
			str.CancelRead(streamCancelled)
		})
	}
	stop := context.AfterFunc(ctx, abort)
	defer func() {
		stop()
		abortOnce.Do(func() {})
	}()
	if err := w.write(first); err != nil {
		return fail(err)
	}
	rt.sent = true
	probe := time.AfterFunc(lossProbeDelay, l.sendProbe)
	defer probe.Stop()
	fr := newFrameReader(str)
	began := false // this stream sent its meta frame or a token
	for {
		f, err := fr.next()
		if err != nil {
			str.CancelWrite(streamCancelled)
			if l.stalled.Load() && ctx.Err() == nil {
				rt.linkLost, rt.stalled = true, true
				after := ""
				if st.delivered > 0 {
					after = fmt.Sprintf(" after %d tokens", st.delivered)
				}
				rt.err = &llm.Error{Code: llm.CodeUnavailable, Retryable: true,
					Message: fmt.Sprintf("cloud link stalled: nothing received for %v%s (peer presumed dead)", c.cfg.StallTimeout, after)}
				rt.cause = rt.err
				return llm.Final{}, rt
			}
			return fail(err)
		}
		st.hear(c.cfg.Clock.Now())
		switch f.Type {
		case FrameHeartbeat:
		case FrameMeta:
			// The coordinator's begin event, relayed as the stream's own;
			// a resumed stream repeats it, and the caller has it already.
			if began {
				str.CancelRead(streamProtocol)
				str.CancelWrite(streamProtocol)
				return fail(protoErr("meta frame after the stream began"))
			}
			began = true
			if st.metaSeen {
				continue
			}
			st.metaSeen = true
			m := f.Meta
			if err := emit(llm.Token{Meta: &m}); err != nil {
				abort()
				rt.err = err
				return llm.Final{}, rt
			}
		case FrameToken:
			began = true
			if err := emit(f.Token); err != nil {
				abort()
				rt.err = err
				return llm.Final{}, rt
			}
			st.delivered++
		case FrameFinal, FrameError:
			rt.ended = true
			str.Close()
			str.CancelRead(streamDone)
			if f.Type == FrameError {
				rt.err = f.Err
				return llm.Final{}, rt
			}
			return f.Final, rt
		default:
			str.CancelRead(streamProtocol)
			str.CancelWrite(streamProtocol)
			return fail(protoErr("server sent a %v frame", f.Type))
		}
	}
}

// Link reports the state of the connection for routing decisions.
func (c *Client) Link() LinkState {
	c.mu.Lock()
	l := c.cur
	ls := LinkState{LastError: c.lastErr, Reconnects: c.reconnects, Resumes: c.resumes}
	c.mu.Unlock()
	if l == nil {
		return ls
	}
	if ctx := l.conn.Context(); ctx.Err() != nil {
		// The connection is gone but run has not dropped it yet: its own
		// close cause is the latest error, not whatever came before.
		ls.LastError = context.Cause(ctx).Error()
		return ls
	}
	st := l.conn.ConnectionStats()
	// A redial in 0-RTT has a connection before the cloud has answered;
	// until the handshake completes nothing proves the cloud is there, so
	// the router must not count on it.
	select {
	case <-l.conn.HandshakeComplete():
		<-l.settled // run is recording the outcome right now
		ls.Connected = true
		ls.Used0RTT = l.used0RTT.Load()
	default:
	}
	ls.RTT, ls.SmoothedRTT = st.LatestRTT, st.SmoothedRTT
	ls.PacketsSent, ls.PacketsLost = st.PacketsSent, st.PacketsLost
	if st.PacketsSent > 0 {
		ls.LossRate = float64(st.PacketsLost) / float64(st.PacketsSent)
	}
	l.mu.Lock()
	ls.LocalAddr = l.local
	l.mu.Unlock()
	return ls
}

// Migrate moves the connection to a new local UDP socket — what a device
// does when its network changes (Wi-Fi to cellular, a new modem address) —
// without interrupting streams: it probes the new path and switches to it
// once validated. quic-go keeps the old socket until the connection ends.
func (c *Client) Migrate(ctx context.Context) error {
	c.mu.Lock()
	l := c.cur
	c.mu.Unlock()
	if l == nil {
		return &llm.Error{Code: llm.CodeUnavailable, Message: "migrate: not connected", Retryable: true}
	}
	select {
	case <-l.settled:
	case <-ctx.Done():
		return fmt.Errorf("migrate: %w", context.Cause(ctx))
	}
	udp, err := c.listenUDP()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	tr := &quicgo.Transport{Conn: udp}
	// Closing a Transport closes every connection registered on it, and a
	// probe registers ours, so the new transport lives as long as the
	// connection whether or not the switch succeeds.
	l.adopt(tr, udp)
	path, err := l.conn.AddPath(tr)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err = path.Probe(ctx); err == nil {
		err = path.Switch()
	}
	if err != nil {
		path.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	l.mu.Lock()
	l.local = udp.LocalAddr().String()
	l.mu.Unlock()
	c.log.Info("quic: migrated to a new local address", "local", udp.LocalAddr().String())
	return nil
}

// Close closes the connection and stops reconnecting; requests in flight
// fail. It is safe to call more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		<-c.done
		c.flushing.Wait()
	})
	return nil
}
