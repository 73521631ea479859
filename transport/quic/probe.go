package quic

import (
	"time"

	quicgo "github.com/quic-go/quic-go"
)

// Loss probes: a request packet lost on a lossy link is otherwise found late.
//
// After the request frame the client sends nothing the server must
// acknowledge: its packets carry only ACKs of the server's tokens, and an
// ACK-only packet elicits no ACK (RFC 9000 §13.2.1). So the loss of the
// packet that carried the request shows only when its probe timeout fires
// (smoothed RTT + 4·RTT variance + max_ack_delay, about 200 ms on lte-poor),
// and every ack-eliciting packet the client sends meanwhile — another
// request, quic-go's PING after 20 ACK-only packets — restarts that timer
// (RFC 9002 §6.2.1). A qlog of `phaselessctl bench link` on lte-poor showed
// the five slowest first tokens were all lost requests, found 223–394 ms
// after they were sent.
//
// So the client sends one small DATAGRAM frame (RFC 9221; ack-eliciting)
// lossProbeDelay after each request frame, in a packet of its own. If the
// request's packet was lost and the probe's arrived, the server sees a gap
// and acknowledges at once; the client then declares the request's packet
// lost by the time threshold (9/8 of the RTT after it was sent, RFC 9002
// §6.1.2) and resends it. The server reads the probes and drops them.
// Either side without datagram support simply goes without: SendDatagram
// fails, and the request is found by its probe timeout as before. So does
// a request sent in 0-RTT before the handshake completes (see roundTrip).

// lossProbeDelay puts the probe in a later packet than the request: quic-go
// may pack a datagram queued while the request still waits into the same
// packet, where it would share the request's fate.
const lossProbeDelay = 5 * time.Millisecond

// lossProbe is the probe's payload: its content is never read.
var lossProbe = []byte{0}

// sendProbe sends one probe datagram, unless the handshake has not
// completed: until then (a request sent in 0-RTT) SendDatagram reads the
// peer's transport parameters while the handshake writes them
// (quic-go#4303; -race caught it in TestHandoverMidStream). A peer without
// datagram support gets none; the error is the same as no probe.
func (l *link) sendProbe() {
	if l.confirmed() {
		_ = l.conn.SendDatagram(lossProbe)
	}
}

// discardProbes reads and drops the datagrams a client sends until the
// connection ends, so they do not fill quic-go's receive queue, and counts
// them (ServerStats.LossProbes).
func (s *Server) discardProbes(conn *quicgo.Conn) {
	for {
		if _, err := conn.ReceiveDatagram(conn.Context()); err != nil {
			return
		}
		s.lossProbes.Add(1)
	}
}
