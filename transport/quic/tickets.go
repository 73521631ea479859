package quic

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"

	quicgo "github.com/quic-go/quic-go"
)

// ticketKeeper wraps the client's TLS session cache so that a redial into
// a link that is still dark does not cost the redial that works its 0-RTT.
//
// crypto/tls deletes the session a resumed handshake tried (Put(key, nil))
// whenever that handshake fails, following RFC 5077 §3.2: a ticket the
// server choked on may be corrupt. A handshake that the link cut short fails
// too, though the server never saw the ticket. In a tunnel the client
// redials before the link returns (every StallTimeout while a stream waits
// to resume), so the first redial spent the ticket and the connection that
// worked once the link came back did a full handshake: resumed streams
// waited a round trip more, and their resume frame could not ride in 0-RTT.
//
// The keeper sets a deleted session aside; settle puts it back when the
// handshake ended without a word from the server (a timeout, the client's
// own close) and forgets it when the server did answer (an alert, a close),
// as crypto/tls intends. Reusing a ticket is safe here: the server runs a
// keyed 0-RTT request once (dedupe.go), and a connection presents the
// device certificate's identity either way.
type ticketKeeper struct {
	tls.ClientSessionCache
	mu    sync.Mutex
	aside map[string]*tls.ClientSessionState
}

func newTicketKeeper(c tls.ClientSessionCache) *ticketKeeper {
	return &ticketKeeper{ClientSessionCache: c, aside: map[string]*tls.ClientSessionState{}}
}

// Put implements tls.ClientSessionCache.
func (k *ticketKeeper) Put(key string, cs *tls.ClientSessionState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cs == nil {
		if old, ok := k.ClientSessionCache.Get(key); ok && old != nil {
			k.aside[key] = old
		}
	} else {
		delete(k.aside, key)
	}
	k.ClientSessionCache.Put(key, cs)
}

// settle is called with the error that ended a connection or a dial (after
// quic-go has shut the handshake down, so crypto/tls's delete has
// happened): it restores the sessions deleted since the last call if the
// server never answered, and forgets them otherwise.
func (k *ticketKeeper) settle(err error) {
	silent := unanswered(err)
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, cs := range k.aside {
		if cur, ok := k.ClientSessionCache.Get(key); silent && (!ok || cur == nil) {
			k.ClientSessionCache.Put(key, cs)
		}
		delete(k.aside, key)
	}
}

// unanswered reports whether err ended a connection without the server
// having said anything about it: the handshake or idle timeout, or a close
// of the client's own (the stall watchdog, Close).
func unanswered(err error) bool {
	var (
		ht *quicgo.HandshakeTimeoutError
		it *quicgo.IdleTimeoutError
		ae *quicgo.ApplicationError
	)
	switch {
	case errors.As(err, &ht), errors.As(err, &it):
		return true
	case errors.As(err, &ae):
		return !ae.Remote
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClientClosed)
}
