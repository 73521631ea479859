package mochilisten_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"

	"github.com/phaseless/phaseless/internal/mochilisten"
)

// TestCloseWhileClientsConnect closes servers while clients keep connecting
// and taking each other's client ids over (each takeover deletes from the
// client map under its write lock, the writer of mochi-mqtt/server#488).
// Close must return and disconnect everyone; the deadline is a hang guard.
// The race window is narrow, so this does not fail on every run without
// the listener's fix; it fails by hanging when it does.
func TestCloseWhileClientsConnect(t *testing.T) {
	for round := range 20 {
		srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
		if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l := mochilisten.New(srv, "t", ln)
		if err := srv.AddListener(l); err != nil {
			t.Fatal(err)
		}
		if err := srv.Serve(); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		connected := 0
		for c := range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if connect(l.Address(), fmt.Sprintf("c%d", c%2)) {
						mu.Lock()
						connected++
						mu.Unlock()
					}
				}
			})
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			n := connected
			mu.Unlock()
			if n >= 4 || time.Now().After(deadline) {
				break
			}
		}
		done := make(chan struct{})
		go func() { srv.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Server.Close hung with clients connecting", round)
		}
		close(stop)
		wg.Wait()
		mu.Lock()
		if connected == 0 {
			t.Fatalf("round %d: no client ever connected", round)
		}
		mu.Unlock()
		for _, cl := range srv.Clients.GetAll() {
			if !cl.Net.Inline && !cl.Closed() {
				t.Fatalf("round %d: client %s still connected after Close", round, cl.ID)
			}
		}
	}
}

// connect opens one MQTT v5 session as id and leaves the connection open
// for the server to close (or a takeover to end); it reports whether the
// broker accepted it.
func connect(addr, id string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: id})
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true})
	if err != nil {
		conn.Close()
		return false
	}
	go func() { <-c.Done(); conn.Close() }()
	return ca.ReasonCode == 0
}
