// Package httplimit bounds what one client connection can hold on an HTTP
// server: how long it may take to send its headers and body, how long a
// stalled reader may block a response, how long an idle keep-alive
// connection stays open, and how many connections a listener holds at once.
// Every listener of the cloud and the agent serves through it.
//
// The timeouts follow nginx's defaults (client_header_timeout 60s,
// client_body_timeout 60s, keepalive_timeout 75s, send_timeout 60s) in
// meaning: body and write timeouts bound the time between two reads or
// writes, not a whole request, so a large artifact upload or download on a
// slow link and a token stream that pauses are not cut. A body must also
// arrive at a minimum average rate after its grace period (Kestrel's
// MinRequestBodyDataRate is the model), or a client trickling one byte
// every few seconds would pass a between-reads timeout forever.
package httplimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/phaseless/phaseless/internal/cli"
)

// Config is the limits of one listener. The zero value means the defaults.
type Config struct {
	// HeaderTimeout bounds reading a request's headers (http.Server
	// ReadHeaderTimeout), which also closes a connection that sends
	// nothing. Default 10 s: headers are a few hundred bytes, and nginx's
	// 60 s is generous for a client on the far side of the internet.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the wait between two reads of a request body, and
	// is the grace period of MinBodyRate. Default 60 s (nginx).
	BodyTimeout time.Duration
	// MinBodyRate is the least average rate, in bytes per second, at which
	// a body must arrive once BodyTimeout has passed. Default 1024.
	MinBodyRate int64
	// WriteTimeout bounds one write of a response (the wait for a client
	// that stopped reading), not the response: a stream's pauses between
	// tokens do not count. Default 60 s (nginx send_timeout).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request. Default
	// 75 s (nginx keepalive_timeout).
	IdleTimeout time.Duration
	// MaxConns caps the connections the listener holds; more wait in the
	// kernel's accept queue until one closes. Default 4096.
	MaxConns int
}

// FillDefaults sets every zero field to its default.
func (c *Config) FillDefaults() {
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = 60 * time.Second
	}
	if c.MinBodyRate == 0 {
		c.MinBodyRate = 1024
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 60 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 75 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 4096
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"HeaderTimeout", c.HeaderTimeout}, {"BodyTimeout", c.BodyTimeout}, {"WriteTimeout", c.WriteTimeout}, {"IdleTimeout", c.IdleTimeout}} {
		if d.v < 0 {
			return &FieldError{Field: d.name, Err: fmt.Errorf("%v must not be negative", d.v)}
		}
	}
	if c.MinBodyRate < 0 {
		return &FieldError{Field: "MinBodyRate", Err: fmt.Errorf("%d must not be negative", c.MinBodyRate)}
	}
	if c.MaxConns < 0 {
		return &FieldError{Field: "MaxConns", Err: fmt.Errorf("%d must not be negative", c.MaxConns)}
	}
	return nil
}

// Fields are the flags an operator tunes the limits of a binary's main
// listener with, prefixed "http-"; goPrefix names the Config within the
// binary's own Config (for its error messages).
func (c *Config) Fields(goPrefix string) cli.Fields {
	return cli.Fields{
		{Flag: "http-header-timeout", Go: goPrefix + "HeaderTimeout", Value: &c.HeaderTimeout, Usage: "longest a client may take to send a request's headers; also closes a connection that sends nothing (0: 10s)"},
		{Flag: "http-body-timeout", Go: goPrefix + "BodyTimeout", Value: &c.BodyTimeout, Usage: "longest wait between two reads of a request body, and the grace period of --http-min-body-rate (0: 60s, nginx's client_body_timeout)"},
		{Flag: "http-min-body-rate", Go: goPrefix + "MinBodyRate", Value: &c.MinBodyRate, Usage: "bytes per second a request body must average after --http-body-timeout, so a trickling client is cut off (0: 1024)"},
		{Flag: "http-write-timeout", Go: goPrefix + "WriteTimeout", Value: &c.WriteTimeout, Usage: "longest one write of a response may wait on a client that stopped reading; a stream's pauses between tokens do not count (0: 60s, nginx's send_timeout)"},
		{Flag: "http-idle-timeout", Go: goPrefix + "IdleTimeout", Value: &c.IdleTimeout, Usage: "how long a keep-alive connection may wait for its next request (0: 75s, nginx's keepalive_timeout)"},
		{Flag: "http-max-conns", Go: goPrefix + "MaxConns", Value: &c.MaxConns, Usage: "connections the HTTP listener holds at once; more wait in the kernel's accept queue (0: the binary's default)"},
	}
}

