package linkemu

import (
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The shaper runs on a virtual clock here: every assertion is about counts
// and order, or about times the shaper computed, never about how fast this
// machine is.

var t0 = time.Unix(1_000_000, 0)

// binomialBound is 5 standard deviations of a binomial count.
func binomialBound(n int, p float64) float64 { return 5 * math.Sqrt(float64(n)*p*(1-p)) }

func TestShaperDelayAndJitterKeepOrder(t *testing.T) {
	d := Direction{Delay: 60 * time.Millisecond, Jitter: 20 * time.Millisecond}
	s := newShaper(d, 0, 1, 1)
	var last time.Time
	spread := map[bool]int{}
	for i := range 2000 {
		// Spaced wider than the jitter: packets closer together bunch up
		// behind the slowest, as on any FIFO link.
		now := t0.Add(time.Duration(i) * 25 * time.Millisecond)
		v := s.packet(now, 100)
		if v.fate != delivered {
			t.Fatalf("packet %d: fate %d with no loss configured", i, v.fate)
		}
		if v.at.Before(last) {
			t.Fatalf("packet %d overtook the one before it (%v < %v)", i, v.at, last)
		}
		lat := v.at.Sub(now)
		if lat < d.Delay || lat >= d.Delay+d.Jitter {
			t.Fatalf("packet %d: one-way %v outside [%v, %v]", i, lat, d.Delay, d.Delay+d.Jitter)
		}
		spread[lat > d.Delay+d.Jitter/2]++
		last = v.at
	}
	if spread[true] < 500 || spread[false] < 500 {
		t.Errorf("jitter does not spread delays over its range: %v", spread)
	}
}

func TestShaperRandomLoss(t *testing.T) {
	const n, p = 20000, 0.03
	s := newShaper(Direction{Loss: p}, 0, 7, 1)
	lost := 0
	for i := range n {
		if s.packet(t0.Add(time.Duration(i)*time.Millisecond), 100).fate == lostRandom {
			lost++
		}
	}
	if want := n * p; math.Abs(float64(lost)-want) > binomialBound(n, p) {
		t.Errorf("lost %d of %d, want %.0f ± %.0f", lost, n, want, binomialBound(n, p))
	}
}

// runs returns the mean length of runs of consecutive losses.
func meanRun(lost []bool) float64 {
	runs, inRun, total := 0, false, 0
	for _, l := range lost {
		if l {
			total++
			if !inRun {
				runs++
			}
		}
		inRun = l
	}
	if runs == 0 {
		return 0
	}
	return float64(total) / float64(runs)
}

func TestShaperGilbertElliottIsBursty(t *testing.T) {
	const n = 50000
	ge := GilbertElliott{P: 0.01, R: 0.19, LossBad: 0.6}
	bursty := newShaper(Direction{Burst: ge}, 0, 3, 1)
	random := newShaper(Direction{Loss: ge.MeanLoss()}, 0, 3, 1)
	var lb, lr []bool
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		lb = append(lb, bursty.packet(now, 100).fate == lostBurst)
		lr = append(lr, random.packet(now, 100).fate == lostRandom)
	}
	count := func(l []bool) (c int) {
		for _, x := range l {
			if x {
				c++
			}
		}
		return c
	}
	// Bursts make the count vary more than a binomial's; 3× its bound is
	// still far from an off-by-a-factor model.
	if got, want := float64(count(lb)), n*ge.MeanLoss(); math.Abs(got-want) > 3*binomialBound(n, ge.MeanLoss()) {
		t.Errorf("Gilbert–Elliott lost %v of %d, want about %.0f (MeanLoss %.4f)", got, n, want, ge.MeanLoss())
	}
	// In the bad state a loss follows a loss with probability ≈ 0.6·0.81;
	// with independent loss, with ≈ 3%: runs are clearly longer.
	if b, r := meanRun(lb), meanRun(lr); b < 1.5*r {
		t.Errorf("mean loss run %.2f (bursty) vs %.2f (random): no bursts", b, r)
	}
}

