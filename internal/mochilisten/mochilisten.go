// Package mochilisten is the listener every mochi-mqtt server in the
// project serves through, the cloud's broker and the agent's test brokers
// alike. It lives outside both because the agent never imports the cloud.
//
// It fixes two bugs of mochi v2.7.9's own TCP listener. First, its
// connections share one error variable, a data race under -race with
// concurrent connects. Second, its Close disconnects clients through
// Clients.GetByListener. That method read-locks the client map twice (the
// RLock, then Len's RLock). A client attaching during Close queues its
// Delete for the write lock between the two, and the server's shutdown
// deadlocks: mochi-mqtt/server#488, whose fixes (#489, #507) are unreleased.
// This listener hung CI's fleet-client tests for 14 minutes before the test
// brokers used it.
package mochilisten

import (
	"log/slog"
	"net"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Listener serves an already bound net.Listener (so a ":0" address is
// known before Serve). A connection accepted just before Close can attach
// after the shutdown sweep and hold Server.Close forever; this listener
// tracks its connections and closes the stragglers itself.
type Listener struct {
	id  string
	ln  net.Listener
	log *slog.Logger
	srv *mqtt.Server // its clients are disconnected at Close

	mu     sync.Mutex // guards conns, closed, and Add on running
	conns  map[net.Conn]struct{}
	closed bool
	// running counts the connections' goroutines. mochi's attachClient
	// calls Listeners.ClientsWg.Add when it starts, and Server.Close waits
	// on that group right after this Close returns; an Add racing that Wait
	// is a WaitGroup misuse (-race reports it). Close therefore returns only
	// when every connection's goroutine has ended.
	running sync.WaitGroup
}

var _ listeners.Listener = (*Listener)(nil)

// New serves ln (plain, or wrapped by tls.NewListener) as srv's listener
// id; add it with srv.AddListener.
func New(srv *mqtt.Server, id string, ln net.Listener) *Listener {
	return &Listener{id: id, ln: ln, srv: srv, conns: map[net.Conn]struct{}{}}
}

func (l *Listener) ID() string       { return l.id }
func (l *Listener) Address() string  { return l.ln.Addr().String() }
func (l *Listener) Protocol() string { return "tcp" }

func (l *Listener) Init(log *slog.Logger) error {
	l.log = log
	return nil
}

// Serve accepts until the listener is closed. mochi tracks each connection's
// goroutine in Listeners.ClientsWg and waits for them in Server.Close.
func (l *Listener) Serve(establish listeners.EstablishFn) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			conn.Close()
			return
		}
		l.conns[conn] = struct{}{}
		l.running.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.running.Done()
			if err := establish(l.id, conn); err != nil {
				l.log.Debug("MQTT connection ended", "remote", conn.RemoteAddr().String(), "err", err)
			}
			l.mu.Lock()
			delete(l.conns, conn)
			l.mu.Unlock()
		}()
	}
}

// Close disconnects the clients gracefully (mochi sends DISCONNECT with
// "server shutting down"), reading the client map once instead of through
// mochi's CloseFn (the deadlock above), then closes any connection that had
// not attached yet, and waits for every connection's goroutine to end. It
// may be called before Serve, and more than once.
func (l *Listener) Close(listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	_ = l.ln.Close()
	for _, cl := range l.srv.Clients.GetAll() {
		if cl.Net.Listener == l.id && !cl.Closed() {
			_ = l.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.running.Wait()
}
