package linkemu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Direction is what one direction of a link does to the traffic crossing it.
// The zero value passes everything at once.
type Direction struct {
	// Delay is the one-way propagation delay every packet takes.
	Delay time.Duration
	// Jitter adds a uniform random [0, Jitter) to each packet's delay.
	// Packets keep their order (a later packet never overtakes an earlier
	// one because of jitter; packets closer together than the jitter bunch
	// up behind the slowest, as on a FIFO link); Reorder is what reorders.
	Jitter time.Duration
	// Loss is the probability that a packet is lost, independently of the
	// others.
	Loss float64
	// Burst is bursty loss on top of Loss (zero: none).
	Burst GilbertElliott
	// Reorder is the probability that a packet is held back by ReorderBy
	// beyond its delay, so the packets after it overtake it.
	Reorder   float64
	ReorderBy time.Duration
	// Rate is the bottleneck in bits per second (0: unlimited). Packets are
	// serialised at this rate in arrival order.
	Rate int64
	// Queue is how many bytes may wait for the bottleneck (0 with a Rate:
	// DefaultQueue). The UDP relay drops a packet that does not fit (tail
	// drop); the TCP relay stops reading from the sender until it fits.
	Queue int
}

// GilbertElliott is the two-state bursty loss model (Gilbert 1960, Elliott
// 1963), as netem's "gemodel p r 1-h 1-k": before each packet the link moves
// from the good to the bad state with probability P and back with R, and a
// packet is lost with LossGood in the good state and LossBad in the bad one.
// The long-run share of packets lost is (R·LossGood + P·LossBad)/(P+R) and a
// bad spell lasts 1/R packets on average.
type GilbertElliott struct {
	P, R              float64
	LossGood, LossBad float64
}

// On reports whether the model can lose anything.
func (g GilbertElliott) On() bool { return g.P > 0 && (g.LossBad > 0 || g.LossGood > 0) }

// MeanLoss is the long-run share of packets the model loses.
func (g GilbertElliott) MeanLoss() float64 {
	if !g.On() {
		return 0
	}
	if g.R == 0 {
		return g.LossBad // once bad, bad for ever
	}
	return (g.R*g.LossGood + g.P*g.LossBad) / (g.P + g.R)
}

// Blackout cuts the link in both directions for For, starting At after the
// relay starts (and again every Profile.BlackoutEvery when that is set).
type Blackout struct {
	At, For time.Duration
}

// Profile is a named link: one Direction each way, blackouts on a schedule
// and path changes (NAT rebinding) at chosen moments.
type Profile struct {
	Name string
	// Up is client → target (the device's uplink), Down target → client.
	Up, Down Direction
	// Blackouts, relative to the relay's start; with BlackoutEvery > 0 the
	// list repeats with that period (every entry must end within it).
	Blackouts     []Blackout
	BlackoutEvery time.Duration
	// PathChanges are the moments, relative to the relay's start, at which
	// the UDP relay moves every client onto a new source port towards the
	// target (the target sees a new client address). The TCP relay ignores
	// them: a TCP connection cannot survive a new address.
	PathChanges []time.Duration
}

// DefaultQueue is the bottleneck queue when a Direction sets Rate but not
// Queue: 64 KiB, about a quarter of a second at 2 Mb/s.
const DefaultQueue = 64 << 10

// maxRate keeps the shaper's arithmetic (bytes × 8 × 1e9 / rate, time ×
// rate) within int64: 1 Tb/s.
const maxRate = 1e12

// RTT is the round-trip propagation delay, without jitter or queueing.
func (p Profile) RTT() time.Duration { return p.Up.Delay + p.Down.Delay }

// SmoothedRTT is the round trip a sender's estimate settles at on an idle
// link: RTT plus the mean jitter each way. The TCP relay times its modelled
// repairs with it, as Linux times them with its smoothed RTT.
func (p Profile) SmoothedRTT() time.Duration { return p.RTT() + (p.Up.Jitter+p.Down.Jitter)/2 }

