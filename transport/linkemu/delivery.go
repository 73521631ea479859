package linkemu

import (
	"container/heap"
	"sync"
	"time"
)

// delivery runs functions at their times, in time order (then in the order
// they were pushed), on one goroutine: one per direction of a UDP relay, so
// that a packet held for reordering lets later ones pass.
type delivery struct {
	mu   sync.Mutex // guards q, seq
	q    pending
	seq  uint64
	kick chan struct{} // a new head: the loop re-arms its timer
	done <-chan struct{}
}

type pendingItem struct {
	at  time.Time
	seq uint64
	fn  func()
}

type pending []pendingItem

func (p pending) Len() int { return len(p) }
func (p pending) Less(i, j int) bool {
	if !p[i].at.Equal(p[j].at) {
		return p[i].at.Before(p[j].at)
	}
	return p[i].seq < p[j].seq
}
func (p pending) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p *pending) Push(x any)   { *p = append(*p, x.(pendingItem)) }
func (p *pending) Pop() any {
	old := *p
	it := old[len(old)-1]
	*p = old[:len(old)-1]
	return it
}

// startDelivery runs the loop on wg until done closes.
func startDelivery(done <-chan struct{}, wg *sync.WaitGroup) *delivery {
	d := &delivery{kick: make(chan struct{}, 1), done: done}
	wg.Go(d.loop)
	return d
}

func (d *delivery) push(at time.Time, fn func()) {
	d.mu.Lock()
	heap.Push(&d.q, pendingItem{at: at, seq: d.seq, fn: fn})
	d.seq++
	head := d.q[0].seq == d.seq-1
	d.mu.Unlock()
	if head {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

func (d *delivery) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		var due []func()
		now := time.Now()
		for len(d.q) > 0 && !d.q[0].at.After(now) {
			due = append(due, heap.Pop(&d.q).(pendingItem).fn)
		}
		wait := time.Hour
		if len(d.q) > 0 {
			wait = d.q[0].at.Sub(now)
		}
		d.mu.Unlock()
		for _, fn := range due {
			fn()
		}
		if len(due) > 0 {
			continue // the functions took time: look again before sleeping
		}
		timer.Reset(wait)
		select {
		case <-d.done:
			return
		case <-d.kick:
		case <-timer.C:
		}
	}
}
