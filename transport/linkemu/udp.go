package linkemu

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// maxDatagram is the largest datagram the relay forwards (UDP's limit).
const maxDatagram = 65535

// UDPRelay forwards datagrams between clients and Target through the
// emulated link. Each client address gets its own socket towards the target,
// so the target sees one address per client, as behind a NAT; ChangePath
// moves every client to a new socket (a NAT rebinding), and a client that
// itself moves to a new local socket (QUIC connection migration) simply
// arrives as a new client. Client sessions live until Close.
type UDPRelay struct {
	*link
	conn   *net.UDPConn // the client-facing socket
	target *net.UDPAddr

	upQ, downQ *delivery
	done       chan struct{}
	wg         sync.WaitGroup

	mu       sync.Mutex // guards sessions, closed
	sessions map[netip.AddrPort]*udpSession
	closed   bool
}

// udpSession is one client's path to the target.
type udpSession struct {
	client netip.AddrPort
	mu     sync.Mutex   // guards out
	out    *net.UDPConn // connected to the target; replaced by a path change
}

func (s *udpSession) socket() *net.UDPConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out
}

// ListenUDP starts a UDP relay.
func ListenUDP(cfg Config) (*UDPRelay, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	target, err := net.ResolveUDPAddr("udp", cfg.Target)
	if err != nil {
		return nil, err
	}
	laddr, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, err
	}
	r := &UDPRelay{link: newLink(cfg), conn: conn, target: target, done: make(chan struct{}), sessions: map[netip.AddrPort]*udpSession{}}
	r.upQ, r.downQ = startDelivery(r.done, &r.wg), startDelivery(r.done, &r.wg)
	r.wg.Add(1)
	go r.readClients()
	for _, at := range cfg.Profile.PathChanges {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if sleepUntil(r.start.Add(at), r.done) {
				r.ChangePath()
			}
		}()
	}
	return r, nil
}

// Addr is where clients send: the relay's own address.
func (r *UDPRelay) Addr() *net.UDPAddr { return r.conn.LocalAddr().(*net.UDPAddr) }

// readClients forwards the clients' datagrams upstream.
func (r *UDPRelay) readClients() {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := r.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		s := r.session(from)
		if s == nil {
			return
		}
		r.forward(r.up, &r.upC, r.upQ, buf[:n], func(p []byte) error {
			_, err := s.socket().Write(p)
			return err
		})
	}
}

// forward shapes one datagram and schedules its delivery with send.
func (r *UDPRelay) forward(sh *shaper, c *counters, q *delivery, p []byte, send func([]byte) error) {
	now := time.Now()
	v := sh.packet(now, len(p))
	c.arrived(len(p), v)
	if v.fate != delivered {
		return
	}
	if cut, _, _ := r.isCut(now); cut {
		c.blackoutDropped.Add(1)
		return
	}
	data := append([]byte(nil), p...)
	q.push(v.at, func() {
		// Packets in the air when a blackout starts are lost too.
		if cut, _, _ := r.isCut(time.Now()); cut {
			c.blackoutDropped.Add(1)
			return
		}
		if send(data) == nil {
			c.delivered.Add(1)
		}
	})
}

// session finds or opens the client's path to the target; nil once closed.
func (r *UDPRelay) session(client netip.AddrPort) *udpSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if s := r.sessions[client]; s != nil {
		return s
	}
	out, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil
	}
	s := &udpSession{client: client, out: out}
	r.sessions[client] = s
	r.wg.Add(1)
	go r.readTarget(s, out)
	return s
}

// readTarget forwards the target's datagrams on one socket back to the
// client, until the socket is closed (the relay closed, or a path change
// replaced it: the old NAT mapping is gone, and so are its packets).
func (r *UDPRelay) readTarget(s *udpSession, out *net.UDPConn) {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := out.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ICMP port unreachable while the target restarts
		}
		r.forward(r.down, &r.downC, r.downQ, buf[:n], func(p []byte) error {
			_, err := r.conn.WriteToUDPAddrPort(p, s.client)
			return err
		})
	}
}

// ChangePath moves every client onto a new socket towards the target, as a
// NAT rebinding or a handover to another network does: from now on the
// target sees each client at a new address, and what it sends to the old
// one is lost.
func (r *UDPRelay) ChangePath() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return net.ErrClosed
	}
	for _, s := range r.sessions {
		out, err := net.DialUDP("udp", nil, r.target)
		if err != nil {
			return err
		}
		s.mu.Lock()
		old := s.out
		s.out = out
		s.mu.Unlock()
		old.Close()
		r.wg.Add(1)
		go r.readTarget(s, out)
	}
	r.rebinds.Add(1)
	return nil
}

// Close stops the relay and waits for its goroutines. Safe to call twice.
func (r *UDPRelay) Close() error {
	return shutdown(&r.mu, &r.closed, r.done, &r.wg, func() error {
		err := r.conn.Close()
		for _, s := range r.sessions {
			s.socket().Close()
		}
		return err
	})
}