// Profiles are the named links, in the order the docs list them. Where each
// number comes from is in docs/transport.md ("Link emulator").
func Profiles() []Profile {
	lteGood := Direction{Delay: 35 * time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.002}
	good := Profile{Name: "lte-good", Up: lteGood, Down: lteGood}
	good.Up.Rate, good.Up.Queue = 6_000_000, 6_000_000/8/5 // 200 ms of queue
	good.Down.Rate, good.Down.Queue = 13_000_000, 13_000_000/8/5

	poorDir := Direction{
		Delay: 60 * time.Millisecond, Jitter: 20 * time.Millisecond, Loss: 0.02,
		// 5% of packets in the bad state, spells of ~5 packets losing 1 in 5:
		// 1% on top of the 2% random, 3% in all.
		Burst:   GilbertElliott{P: 0.01, R: 0.19, LossBad: 0.2},
		Reorder: 0.005, ReorderBy: 30 * time.Millisecond,
		Rate: 2_000_000, Queue: 2_000_000 / 8 / 5,
	}
	poor := Profile{Name: "lte-poor", Up: poorDir, Down: poorDir}

	tunnel := good
	tunnel.Name = "tunnel"
	tunnel.Blackouts = []Blackout{{At: 10 * time.Second, For: 8 * time.Second}}
	tunnel.BlackoutEvery = 45 * time.Second
	return []Profile{{Name: "loopback"}, good, poor, tunnel}
}

// ProfileNames lists the named profiles.
func ProfileNames() []string {
	var names []string
	for _, p := range Profiles() {
		names = append(names, p.Name)
	}
	return names
}

// Lookup returns the named profile.
func Lookup(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// Validate names the first field out of range.
func (p Profile) Validate() error {
	for _, d := range []struct {
		name string
		d    Direction
	}{{"Up", p.Up}, {"Down", p.Down}} {
		if err := d.d.validate(); err != nil {
			return fmt.Errorf("linkemu: profile %q: %s: %w", p.Name, d.name, err)
		}
	}
	if p.BlackoutEvery < 0 {
		return fmt.Errorf("linkemu: profile %q: BlackoutEvery %v is negative", p.Name, p.BlackoutEvery)
	}
	for i, b := range p.Blackouts {
		if b.At < 0 || b.For <= 0 {
			return fmt.Errorf("linkemu: profile %q: Blackouts[%d] %v for %v: want At ≥ 0 and For > 0", p.Name, i, b.At, b.For)
		}
		if p.BlackoutEvery > 0 && b.At+b.For > p.BlackoutEvery {
			return fmt.Errorf("linkemu: profile %q: Blackouts[%d] ends after BlackoutEvery %v", p.Name, i, p.BlackoutEvery)
		}
	}
	for i, at := range p.PathChanges {
		if at < 0 {
			return fmt.Errorf("linkemu: profile %q: PathChanges[%d] %v is negative", p.Name, i, at)
		}
	}
	return nil
}

func (d Direction) validate() error {
	prob := func(name string, v float64) error {
		if !(v >= 0 && v <= 1) { // also refuses NaN
			return fmt.Errorf("%s %v is not a probability", name, v)
		}
		return nil
	}
	if d.Delay < 0 || d.Jitter < 0 || d.ReorderBy < 0 {
		return errors.New("delay, jitter and reorder-by must not be negative")
	}
	if d.Rate < 0 || d.Rate > maxRate || d.Queue < 0 {
		return fmt.Errorf("rate %d or queue %d out of range (rate up to %d bit/s)", d.Rate, d.Queue, int64(maxRate))
	}
	return errors.Join(prob("Loss", d.Loss), prob("Reorder", d.Reorder), prob("Burst.P", d.Burst.P),
		prob("Burst.R", d.Burst.R), prob("Burst.LossGood", d.Burst.LossGood), prob("Burst.LossBad", d.Burst.LossBad))
}

// ParseProfile reads a profile name, optionally followed by overrides that
// apply to both directions:
//
//	lte-poor
//	lte-good,loss=5%,delay=80ms
//	loopback,delay=50ms,jitter=5ms,rate=1mbit,queue=32k,reorder=1%,reorder-by=20ms
//	lte-good,ge=1%/20%/50%,blackout=5s+10s,every=60s,rebind=3s
//
// Keys: delay (one-way), jitter, loss, ge (P/R/LossBad), reorder,
// reorder-by, rate (bit/s with k, m or g and an optional "bit"), queue
// (bytes with k or m), blackout (AT+FOR, repeatable), every, rebind
// (repeatable). Probabilities take "3%" or "0.03".
func ParseProfile(spec string) (Profile, error) {
	parts := strings.Split(spec, ",")
	p, ok := Lookup(strings.TrimSpace(parts[0]))
	if !ok {
		return Profile{}, fmt.Errorf("linkemu: unknown profile %q (want one of %s)", parts[0], strings.Join(ProfileNames(), ", "))
	}
	p.Blackouts = slices.Clone(p.Blackouts)
	custom := false
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Profile{}, fmt.Errorf("linkemu: %q is not key=value", kv)
		}
		if err := p.set(k, v, &custom); err != nil {
			return Profile{}, fmt.Errorf("linkemu: %s: %w", k, err)
		}
	}
	if custom {
		p.Name = spec
	}
	return p, p.Validate()
}

