package quic

import (
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
)

// A revoked device loses its open connection and its stream in flight at
// once (DisconnectDevice), cannot connect again (the handshake consults the
// deny list), and a connection made before the revocation cannot start new
// requests even if nobody closed it; other devices carry on.
func TestRevokedDevice(t *testing.T) {
	denyDir := t.TempDir()
	deny, err := pki.LoadDenyList(denyDir)
	if err != nil {
		t.Fatal(err)
	}
	revoke := func(id string) {
		t.Helper()
		if _, err := pki.Revoke(denyDir, id, "test", time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := deny.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, &stallHandler{tokens: 1}, func(sc *ServerConfig) {
		pki.DenyRevoked(sc.TLS, deny)
		sc.Revoked = deny.Revoked
	})
	addr := s.Addr().String()
	short := func(cc *ClientConfig) { cc.ConnectWait = 500 * time.Millisecond }
	stolen := dial(t, addr, "dev-2", short)
	idle := dial(t, addr, "dev-3", short)
	other := dial(t, addr, "dev-1", short)

	got := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := stolen.Generate(guardCtx(t), req("in-flight"), func(llm.Token) error {
			close(got)
			return nil
		})
		res <- err
	}()
	<-got
	revoke("dev-2")
	if n := s.DisconnectDevice("dev-2"); n != 1 {
		t.Fatalf("closed %d connections, want 1", n)
	}
	if err := <-res; llm.CodeOf(err) != llm.CodeAuth || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("stream in flight ended with %v, want a revocation", err)
	}
	if _, _, err := collect(guardCtx(t), stolen, req("again")); llm.CodeOf(err) != llm.CodeAuth {
		t.Fatalf("redial of a revoked device: %v, want an authentication failure", err)
	}

	// dev-3's connection predates its revocation and nobody closed it.
	waitFor(t, "dev-3 to connect", func() bool { return idle.Link().Connected })
	revoke("dev-3")
	if _, _, err := collect(guardCtx(t), idle, req("after")); llm.CodeOf(err) != llm.CodeAuth {
		t.Fatalf("request on a connection from before the revocation: %v, want refused", err)
	}

	okc := make(chan struct{})
	go func() {
		other.Generate(guardCtx(t), req("fine"), func(llm.Token) error {
			select {
			case <-okc:
			default:
				close(okc)
			}
			return nil
		})
	}()
	select {
	case <-okc:
	case <-time.After(hangGuard):
		t.Fatal("another device's request got no token")
	}
}