func TestShaperReorders(t *testing.T) {
	d := Direction{Delay: 10 * time.Millisecond, Reorder: 0.1, ReorderBy: 5 * time.Millisecond}
	s := newShaper(d, 0, 5, 1)
	const n = 5000
	var ats []time.Time
	held := 0
	for i := range n {
		v := s.packet(t0.Add(time.Duration(i)*time.Millisecond), 100)
		if v.reordered {
			held++
		}
		ats = append(ats, v.at)
	}
	if math.Abs(float64(held)-n*0.1) > binomialBound(n, 0.1) {
		t.Errorf("held back %d of %d, want about %d", held, n, n/10)
	}
	overtaken := 0
	for i := 0; i+1 < n; i++ {
		if ats[i+1].Before(ats[i]) {
			overtaken++
		}
	}
	// Packets 1 ms apart, held 5 ms: the next one always overtakes a
	// held packet unless it is held too.
	if overtaken < held*8/10 || overtaken > held {
		t.Errorf("%d packets overtaken for %d held back", overtaken, held)
	}
}

func TestShaperRateAndTailDrop(t *testing.T) {
	// 8 Mb/s: a 1000-byte packet takes 1 ms; the queue holds 10 of them.
	s := newShaper(Direction{Rate: 8_000_000, Queue: 10_000}, 0, 1, 1)
	var accepted []time.Time
	dropped := 0
	for range 100 { // a burst, all at the same instant
		v := s.packet(t0, 1000)
		switch v.fate {
		case delivered:
			accepted = append(accepted, v.at)
		case droppedQueue:
			dropped++
		default:
			t.Fatalf("fate %d", v.fate)
		}
	}
	if len(accepted) != 10 || dropped != 90 {
		t.Fatalf("accepted %d, dropped %d; want 10 and 90", len(accepted), dropped)
	}
	for i, at := range accepted {
		if want := t0.Add(time.Duration(i+1) * time.Millisecond); !at.Equal(want) {
			t.Errorf("packet %d leaves at +%v, want +%v", i, at.Sub(t0), want.Sub(t0))
		}
	}
	// 5 ms later half the queue has drained: 5 more fit, not 6.
	n := 0
	for range 10 {
		if s.packet(t0.Add(5*time.Millisecond), 1000).fate == delivered {
			n++
		}
	}
	if n != 5 {
		t.Errorf("after 5 ms, %d packets fit; want 5", n)
	}
}

func TestShaperStreamRepairsLossAndBackPressures(t *testing.T) {
	rtt := 100 * time.Millisecond
	for _, busy := range []bool{false, true} {
		s := newShaper(Direction{Delay: 50 * time.Millisecond, Loss: 0.2}, rtt, 9, 1)
		first := 2*rtt + minRTO // a lone segment waits for the tail-loss probe
		if busy {
			first = rtt + rtt/4 // RACK, from the ACKs of the segments after it
		}
		repaired, n := 0, 2000
		for i := range n {
			now := t0.Add(time.Duration(i) * time.Second) // far apart: no queue
			v, wait := s.stream(now, mss, busy)
			if wait != 0 || v.fate != delivered {
				t.Fatalf("segment %d: fate %d wait %v; a stream never drops", i, v.fate, wait)
			}
			var repair time.Duration
			for k := range v.retransmits {
				if k == 0 {
					repair += first
				} else {
					repair += 2 * rtt << (k - 1) // the timer, doubling
				}
			}
			if got := v.at.Sub(now); got != 50*time.Millisecond+repair {
				t.Fatalf("busy %v: segment %d with %d repairs took %v, want %v", busy, i, v.retransmits, got, 50*time.Millisecond+repair)
			}
			if v.retransmits > 0 {
				repaired++
			}
		}
		if math.Abs(float64(repaired)-float64(n)*0.2) > binomialBound(n, 0.2) {
			t.Errorf("%d of %d segments repaired, want about %d", repaired, n, n/5)
		}
	}

	q := newShaper(Direction{Rate: 8_000_000, Queue: 3 * mss}, rtt, 9, 1)
	for i := range 3 {
		if _, wait := q.stream(t0, mss, true); wait != 0 {
			t.Fatalf("segment %d waited with room in the queue", i)
		}
	}
	if _, wait := q.stream(t0, mss, true); wait <= 0 {
		t.Fatal("a full queue did not push back")
	}
	// Once one segment's worth has left, the next fits.
	if _, wait := q.stream(t0.Add(q.serialize(mss)), mss, true); wait != 0 {
		t.Fatalf("still waiting %v after a segment left", wait)
	}
}

