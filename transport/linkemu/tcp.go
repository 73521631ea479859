package linkemu

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// mss is the segment size the TCP relay shapes: a 1500-byte MTU less the
// IPv4, TCP and timestamp-option headers.
const mss = 1448

// TCPRelay forwards TCP connections to Target through the emulated link,
// shaping each direction's byte stream: delay, jitter, the bottleneck (with
// back-pressure instead of drops), loss as the delay of TCP's repair, and
// blackouts as bytes held until the link returns (see the package doc's
// Caveats). Reorder and PathChanges do not apply to TCP.
type TCPRelay struct {
	*link
	ln     net.Listener
	target string
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex // guards conns, closed
	conns  map[net.Conn]struct{}
	closed bool
}

// ListenTCP starts a TCP relay.
func ListenTCP(cfg Config) (*TCPRelay, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	r := &TCPRelay{link: newLink(cfg), ln: ln, target: cfg.Target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is where clients connect: the relay's own address.
func (r *TCPRelay) Addr() *net.TCPAddr { return r.ln.Addr().(*net.TCPAddr) }

func (r *TCPRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

// track registers a connection for Close; false once the relay is closed.
func (r *TCPRelay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *TCPRelay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
		c.Close()
	}
}

// serve relays one client connection until both directions end.
func (r *TCPRelay) serve(client net.Conn) {
	defer r.wg.Done()
	server, err := net.Dial("tcp", r.target)
	if err != nil {
		client.Close()
		return
	}
	if !r.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	defer r.untrack(client, server)
	// A reset of either direction (a segment lost for good, a write that
	// failed) ends both, as it would end the TCP connection.
	reset := make(chan struct{})
	var once sync.Once
	abort := func() { once.Do(func() { close(reset); client.Close(); server.Close() }) }
	finished, watched := make(chan struct{}), make(chan struct{})
	go func() { // the relay closing resets its connections
		defer close(watched)
		select {
		case <-r.done:
			abort()
		case <-finished:
		}
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pump(client, server, r.up, &r.upC, reset, abort) }()
	go func() { defer wg.Done(); r.pump(server, client, r.down, &r.downC, reset, abort) }()
	wg.Wait()
	close(finished)
	<-watched
}

type segment struct {
	at   time.Time
	data []byte
}

// pump carries one direction: a reader shapes what src sends into timed
// segments, and this goroutine writes each to dst at its time.
func (r *TCPRelay) pump(src, dst net.Conn, sh *shaper, c *counters, stop <-chan struct{}, abort func()) {
	segs := make(chan segment, 64)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(segs)
		r.read(src, sh, c, segs, stop, abort)
	}()
	delay := sh.d.Delay
	for s := range segs {
		if !sleepUntil(s.at, stop) {
			break
		}
		if waited, ok := r.waitUp(stop); !ok {
			break
		} else if waited {
			// The bytes were lost in the blackout and resent after it.
			c.blackoutHeld.Add(1)
			if !sleepUntil(time.Now().Add(delay), stop) {
				break
			}
		}
		if _, err := dst.Write(s.data); err != nil {
			abort()
			break
		}
		c.delivered.Add(1)
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite() // pass the sender's end of stream on
	}
	// The reader may be blocked on a full channel after a break: drain it.
	for range segs {
	}
	<-readDone
}

// read turns src's bytes into shaped segments until EOF or stop.
func (r *TCPRelay) read(src net.Conn, sh *shaper, c *counters, segs chan<- segment, stop <-chan struct{}, abort func()) {
	var f flow
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p := buf[:n]; len(p) > 0; {
			size := min(len(p), mss)
			now := time.Now()
			v, wait := sh.stream(now, size, f.busy(now, sh.rtt))
			if wait > 0 {
				if !sleepUntil(time.Now().Add(wait), stop) {
					return
				}
				continue
			}
			c.arrived(size, v)
			if v.fate == resetStream {
				abort()
				return
			}
			select {
			case segs <- segment{at: f.order(v.at), data: append([]byte(nil), p[:size]...)}:
			case <-stop:
				return
			}
			p = p[size:]
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				abort()
			}
			return
		}
	}
}

// Close stops the relay, resets its connections and waits for its
// goroutines. Safe to call twice.
func (r *TCPRelay) Close() error {
	return shutdown(&r.mu, &r.closed, r.done, &r.wg, func() error {
		err := r.ln.Close()
		for c := range r.conns {
			c.Close()
		}
		return err
	})
}
