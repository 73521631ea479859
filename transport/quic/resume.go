package quic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/phaseless/phaseless/llm"
)

// Resuming a stream after a lost link.
//
// A vehicle's uplink drops for seconds to a minute (tunnels, garages,
// handovers) while the cloud is still answering. Every request the client
// sends with resuming on carries an idempotency key — the app's, or one the
// client makes (ResumeKeyPrefix) — so the server runs it as a generation
// that buffers its tokens apart from any one stream (dedupe.go). When the
// stream's connection dies without the device saying anything, the
// generation keeps running for ServerConfig.ResumeWindow with nobody
// following it; the client reconnects (in 0-RTT when it holds a ticket)
// and opens a stream whose first frame is a resume frame naming the key and
// how many tokens it has delivered, and the server follows the generation
// again from exactly that token. So no token is lost or repeated.
//
// What bounds the cloud's side: the window (a detached generation still
// running when it passes is cancelled; a finished one's tokens are freed)
// and MaxReplayBytes per generation (tokens every attached stream has
// written are dropped from the front when it is full, and a generation
// nobody follows pauses at the limit instead of growing). A device's
// cancel — a cancel frame or a reset on any of its streams, including a
// resume stream the client opens only to cancel a request it gave up
// during the blackout — stops the run at once and frees its tokens. An
// answer the device acknowledged (it closes its side after the last frame)
// frees a client-made key's tokens at once; an app's key keeps its answer
// for DedupeTTL, as before, so a replay still gets it.
//
// The client's side is ClientConfig.ResumeDeadline: how long after it last
// heard from the cloud it keeps trying. Past it, Generate returns the
// error that ended the link (a retryable CodeUnavailable) and the caller
// (the agent's dispatcher) continues the answer another way.

// ResumeKeyPrefix starts the idempotency keys the client makes for requests
// that carry none, so the server knows no app will replay them.
const ResumeKeyPrefix = "resume/"

// isResumeKey reports whether a dedupe table key (device NUL key) holds a
// client-made key.
func isResumeKey(tableKey string) bool {
	_, k, _ := strings.Cut(tableKey, "\x00")
	return strings.HasPrefix(k, ResumeKeyPrefix)
}

// Resume is a resume frame's content: the request's idempotency key and the
// number of tokens the client has delivered, which it wants to continue
// after; or, with Cancel, that the device gave the request up while it
// could not say so (the server cancels it and closes the stream).
type Resume struct {
	Key    string
	Offset int
	Cancel bool
}

// errNotBuffered ends a resume stream whose tokens are not (or no longer)
// in the generation's buffer.
var errNotBuffered = &llm.Error{Code: llm.CodeUnavailable, Message: "resume: the tokens after the offset are no longer buffered"}

// resume serves a resume frame: it follows the device's generation for the
// key from the offset on, or ends the stream with an error when there is
// none to follow (never ran here, cancelled, window passed, server
// restarted).
func (s *Server) resume(ctx context.Context, w *streamWriter, device string, r Resume, stopReset func() bool) (*generation, *cursor, followResult) {
	g := s.dedupe.rejoin(device + "\x00" + r.Key)
	if g == nil && r.Cancel {
		return nil, nil, followResult{ended: s.end(ctx, w, llm.Final{}, errDeviceCancelled, stopReset)}
	}
	if g == nil {
		s.resumeRefused.Add(1)
		err := &llm.Error{Code: llm.CodeUnavailable, Message: "resume: no request with this key to resume (it ended, its window passed, or the cloud restarted)"}
		return nil, nil, followResult{ended: s.end(ctx, w, llm.Final{}, err, stopReset)}
	}
	if r.Cancel {
		g.leave(nil, leftCancelled, 0)
		return nil, nil, followResult{ended: s.end(ctx, w, llm.Final{}, errDeviceCancelled, stopReset)}
	}
	s.resumed.Add(1)
	c := g.attach(r.Offset)
	return g, c, s.follow(ctx, w, g, c, stopReset)
}

// errResumeDeadline cancels a resume stream that heard nothing before the
// resume deadline.
var errResumeDeadline = errors.New("resume deadline passed")

