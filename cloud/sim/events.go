package sim

import (
	"time"

	"github.com/phaseless/phaseless/cloud/batch"
)

// event is something that happens at a virtual instant; seq breaks ties in
// the order events were scheduled, which keeps runs deterministic.
type event struct {
	at        time.Duration
	seq       uint64
	fn        func()
	cancelled bool
}

// eventQueue is a binary min-heap of events by (at, seq).
type eventQueue struct {
	h   []*event
	seq uint64
	n   uint64 // events run
}

func (q *eventQueue) less(i, j int) bool {
	a, b := q.h[i], q.h[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (q *eventQueue) push(at time.Duration, fn func()) *event {
	q.seq++
	e := &event{at: at, seq: q.seq, fn: fn}
	q.h = append(q.h, e)
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
	return e
}

func (q *eventQueue) pop() *event {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h[last] = nil
	q.h = q.h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q.h) && q.less(l, m) {
			m = l
		}
		if r < len(q.h) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}

// clock is the virtual clock handed to the live components (admission's
// and the batcher's Now and AfterFunc).
type clock struct {
	q     *eventQueue
	now   time.Duration
	epoch time.Time
}

// epoch is the virtual clock's zero: fixed, so runs repeat exactly.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) Now() time.Time { return c.epoch.Add(c.now) }

// AfterFunc schedules f in virtual time.
func (c *clock) AfterFunc(d time.Duration, f func()) batch.Timer {
	t := &vtimer{c: c, f: f}
	t.Reset(d)
	return t
}

// vtimer is a batch.Timer on the virtual clock.
type vtimer struct {
	c  *clock
	f  func()
	ev *event
}

func (t *vtimer) Stop() bool {
	active := t.ev != nil && !t.ev.cancelled
	if t.ev != nil {
		t.ev.cancelled = true
		t.ev = nil
	}
	return active
}

func (t *vtimer) Reset(d time.Duration) bool {
	active := t.Stop()
	var ev *event
	ev = t.c.q.push(t.c.now+max(d, 0), func() {
		if t.ev == ev {
			t.ev = nil
		}
		t.f()
	})
	t.ev = ev
	return active
}
