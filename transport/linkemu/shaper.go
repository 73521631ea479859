package linkemu

import (
	"math/rand/v2"
	"sync"
	"time"
)

// fate is what a direction does with one packet.
type fate uint8

const (
	delivered fate = iota
	lostRandom
	lostBurst
	droppedQueue
	// resetStream: a TCP segment lost maxRetransmits times in a row; the
	// relay resets the connection as Linux does after tcp_retries2.
	resetStream
)

// maxRetransmits is Linux's default tcp_retries2.
const maxRetransmits = 15

// maxBackoff caps a modelled retransmission timer (Linux TCP_RTO_MAX).
const maxBackoff = 120 * time.Second

// minRTO is Linux's TCP_RTO_MIN: the least a retransmission timer waits,
// and what a tail-loss probe adds when the lost segment is the only one in
// flight (tcp_schedule_loss_probe), to allow for the receiver's delayed ACK.
const minRTO = 200 * time.Millisecond

// verdict is a packet's fate and, when delivered, when it reaches the far end.
type verdict struct {
	fate        fate
	at          time.Time
	reordered   bool
	retransmits int // stream only: losses the modelled TCP repaired
}

// shaper decides the fate of each packet crossing one direction, on a
// clock it is handed (the relays pass the wall clock; tests a virtual one).
// It is safe for concurrent use: every flow across a direction shares its
// bottleneck and its loss process, as they share one radio.
type shaper struct {
	d   Direction
	rtt time.Duration // the link's round trip, for the modelled TCP repairs

	mu   sync.Mutex // guards the fields below
	rng  *rand.Rand
	bad  bool      // Gilbert–Elliott state
	busy time.Time // when the bottleneck has sent every byte queued so far
	fifo flow      // packet mode: one in-order flow per direction
}

func newShaper(d Direction, rtt time.Duration, seed uint64, stream uint64) *shaper {
	if d.Rate > 0 && d.Queue == 0 {
		d.Queue = DefaultQueue
	}
	return &shaper{d: d, rtt: rtt, rng: rand.New(rand.NewPCG(seed, stream))}
}

// draws are the random numbers one packet consumes, always all of them, so
// that the n-th packet's fate depends on the seed alone and not on which
// branches earlier packets took.
type draws struct{ move, burst, loss, jitter, reorder float64 }

func (s *shaper) draw() draws {
	r := s.rng
	return draws{r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64()}
}

// lose advances the burst state and reports whether the packet is lost.
func (s *shaper) lose(dr draws) fate {
	if g := s.d.Burst; g.On() {
		if s.bad {
			s.bad = dr.move >= g.R
		} else {
			s.bad = dr.move < g.P
		}
		p := g.LossGood
		if s.bad {
			p = g.LossBad
		}
		if dr.burst < p {
			return lostBurst
		}
	}
	if dr.loss < s.d.Loss {
		return lostRandom
	}
	return delivered
}

// serialize is how long the bottleneck takes to send size bytes.
func (s *shaper) serialize(size int) time.Duration {
	return time.Duration(int64(size) * 8 * int64(time.Second) / s.d.Rate)
}

// backlog is how many bytes wait for the bottleneck at now.
func (s *shaper) backlog(now time.Time) int {
	if !s.busy.After(now) {
		return 0
	}
	return int(int64(s.busy.Sub(now)) * s.d.Rate / 8 / int64(time.Second))
}

// depart queues size bytes at the bottleneck and returns when their last
// bit has left; ok is false when they do not fit in the queue.
func (s *shaper) depart(now time.Time, size int) (time.Time, bool) {
	if s.d.Rate <= 0 {
		return now, true
	}
	if s.backlog(now)+size > s.d.Queue {
		return time.Time{}, false
	}
	if s.busy.Before(now) {
		s.busy = now
	}
	s.busy = s.busy.Add(s.serialize(size))
	return s.busy, true
}

func (s *shaper) jitter(dr draws) time.Duration {
	return time.Duration(dr.jitter * float64(s.d.Jitter))
}

// packet decides the fate of a datagram of size bytes arriving at now.
func (s *shaper) packet(now time.Time, size int) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	dr := s.draw()
	lost := s.lose(dr)
	dep, ok := s.depart(now, size) // a packet lost on the air used the bottleneck too
	switch {
	case !ok:
		return verdict{fate: droppedQueue}
	case lost != delivered:
		return verdict{fate: lost}
	}
	at := dep.Add(s.d.Delay + s.jitter(dr))
	if dr.reorder < s.d.Reorder {
		return verdict{at: at.Add(s.d.ReorderBy), reordered: true}
	}
	return verdict{at: s.fifo.order(at)}
}

// stream decides when a TCP segment of size bytes, read at now, reaches
// the far end: never lost, but each loss costs the repair Linux's TCP
// (RACK-TLP, RFC 8985) would take. busy says the connection sent another
// segment this way within the last RTT, so more are likely to follow and
// their ACKs reveal the loss: RACK retransmits after RTT + RTT/4. A lone
// segment (a request, the last token after a pause) waits for the tail-loss
// probe: 2 RTT, plus 200 ms when it is the only segment in flight. Each
// further loss of the same segment waits for the retransmission timer,
// max(200 ms, 2 RTT), doubling. wait > 0 means the queue is full: nothing
// was decided, and the caller tries again after wait (back-pressure on the
// sender). The caller orders the result within its connection (flow.order).
func (s *shaper) stream(now time.Time, size int, busy bool) (v verdict, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d.Rate > 0 {
		// A segment bigger than the whole queue still goes once the queue
		// is empty, or a small queue would stall the stream for ever.
		if over := s.backlog(now) + size - s.d.Queue; over > 0 && s.busy.After(now) {
			return verdict{}, max(time.Duration(int64(over)*8*int64(time.Second)/s.d.Rate), time.Millisecond)
		}
	}
	dep := now
	if s.d.Rate > 0 {
		if s.busy.Before(now) {
			s.busy = now
		}
		s.busy = s.busy.Add(s.serialize(size))
		dep = s.busy
	}
	dr := s.draw()
	var repair time.Duration
	for s.lose(dr) != delivered {
		if v.retransmits == maxRetransmits {
			return verdict{fate: resetStream, retransmits: v.retransmits}, 0
		}
		repair += s.repair(v.retransmits, busy)
		v.retransmits++
		dr = s.draw()
	}
	v.at = dep.Add(s.d.Delay + s.jitter(dr) + repair)
	return v, 0
}

// repair is how long TCP takes to resend a segment lost for the k-th time
// (from 0); see stream.
func (s *shaper) repair(k int, busy bool) time.Duration {
	switch {
	case k > 0:
		return min(max(minRTO, 2*s.rtt)<<(k-1), maxBackoff)
	case busy:
		return s.rtt + s.rtt/4
	default:
		return 2*s.rtt + minRTO
	}
}

// flow keeps the packets of one ordered flow in order: jitter never lets a
// later packet overtake an earlier one. sent is when the flow last sent
// (the TCP relay's busy test).
type flow struct{ last, sent time.Time }

// busy reports whether the flow sent within rtt of now, and notes now.
func (f *flow) busy(now time.Time, rtt time.Duration) bool {
	b := !f.sent.IsZero() && now.Sub(f.sent) < max(rtt, time.Millisecond)
	f.sent = now
	return b
}

func (f *flow) order(at time.Time) time.Time {
	if at.Before(f.last) {
		at = f.last
	}
	f.last = at
	return at
}
