package quic

import (
	"crypto/tls"
	"fmt"
	"testing"

	quicgo "github.com/quic-go/quic-go"
)

// TestTicketKeeper: a session crypto/tls deleted after a failed handshake
// comes back when the server never answered, and stays deleted when it
// did; a new ticket is never overwritten by an old one.
func TestTicketKeeper(t *testing.T) {
	for _, tc := range []struct {
		err     error
		restore bool
	}{
		{&quicgo.HandshakeTimeoutError{}, true},
		{&quicgo.IdleTimeoutError{}, true},
		{&quicgo.ApplicationError{ErrorCode: connStalled}, true},
		{fmt.Errorf("dial: %w", ErrClientClosed), true},
		{&quicgo.ApplicationError{Remote: true}, false},
		{&quicgo.TransportError{Remote: true, ErrorCode: quicgo.TransportErrorCode(0x100 + 51)}, false}, // a TLS decrypt_error alert
	} {
		k := newTicketKeeper(tls.NewLRUClientSessionCache(4))
		old := &tls.ClientSessionState{}
		k.Put("cloud", old)
		k.Put("cloud", nil) // crypto/tls after the handshake failed
		k.settle(tc.err)
		got, ok := k.Get("cloud")
		if restored := ok && got == old; restored != tc.restore {
			t.Errorf("%v: restored %v, want %v", tc.err, restored, tc.restore)
		}
		k.settle(&quicgo.IdleTimeoutError{}) // nothing set aside any more
		if got2, _ := k.Get("cloud"); got2 != got {
			t.Errorf("%v: a second settle changed the cache", tc.err)
		}
	}
	k := newTicketKeeper(tls.NewLRUClientSessionCache(4))
	old, fresh := &tls.ClientSessionState{}, &tls.ClientSessionState{}
	k.Put("cloud", old)
	k.Put("cloud", nil)
	k.Put("cloud", fresh) // a later handshake's ticket
	k.settle(&quicgo.IdleTimeoutError{})
	if got, _ := k.Get("cloud"); got != fresh {
		t.Error("settle replaced a newer ticket")
	}
}
