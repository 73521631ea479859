package httplimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// short are the test's limits: every closing below comes from them, and
// each check waits for the server's EOF, not for a clock.
var short = Config{HeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond, MinBodyRate: 1024,
	WriteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxConns: 5000}

type server struct {
	addr string
	srv  *http.Server
}

func serve(t *testing.T, c Config, h http.Handler) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), srv: c.Server(h)}
	done := make(chan struct{})
	go func() { s.srv.Serve(c.Listener(ln)); close(done) }()
	t.Cleanup(func() { s.srv.Close(); <-done })
	return s
}

// waitEOF reads from conn until the server closes it. The deadline is a
// hang guard far beyond every limit, not the measurement.
func waitEOF(conn net.Conn) error {
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	_, err := io.Copy(io.Discard, conn)
	if err == nil || errors.Is(err, syscall.ECONNRESET) {
		return nil // EOF, or a reset: the server closed it
	}
	return err
}

// settle waits until the goroutine count is back to at most base (a hang
// guard bounds the wait).
func settle(t *testing.T, base int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, baseline %d:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
	}
}

// TestIdleAndSlowConnectionsClosed is issue 27's finding 5 on a real
// listener: thousands of connections that send nothing, keep-alive
// connections left idle, bodies that stall and bodies that trickle faster
// than the between-reads timeout but below the minimum rate. The server
// closes every one, and its goroutines return to the baseline.
func TestIdleAndSlowConnectionsClosed(t *testing.T) {
	const idle, keepAlive, stalled, trickling = 2000, 200, 300, 100
	var bodyErrs atomic.Int64
	s := serve(t, short, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			bodyErrs.Add(1)
			http.Error(w, "slow body", http.StatusRequestTimeout)
			return
		}
		io.WriteString(w, "ok")
	}))
	// Warm the server's own goroutines (the accept loop) into the baseline.
	if resp, err := http.Get("http://" + s.addr + "/"); err == nil {
		resp.Body.Close()
	}
	http.DefaultClient.CloseIdleConnections()
	base := runtime.NumGoroutine()

	dial := func() net.Conn {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var conns []net.Conn
	for range idle {
		conns = append(conns, dial()) // never sends a byte
	}
	for range keepAlive {
		c := dial()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns = append(conns, c) // a served keep-alive connection, then idle
	}
	for range stalled {
		c := dial()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range trickling {
		c := dial()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		wg.Add(1)
		go func() { // one byte every 50 ms: well inside BodyTimeout, far below MinBodyRate
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
		conns = append(conns, c)
	}
	for i, c := range conns {
		if err := waitEOF(c); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Close()
	}
	close(stop)
	wg.Wait()
	if n := bodyErrs.Load(); n != stalled+trickling {
		t.Errorf("%d handlers saw their body time out, want %d", n, stalled+trickling)
	}
	settle(t, base)
}

// TestStreamsAndLargeBodiesPass: the limits cut stalled clients, not slow
// work: a response whose writes are further apart than WriteTimeout, after
// a body read longer ago than BodyTimeout, completes, and its request
// context stays alive; a body that keeps up with MinBodyRate for longer
// than BodyTimeout is read whole.
func TestStreamsAndLargeBodiesPass(t *testing.T) {
	ctxErr := make(chan error, 1)
	s := serve(t, short, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		for i := range 3 {
			fmt.Fprintf(w, "data: %d of %d bytes\n\n", i, n)
			http.NewResponseController(w).Flush()
			select {
			case <-time.After(2 * short.WriteTimeout): // a pause longer than both limits
			case <-r.Context().Done():
			}
		}
		ctxErr <- r.Context().Err()
	}))
	pr, pw := io.Pipe()
	go func() { // 20 KiB at ~40 KiB/s: above MinBodyRate, longer than BodyTimeout
		for range 20 {
			pw.Write(make([]byte, 1024))
			time.Sleep(25 * time.Millisecond)
		}
		pw.Close()
	}()
	resp, err := http.Post("http://"+s.addr+"/", "application/octet-stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(body), "of 20480 bytes") != 3 {
		t.Fatalf("stream: %q %v", body, err)
	}
	if err := <-ctxErr; err != nil {
		t.Fatalf("the request context ended during the stream: %v", err)
	}
}

// TestStalledReaderClosed: a client that stops reading a large response
// holds the handler only until one write has waited WriteTimeout.
func TestStalledReaderClosed(t *testing.T) {
	writeErr := make(chan error, 1)
	s := serve(t, short, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
	}))
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-writeErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("write ended with %v, want a timeout", err)
		}
	case <-time.After(2 * time.Minute): // hang guard
		t.Fatal("the handler is still writing to a client that does not read")
	}
}

// TestMaxConns: with the cap reached, the listener does not accept another
// connection until one closes. Under synctest, "does not accept" is
// checked without a clock: once every goroutine is blocked, the inner
// listener has been asked for exactly MaxConns connections.
func TestMaxConns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &pipeListener{closed: make(chan struct{})}
		ln := Config{MaxConns: 3}.Listener(inner)
		var conns []net.Conn
		for range 3 {
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		accepted := make(chan net.Conn)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		synctest.Wait()
		if n := inner.accepts.Load(); n != 3 {
			t.Fatalf("the inner listener was asked for %d connections with a cap of 3", n)
		}
		conns[0].Close()
		c := <-accepted // a slot freed: the waiting Accept goes through
		c.Close()
		for _, c := range conns[1:] {
			c.Close()
		}
		ln.Close()
	})
}

// pipeListener hands out one end of a net.Pipe per Accept, at once.
type pipeListener struct {
	accepts atomic.Int64
	closed  chan struct{}
	once    sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	l.accepts.Add(1)
	a, b := net.Pipe()
	b.Close()
	return a, nil
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{HeaderTimeout: -1}, "HeaderTimeout"},
		{Config{BodyTimeout: -1}, "BodyTimeout"},
		{Config{WriteTimeout: -1}, "WriteTimeout"},
		{Config{IdleTimeout: -1}, "IdleTimeout"},
		{Config{MinBodyRate: -1}, "MinBodyRate"},
		{Config{MaxConns: -1}, "MaxConns"},
	} {
		var fe *FieldError
		if err := c.cfg.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want field %s", c.cfg, err, c.field)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}
