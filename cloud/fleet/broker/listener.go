package broker

import (
	"log/slog"
	"net"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// netListener serves an already bound net.Listener (so a ":0" address is
// known before Serve). mochi's TCP and Net listeners share one error variable
// among the goroutines of all connections (a data race under -race with
// concurrent connects), and a connection accepted just before Close can
// attach after the shutdown sweep and hold Server.Close forever; this one
// tracks its connections and closes the stragglers itself.
type netListener struct {
	id  string
	ln  net.Listener
	log *slog.Logger
	// disconnect replaces mochi's CloseFn: mochi v2.7.9's
	// Clients.GetByListener read-locks the client map twice (RLock, then
	// Len's RLock), so a client attaching during Close (its Delete queues
	// for the write lock between the two) deadlocks the broker's shutdown;
	// seen in CI under -race. disconnect reads the map once.
	disconnect func(listener string)

	mu     sync.Mutex // guards conns, closed
	conns  map[net.Conn]struct{}
	closed bool
}

var _ listeners.Listener = (*netListener)(nil)

func newNetListener(srv *mqtt.Server, id string, ln net.Listener) *netListener {
	return &netListener{id: id, ln: ln, conns: map[net.Conn]struct{}{}, disconnect: disconnectListener(srv)}
}

// NewListener serves ln (plain, or wrapped by tls.NewListener) on srv with
// both fixes above: connections tracked and closed at Close, and clients
// disconnected with one read of the client map. Every mochi server in the
// project, test brokers included, listens through it: mochi's own TCP
// listener hung the agent's fleet-client tests in Close (CI, 2026-12-05).
func NewListener(srv *mqtt.Server, id string, ln net.Listener) listeners.Listener {
	return newNetListener(srv, id, ln)
}

func (l *netListener) ID() string       { return l.id }
func (l *netListener) Address() string  { return l.ln.Addr().String() }
func (l *netListener) Protocol() string { return "tcp" }

func (l *netListener) Init(log *slog.Logger) error {
	l.log = log
	return nil
}

// Serve accepts until the listener is closed. mochi tracks each connection's
// goroutine in Listeners.ClientsWg and waits for them in Server.Close.
func (l *netListener) Serve(establish listeners.EstablishFn) {
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
		l.mu.Unlock()
		go func() {
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
// "server shutting down"), then closes any connection that had not attached
// yet.
func (l *netListener) Close(listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	_ = l.ln.Close()
	l.disconnect(l.id)
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
}