func TestShaperStreamResetsAfterRetries(t *testing.T) {
	s := newShaper(Direction{Loss: 1}, 10*time.Millisecond, 1, 1)
	if v, _ := s.stream(t0, 100, false); v.fate != resetStream || v.retransmits != maxRetransmits {
		t.Errorf("fate %d after %d retransmits; want a reset after %d", v.fate, v.retransmits, maxRetransmits)
	}
}

func TestShaperDeterministicBySeed(t *testing.T) {
	p, _ := Lookup("lte-poor")
	fates := func(seed uint64) []verdict {
		s := newShaper(p.Up, p.RTT(), seed, 1)
		var vs []verdict
		for i := range 3000 {
			vs = append(vs, s.packet(t0.Add(time.Duration(i)*10*time.Millisecond), 200))
		}
		return vs
	}
	a, b, c := fates(42), fates(42), fates(43)
	same := func(x, y []verdict) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("the same seed gave different fates")
	}
	if same(a, c) {
		t.Error("another seed gave the same fates")
	}
}

func TestBlackoutSchedule(t *testing.T) {
	l := newLink(Config{Profile: Profile{
		Blackouts: []Blackout{{At: 10 * time.Second, For: 5 * time.Second}}, BlackoutEvery: 60 * time.Second,
	}})
	for _, tc := range []struct {
		off   time.Duration
		cut   bool
		until time.Duration
	}{
		{0, false, 0}, {9 * time.Second, false, 0}, {10 * time.Second, true, 15 * time.Second},
		{14 * time.Second, true, 15 * time.Second}, {15 * time.Second, false, 0},
		{71 * time.Second, true, 75 * time.Second}, {76 * time.Second, false, 0},
	} {
		cut, until, wake := l.isCut(l.start.Add(tc.off))
		if cut != tc.cut || wake != nil || (cut && !until.Equal(l.start.Add(tc.until))) {
			t.Errorf("+%v: cut %v until +%v; want %v until +%v", tc.off, cut, until.Sub(l.start), tc.cut, tc.until)
		}
	}
	l.BlackOut()
	if cut, _, wake := l.isCut(l.start); !cut || wake == nil {
		t.Fatal("BlackOut did not cut the link")
	}
	_, _, wake := l.isCut(l.start)
	l.Restore()
	<-wake // Restore wakes those waiting for the link
	if cut, _, _ := l.isCut(l.start); cut {
		t.Error("Restore did not bring the link back")
	}
}

func TestBlackoutsBetween(t *testing.T) {
	l := newLink(Config{Profile: Profile{
		Blackouts: []Blackout{{At: 10 * time.Second, For: 5 * time.Second}}, BlackoutEvery: 60 * time.Second,
	}})
	at := func(d time.Duration) time.Time { return l.start.Add(d) }
	for _, tc := range []struct {
		from, to time.Duration
		n        int
	}{
		{0, 9 * time.Second, 0}, {0, 11 * time.Second, 1}, {14 * time.Second, 20 * time.Second, 1},
		{15 * time.Second, 69 * time.Second, 0}, {12 * time.Second, 72 * time.Second, 2}, {130 * time.Second, 131 * time.Second, 1},
	} {
		if got := l.Blackouts(at(tc.from), at(tc.to)); len(got) != tc.n {
			t.Errorf("[+%v, +%v]: %d blackouts %v, want %d", tc.from, tc.to, len(got), got, tc.n)
		}
	}
}

func TestFlowBusy(t *testing.T) {
	var f flow
	rtt := 100 * time.Millisecond
	for i, tc := range []struct {
		at   time.Duration
		busy bool
	}{{0, false}, {50 * time.Millisecond, true}, {120 * time.Millisecond, true}, {400 * time.Millisecond, false}} {
		if got := f.busy(t0.Add(tc.at), rtt); got != tc.busy {
			t.Errorf("send %d at +%v: busy %v, want %v", i, tc.at, got, tc.busy)
		}
	}
}