// resume follows a request whose link dropped after st.delivered tokens:
// on each new connection it sends a resume frame for key from that offset,
// until the answer ends, the cloud has said nothing for ResumeDeadline, or
// the cloud has nothing to resume. lost is the error that ended the link,
// returned (with the deadline said) when the link does not come back.
func (c *Client) resume(ctx context.Context, key string, st *streamState, lost error, emit llm.Emit) (llm.Final, error) {
	deadlineErr := func() error {
		c.forget(true, key, roundTripResult{sent: true, linkLost: true})
		return &llm.Error{Code: llm.CodeUnavailable, Retryable: true,
			Message: fmt.Sprintf("%v; the link did not return within the %v resume deadline", errMessage(lost), c.cfg.ResumeDeadline)}
	}
	c.resuming.Add(1)
	defer c.resuming.Add(-1)
	select {
	case c.hurry <- struct{}{}:
	default:
	}
	for attempt := 0; ; attempt++ {
		left := c.cfg.ResumeDeadline - c.cfg.Clock.Now().Sub(st.lastHeard())
		if left <= 0 {
			return llm.Final{}, deadlineErr()
		}
		l, err := c.waitLink(ctx, left)
		if err != nil {
			if ctx.Err() != nil {
				c.forget(true, key, roundTripResult{sent: true, linkLost: true})
				return llm.Final{}, cancelled(ctx)
			}
			if llm.CodeOf(err) == llm.CodeAuth {
				return llm.Final{}, err
			}
			continue // the wait ended at the deadline; the loop says so
		}
		// The stream gives up at the deadline unless it hears from the
		// cloud first: a redial in 0-RTT to a dead cloud looks connected.
		heard := st.lastHeard()
		rctx, cancel := context.WithCancelCause(ctx)
		timer := time.AfterFunc(left, func() {
			if st.lastHeard().After(heard) {
				return
			}
			cancel(errResumeDeadline)
		})
		c.mu.Lock()
		c.resumes++
		c.mu.Unlock()
		c.log.Info("quic: resuming a stream", "key", key, "offset", st.delivered, "attempt", attempt+1)
		first := &Frame{Type: FrameResume, Resume: Resume{Key: key, Offset: st.delivered}, Heartbeat: heartbeatInterval(c.cfg.StallTimeout)}
		final, rt := c.stream(rctx, l, first, st, emit)
		timer.Stop()
		deadline := context.Cause(rctx) == errResumeDeadline
		cancel(nil)
		switch {
		case rt.err == nil:
			return final, nil
		case ctx.Err() != nil:
			c.forget(true, key, rt)
			return llm.Final{}, cancelled(ctx)
		case deadline:
			return llm.Final{}, deadlineErr()
		case errors.Is(rt.err, quicgo.Err0RTTRejected):
			if _, err := l.conn.NextConnection(ctx); err != nil && ctx.Err() != nil {
				return llm.Final{}, cancelled(ctx)
			}
			continue
		case rt.linkLost && llm.CodeOf(rt.err) != llm.CodeAuth:
			lost = rt.err // a flapping link: resume again, from the new offset
			continue
		}
		c.forget(true, key, rt)
		return llm.Final{}, rt.err
	}
}

func errMessage(err error) string {
	var le *llm.Error
	if errors.As(err, &le) {
		return le.Message
	}
	return err.Error()
}

// maxPendingCancels bounds the requests remembered for cancelling on the
// next connection; past it the oldest are left to the cloud's window.
const maxPendingCancels = DefaultMaxStreams

// resumeRedial is the longest wait between redials while a stream waits to
// resume: a redial costs one flight, and every second of waiting is a
// second the answer stalls after the link is back.
const resumeRedial = time.Second

// forget remembers to cancel key on the next connection when a resumable
// request ends without the cloud knowing: its last stream neither ended
// with the server's last frame nor could deliver a cancel (its link was
// lost, or was a 0-RTT redial into a link still dark). The cloud would
// otherwise run it for its whole resume window.
func (c *Client) forget(resumable bool, key string, rt roundTripResult) {
	if !resumable || !rt.sent || rt.ended || !rt.linkLost && !rt.unconfirmed {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cancels) == maxPendingCancels {
		c.cancels = c.cancels[1:]
	}
	c.cancels = append(c.cancels, key)
	if c.cur != nil && !c.closed { // the link is back already
		c.flushing.Add(1)
		go c.sendCancels(c.cur)
	}
}

// sendCancels tells the cloud, on a new connection, about the requests
// given up while the link was down: one resume frame with Cancel each. It
// waits for the handshake, so a cancel is not lost in a 0-RTT flight into
// a link still dark; whatever it cannot send waits for the next connection.
func (c *Client) sendCancels(l *link) {
	defer c.flushing.Done()
	select {
	case <-l.conn.HandshakeComplete():
	case <-l.conn.Context().Done():
		return // the next connection flushes the list
	case <-c.ctx.Done():
		return
	}
	c.mu.Lock()
	keys := c.cancels
	c.cancels = nil
	c.mu.Unlock()
	for i, key := range keys {
		if err := c.sendCancel(l, key); err != nil {
			c.mu.Lock()
			c.cancels = append(keys[i:len(keys):len(keys)], c.cancels...)
			c.mu.Unlock()
			c.log.Debug("quic: cancel not sent; kept for the next connection", "err", err)
			return
		}
	}
}

// sendCancel sends one cancel and waits for the server to end the stream,
// which it does once it has acted on it.
func (c *Client) sendCancel(l *link, key string) error {
	l.inflight.Add(1) // the stall watchdog watches this stream too
	defer l.inflight.Add(-1)
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ConnectWait)
	defer cancel()
	str, err := l.conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	b, _ := AppendFrame(nil, &Frame{Type: FrameResume, Resume: Resume{Key: key, Cancel: true}})
	str.SetDeadline(time.Now().Add(c.cfg.ConnectWait))
	if _, err := str.Write(b); err != nil {
		str.CancelWrite(streamCancelled)
		str.CancelRead(streamCancelled)
		return err
	}
	str.Close()
	_, err = io.Copy(io.Discard, str)
	if err != nil {
		str.CancelRead(streamCancelled)
	}
	return err
}
