package linkemu

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a relay.
type Config struct {
	// Target is the host:port the relay forwards to.
	Target string
	// Listen is the relay's own address (default 127.0.0.1:0).
	Listen string
	// Profile is the link to emulate; the zero value passes everything.
	Profile Profile
	// Seed fixes every random decision; two relays with the same seed and
	// profile treat the n-th packet of each direction alike.
	Seed uint64
}

func (c *Config) fillDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	if c.Target == "" {
		return errors.New("linkemu: Config.Target is required")
	}
	if _, _, err := net.SplitHostPort(c.Target); err != nil {
		return fmt.Errorf("linkemu: Config.Target: %w", err)
	}
	return c.Profile.Validate()
}

// Stats counts what one direction did. Packets are datagrams for the UDP
// relay and segments (at most MSS bytes) for the TCP relay.
type Stats struct {
	Packets, Bytes  int64 // arrived at the relay
	Delivered       int64 // sent on to the far end
	Lost            int64 // random loss
	BurstLost       int64 // Gilbert–Elliott loss
	QueueDropped    int64 // tail drop at a full bottleneck queue (UDP)
	BlackoutDropped int64 // sent into a blackout (UDP)
	BlackoutHeld    int64 // held until a blackout ended (TCP)
	Reordered       int64 // held back so that later packets overtook it (UDP)
	Retransmits     int64 // losses repaired by the modelled TCP (TCP)
}

// LinkStats is both directions' Stats and the link's own events.
type LinkStats struct {
	Up, Down    Stats
	PathChanges int64 // UDP: times clients moved to a new source port
}

// counters is Stats kept with atomics.
type counters struct {
	packets, bytes, delivered, lost, burstLost, queueDropped,
	blackoutDropped, blackoutHeld, reordered, retransmits atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Packets: c.packets.Load(), Bytes: c.bytes.Load(), Delivered: c.delivered.Load(),
		Lost: c.lost.Load(), BurstLost: c.burstLost.Load(), QueueDropped: c.queueDropped.Load(),
		BlackoutDropped: c.blackoutDropped.Load(), BlackoutHeld: c.blackoutHeld.Load(),
		Reordered: c.reordered.Load(), Retransmits: c.retransmits.Load(),
	}
}

// arrived counts a packet and the fate the shaper gave it.
func (c *counters) arrived(size int, v verdict) {
	c.packets.Add(1)
	c.bytes.Add(int64(size))
	switch v.fate {
	case lostRandom:
		c.lost.Add(1)
	case lostBurst:
		c.burstLost.Add(1)
	case droppedQueue:
		c.queueDropped.Add(1)
	}
	if v.reordered {
		c.reordered.Add(1)
	}
	c.retransmits.Add(int64(v.retransmits))
}

// link is what both relays share: the two directions, the blackout
// schedule and the manual switch. Its exported methods are the relays'.
type link struct {
	start    time.Time
	profile  Profile
	up, down *shaper
	upC      counters
	downC    counters
	rebinds  atomic.Int64

	mu       sync.Mutex    // guards cut, restored
	cut      bool          // BlackOut called, Restore not yet
	restored chan struct{} // closed by Restore
}

func newLink(cfg Config) *link {
	p := cfg.Profile
	return &link{
		start: time.Now(), profile: p,
		up:   newShaper(p.Up, p.SmoothedRTT(), cfg.Seed, 1),
		down: newShaper(p.Down, p.SmoothedRTT(), cfg.Seed, 2),
	}
}

// BlackOut cuts the link in both directions until Restore, on top of the
// profile's schedule: datagrams are dropped, TCP bytes wait.
func (l *link) BlackOut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cut {
		l.cut, l.restored = true, make(chan struct{})
	}
}

// Restore ends a BlackOut (the schedule's blackouts still apply).
func (l *link) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		l.cut = false
		close(l.restored)
	}
}

// Stats is what each direction did so far.
func (l *link) Stats() LinkStats {
	return LinkStats{Up: l.upC.snapshot(), Down: l.downC.snapshot(), PathChanges: l.rebinds.Load()}
}

// Profile is the link the relay emulates.
func (l *link) Profile() Profile { return l.profile }

// isCut reports whether the link is cut at t. until is when a scheduled
// blackout ends; wake is closed by Restore when the cut is manual (then
// until is zero).
func (l *link) isCut(t time.Time) (cut bool, until time.Time, wake <-chan struct{}) {
	l.mu.Lock()
	if l.cut {
		defer l.mu.Unlock()
		return true, time.Time{}, l.restored
	}
	l.mu.Unlock()
	return l.scheduled(t)
}

func (l *link) scheduled(t time.Time) (bool, time.Time, <-chan struct{}) {
	off, base := t.Sub(l.start), l.start
	if off < 0 {
		return false, time.Time{}, nil
	}
	if every := l.profile.BlackoutEvery; every > 0 {
		n := off / every
		off, base = off-n*every, base.Add(n*every)
	}
	for _, b := range l.profile.Blackouts {
		if off >= b.At && off < b.At+b.For {
			return true, base.Add(b.At + b.For), nil
		}
	}
	return false, time.Time{}, nil
}

// Blackouts reports the scheduled blackouts that overlap [from, to], as
// wall-clock intervals, so a measurement can tell the stalls the profile
// imposed from those the transport caused. Manual BlackOut calls are not
// included: the caller made them.
func (l *link) Blackouts(from, to time.Time) [][2]time.Time {
	var out [][2]time.Time
	if len(l.profile.Blackouts) == 0 || to.Before(from) {
		return nil
	}
	first, last := int64(0), int64(0)
	if every := l.profile.BlackoutEvery; every > 0 {
		first = max(int64(from.Sub(l.start)/every)-1, 0)
		last = max(int64(to.Sub(l.start)/every), 0)
	}
	for k := first; k <= last; k++ {
		base := l.start.Add(time.Duration(k) * l.profile.BlackoutEvery)
		for _, b := range l.profile.Blackouts {
			s, e := base.Add(b.At), base.Add(b.At+b.For)
			if s.Before(to) && e.After(from) {
				out = append(out, [2]time.Time{s, e})
			}
		}
	}
	return out
}

// waitUp blocks until the link is up at the wall clock, or done closes. It
// reports whether it had to wait, and false for ok when done closed first.
func (l *link) waitUp(done <-chan struct{}) (waited, ok bool) {
	for {
		cut, until, wake := l.isCut(time.Now())
		if !cut {
			return waited, true
		}
		waited = true
		if wake != nil {
			select {
			case <-done:
				return waited, false
			case <-wake:
			}
		} else if !sleepUntil(until, done) {
			return waited, false
		}
	}
}

// shutdown is both relays' Close: the first call, under mu, marks the relay
// closed, closes done and calls release (which closes the sockets mu
// guards), then waits for wg; later calls return nil.
func shutdown(mu *sync.Mutex, closed *bool, done chan struct{}, wg *sync.WaitGroup, release func() error) error {
	mu.Lock()
	if *closed {
		mu.Unlock()
		return nil
	}
	*closed = true
	close(done)
	err := release()
	mu.Unlock()
	wg.Wait()
	return err
}

// sleepUntil waits for the wall clock to reach t, or done to close.
func sleepUntil(t time.Time, done <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return false
	case <-timer.C:
		return true
	}
}
