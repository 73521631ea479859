package quic

import (
	"errors"
	"fmt"
	"io"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/phaseless/phaseless/llm"
)

// ALPN is the protocol name both sides negotiate; a peer speaking anything
// else fails the handshake.
const ALPN = "phaseless/1"

// Defaults tuned for cellular links (LTE/5G head units, boards on a modem).
const (
	// DefaultKeepAlivePeriod keeps carrier NAT bindings open: many carriers
	// drop idle UDP mappings after about 30 s (RFC 4787 asks for 2 min, but
	// measurements of mobile networks find 30–60 s common), so a ping every
	// 15 s keeps the path without waking the radio much more often.
	DefaultKeepAlivePeriod = 15 * time.Second
	// DefaultMaxIdleTimeout rides out a tunnel or a handover gap of up to a
	// minute before the connection is declared dead; keep-alives mean an
	// idle but healthy link never reaches it.
	DefaultMaxIdleTimeout = 60 * time.Second
	// DefaultHandshakeTimeout allows for radio wake-up (RRC idle → connected
	// takes 0.1–2 s) and a lossy first flight; quic-go's 5 s default
	// gives up too early on a weak signal.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxStreams is how many requests run at once on one connection.
	DefaultMaxStreams = 256
	// DefaultResumeWindow keeps a request whose link dropped running in the
	// cloud long enough for the blackouts a car meets most — tunnels and
	// underground garages of 5 to 60 s (issue 31) — to end in a resume.
	DefaultResumeWindow = 60 * time.Second
	// DefaultMaxReplayBytes holds a whole 4096-token answer (about 100 KB
	// with the per-token overhead) ten times over, so only a tool call with
	// huge arguments ever slides.
	DefaultMaxReplayBytes = 1 << 20
	// DefaultResumeDeadline is the agent's ClientConfig.ResumeDeadline: how
	// long a cloud answer waits for its link. The blackouts a car meets most
	// (tunnels, garages, handovers) last 5–60 s (issue 31); 10 s rides out
	// the short half while a user still reads the answer as one, and past
	// it the device's engine finishing the answer beats a longer stall. The
	// cloud keeps the answer longer (DefaultResumeWindow) so the deadline,
	// not the window, decides.
	DefaultResumeDeadline = 10 * time.Second
)

// Stream error codes (RESET_STREAM / STOP_SENDING).
const (
	streamDone      quicgo.StreamErrorCode = 0x0 // the reader has all it needs
	streamCancelled quicgo.StreamErrorCode = 0x1 // the request was cancelled
	streamProtocol  quicgo.StreamErrorCode = 0x2 // a frame broke the protocol
	streamShutdown  quicgo.StreamErrorCode = 0x3 // the server is shutting down
)

// Connection error codes (CONNECTION_CLOSE).
const (
	connClosed   quicgo.ApplicationErrorCode = 0x0  // the client closed
	connShutdown quicgo.ApplicationErrorCode = 0x10 // the server is shutting down
	connRevoked  quicgo.ApplicationErrorCode = 0x11 // the device's certificate was revoked
	connStalled  quicgo.ApplicationErrorCode = 0x12 // the client heard nothing from the server (heartbeat.go)
)

// linkError classifies a stream or connection failure for the caller: a
// lost link or a server going away is retryable and unavailable, a refused
// handshake is an authentication failure, a broken frame is internal.
func linkError(err error, tokens int) *llm.Error {
	var (
		se  *quicgo.StreamError
		ae  *quicgo.ApplicationError
		te  *quicgo.TransportError
		pe  *ProtocolError
		ite *quicgo.IdleTimeoutError
		hte *quicgo.HandshakeTimeoutError
	)
	after := ""
	if tokens > 0 {
		after = fmt.Sprintf(" after %d tokens", tokens)
	}
	switch {
	case errors.As(err, &pe):
		return &llm.Error{Code: llm.CodeInternal, Message: pe.Error() + after}
	case errors.As(err, &se) && se.Remote && se.ErrorCode == streamCancelled:
		return &llm.Error{Code: llm.CodeCancelled, Message: "cloud cancelled the request" + after, Retryable: true}
	case errors.As(err, &se) && se.Remote && se.ErrorCode == streamProtocol:
		return &llm.Error{Code: llm.CodeInternal, Message: "cloud reported a protocol error" + after}
	case errors.As(err, &se) && se.Remote && se.ErrorCode == streamShutdown,
		errors.As(err, &ae) && ae.Remote && ae.ErrorCode == connShutdown:
		return &llm.Error{Code: llm.CodeUnavailable, Message: "cloud is shutting down" + after, Retryable: true}
	case errors.As(err, &ae) && ae.Remote && ae.ErrorCode == connRevoked:
		return &llm.Error{Code: llm.CodeAuth, Message: "the cloud revoked this device's certificate" + after}
	case errors.As(err, &te) && te.ErrorCode.IsCryptoError():
		return &llm.Error{Code: llm.CodeAuth, Message: "TLS handshake refused: " + te.Error()}
	case errors.As(err, &ite), errors.As(err, &hte):
		return &llm.Error{Code: llm.CodeUnavailable, Message: "cloud link lost: " + err.Error() + after, Retryable: true}
	case errors.Is(err, io.EOF):
		return &llm.Error{Code: llm.CodeInternal, Message: "stream ended without a final frame" + after, Retryable: true}
	}
	return &llm.Error{Code: llm.CodeUnavailable, Message: "cloud link: " + err.Error() + after, Retryable: true}
}

// toLLMError keeps an *llm.Error as it is and classifies anything else, so
// the error frame carries the handler's classification across the hop.
func toLLMError(err error) *llm.Error {
	var le *llm.Error
	if errors.As(err, &le) {
		return le
	}
	return llm.Errorf(llm.CodeOf(err), "%v", err)
}

// errClientCancelled is the cause of a server-side context cancelled because
// the client sent a cancel frame, closed or reset its side of the stream.
var errClientCancelled = errors.New("client cancelled the request")
