package sim

import (
	"testing"
	"time"
)

// TestOrderPassesLongPrefill: first come, first served puts a short
// prompt that arrives during a long first-turn prefill behind all of it;
// the cache-aware order runs it in the next step, and the long prefill is
// later by about that short prompt's share of one step.
func TestOrderPassesLongPrefill(t *testing.T) {
	run := func(ordered bool) (short, long time.Duration) {
		d := mustDeployment(t, "h100", "llama3.1-8b", 1)
		var now time.Duration
		e := NewEngine(d)
		if ordered {
			e.EnableOrder(20000, func() time.Duration { return now }, false)
		}
		l, s := seqOf(1, 60000), seqOf(2, 500)
		first := drive(t, e, &now, []timedSeq{{0, l}, {time.Millisecond, s}})
		return first[s], first[l]
	}
	fs, fl := run(false)
	os, ol := run(true)
	if fs < fl || os >= ol || os > fs/4 {
		t.Fatalf("short first token at %v (long %v) first come first served, %v (long %v) ordered", fs, fl, os, ol)
	}
	if ol > fl+fl/20 {
		t.Fatalf("the long prefill took %v ordered, %v first come first served", ol, fl)
	}
}

// TestOrderAges: a long prompt under a stream of short ones that would
// take every step's budget is passed only by prompts queued within its
// uncached length / rate after it: every later one starts after it.
func TestOrderAges(t *testing.T) {
	d := mustDeployment(t, "h100", "llama3.1-8b", 1)
	var now time.Duration
	e := NewEngine(d)
	e.EnableOrder(20000, func() time.Duration { return now }, false)
	long := seqOf(1, 40000)
	adds := []timedSeq{{0, long}}
	for i := range 120 { // 8,000 uncached tokens every 100 ms: more than the engine prefills
		adds = append(adds, timedSeq{time.Duration(i+1) * 100 * time.Millisecond, seqOf(10+i, 8000)})
	}
	first := drive(t, e, &now, adds)
	passed := 0
	for _, a := range adds[1:] {
		switch {
		case a.s.key > long.key && first[a.s] < first[long]:
			t.Fatalf("a prompt queued at %v (key %v) started at %v, before the long one (key %v) at %v", a.at, a.s.key, first[a.s], long.key, first[long])
		case first[a.s] < first[long]:
			passed++
		}
	}
	if passed == 0 || first[long] > 12*time.Second {
		t.Fatalf("long prompt's first token at %v, %d short ones passed it", first[long], passed)
	}
}