func (p *Profile) set(k, v string, custom *bool) error {
	both := func(f func(*Direction)) { f(&p.Up); f(&p.Down) }
	var err error
	switch k {
	case "delay", "jitter", "reorder-by", "every":
		var d time.Duration
		if d, err = time.ParseDuration(v); err != nil {
			return err
		}
		switch k {
		case "delay":
			both(func(x *Direction) { x.Delay = d })
		case "jitter":
			both(func(x *Direction) { x.Jitter = d })
		case "reorder-by":
			both(func(x *Direction) { x.ReorderBy = d })
		default:
			p.BlackoutEvery = d
		}
	case "loss", "reorder":
		var f float64
		if f, err = parseProb(v); err != nil {
			return err
		}
		if k == "loss" {
			both(func(x *Direction) { x.Loss = f })
		} else {
			both(func(x *Direction) { x.Reorder = f })
		}
	case "ge":
		fs := strings.Split(v, "/")
		if len(fs) != 3 {
			return fmt.Errorf("%q: want P/R/LossBad", v)
		}
		var g GilbertElliott
		for i, dst := range []*float64{&g.P, &g.R, &g.LossBad} {
			if *dst, err = parseProb(fs[i]); err != nil {
				return err
			}
		}
		both(func(x *Direction) { x.Burst = g })
	case "rate":
		var r int64
		if r, err = parseSize(strings.TrimSuffix(strings.ToLower(v), "bit"), 1000); err != nil {
			return err
		}
		both(func(x *Direction) { x.Rate = r })
	case "queue":
		var q int64
		if q, err = parseSize(strings.TrimSuffix(strings.ToLower(v), "b"), 1024); err != nil || q > math.MaxInt32 {
			return errors.Join(err, fmt.Errorf("%q: want bytes up to 2 GiB", v))
		}
		both(func(x *Direction) { x.Queue = int(q) })
	case "blackout":
		at, dur, ok := strings.Cut(v, "+")
		if !ok {
			return fmt.Errorf("%q: want AT+FOR", v)
		}
		var b Blackout
		if b.At, err = time.ParseDuration(at); err != nil {
			return err
		}
		if b.For, err = time.ParseDuration(dur); err != nil {
			return err
		}
		p.Blackouts = append(p.Blackouts, b)
	case "rebind":
		var d time.Duration
		if d, err = time.ParseDuration(v); err != nil {
			return err
		}
		p.PathChanges = append(p.PathChanges, d)
	default:
		return errors.New("unknown key")
	}
	*custom = true
	return nil
}

func parseProb(v string) (float64, error) {
	scale := 1.0
	if s, ok := strings.CutSuffix(v, "%"); ok {
		v, scale = s, 100
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, err
	}
	return f / scale, nil
}

// parseSize reads "2m", "500k", "1g" or a plain number, k = unit.
func parseSize(v string, unit int64) (int64, error) {
	mul := int64(1)
	switch {
	case strings.HasSuffix(v, "k"):
		mul, v = unit, v[:len(v)-1]
	case strings.HasSuffix(v, "m"):
		mul, v = unit*unit, v[:len(v)-1]
	case strings.HasSuffix(v, "g"):
		mul, v = unit*unit*unit, v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > math.MaxInt64/mul {
		return 0, fmt.Errorf("%d×%d out of range", n, mul)
	}
	return n * mul, nil
}