// Rename turns a *FieldError from Validate into a cli.FieldError whose
// field is goPrefix + the field, so the binary's Fields name its flag.
func Rename(err error, goPrefix string) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &cli.FieldError{Field: goPrefix + fe.Field, Err: fe.Err}
	}
	return err
}

// FieldError names the Config field that is wrong.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "httplimit.Config." + e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Server returns an http.Server for h under c (defaults filled): header and
// idle timeouts on the server, body and write timeouts per read and write.
// Serve it on Listener(ln). There is deliberately no ReadTimeout or
// WriteTimeout on the server: both are whole-request deadlines that would
// cut uploads, downloads and streams.
func (c Config) Server(h http.Handler) *http.Server {
	c.FillDefaults()
	return &http.Server{
		Handler:           c.Wrap(h),
		ReadHeaderTimeout: c.HeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
	}
}

// Listener caps ln at c.MaxConns connections (default filled).
func (c Config) Listener(ln net.Listener) net.Listener {
	c.FillDefaults()
	return netutil.LimitListener(ln, c.MaxConns)
}

// Wrap applies the body and write timeouts to h's requests. Server does it;
// Wrap is for a server built elsewhere.
func (c Config) Wrap(h http.Handler) http.Handler {
	c.FillDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		lw := &limitedWriter{ResponseWriter: w, rc: rc, timeout: c.WriteTimeout}
		if r.Body != nil && r.Body != http.NoBody {
			start := time.Now()
			lb := &limitedBody{body: r.Body, rc: rc, c: &c, start: start}
			// Also bounds the server's discarding of a body the handler
			// did not read.
			_ = rc.SetReadDeadline(start.Add(c.BodyTimeout))
			r.Body = lb
		}
		h.ServeHTTP(lw, r)
		// The server writes the end of a chunked response after the
		// handler returns: give it a fresh deadline, not the last write's.
		_ = rc.SetWriteDeadline(time.Now().Add(c.WriteTimeout))
	})
}

// limitedBody moves the connection's read deadline along as the body
// arrives: BodyTimeout from now, but no later than the grace period plus
// what has arrived at MinBodyRate. At the end of the body it clears the
// deadline, because net/http's background read (which notices a client
// that went away during a long response) would otherwise hit it and cancel
// the request.
type limitedBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	c     *Config
	start time.Time
	n     int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		_ = b.rc.SetReadDeadline(time.Time{})
	case err == nil:
		now := time.Now()
		d := now.Add(b.c.BodyTimeout)
		if rate := b.start.Add(b.c.BodyTimeout + time.Duration(float64(b.n)/float64(b.c.MinBodyRate)*float64(time.Second))); rate.Before(d) {
			d = rate
		}
		_ = b.rc.SetReadDeadline(d)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.body.Close() }

// limitedWriter sets a write deadline before each write and flush.
type limitedWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.ResponseWriter.Write(p)
}

func (w *limitedWriter) WriteHeader(code int) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	w.ResponseWriter.WriteHeader(code)
}

// Flush lets handlers that assert http.Flusher stream through the wrapper.
func (w *limitedWriter) Flush() {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	_ = w.rc.Flush()
}

func (w *limitedWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *limitedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
