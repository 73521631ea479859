package quic

import quicgo "github.com/quic-go/quic-go"

// DisconnectDevice closes every connection of device id (after its
// certificate was revoked): its requests in flight end on both sides, the
// client sees a revocation (CodeAuth), and its redials fail at the
// handshake. It returns how many connections it closed.
func (s *Server) DisconnectDevice(id string) int {
	s.mu.Lock()
	var victims []*peerConn
	for c, p := range s.conns {
		if p != nil {
			victims = append(victims, &peerConn{c, p})
		}
	}
	s.mu.Unlock()
	n := 0
	for _, v := range victims {
		select {
		case <-v.p.ready:
		default:
			// Not identified yet: its handshake is still running and the
			// deny list refuses it, or its first request is checked.
			continue
		}
		if v.p.id == id {
			v.c.CloseWithError(connRevoked, "device certificate revoked")
			n++
		}
	}
	if n > 0 {
		s.log.Warn("quic: closed a revoked device's connections", "device", id, "connections", n)
	}
	return n
}

type peerConn struct {
	c *quicgo.Conn
	p *peer
}
