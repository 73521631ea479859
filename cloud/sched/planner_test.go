package sched

import (
	"slices"
	"testing"
	"time"
)

// planned4 is three H100 prefillers and one H100 decoder.
func planned4() *Snapshot {
	s := &Snapshot{}
	for i := range 4 {
		r := RolePrefill
		if i == 3 {
			r = RoleDecode
		}
		s.Workers = append(s.Workers, Worker{Role: r, Healthy: true, Capacity: 256, Class: h100})
	}
	return s
}

// at runs one decision at t seconds on the injected clock (negative: no
// clock) with each prefiller holding pending prompt tokens, and returns
// the planner's prefill set after it.
func at(t *testing.T, p *Priced, s *Snapshot, sec float64, req *Request, pending int) []int {
	t.Helper()
	s.Now = time.Time{}
	if sec >= 0 {
		s.Now = time.Unix(1_000_000, 0).Add(time.Duration(sec * float64(time.Second)))
	}
	for i := range s.Workers {
		s.Workers[i].PendingPrefill = 0
		if slices.Contains(p.Prefillers(), i) {
			s.Workers[i].PendingPrefill = pending
		}
	}
	if _, err := p.Decide(req, s); err != nil {
		t.Fatal(err)
	}
	return p.Prefillers()
}

var shortReq = &Request{InputTokens: 20, PredictedOutput: 50}

// TestPlannerShrink: an idle prefill pool gives one prefiller back to
// decoding after ShrinkAfter, one at a time, never the last; without a
// clock it only grows.
func TestPlannerShrink(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	s := planned4()
	for range 100 {
		if got := at(t, p, s, -1, shortReq, 0); !slices.Equal(got, []int{0, 1, 2}) {
			t.Fatalf("no clock: prefillers %v", got)
		}
	}
	p, _ = NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	for sec := 0.0; sec < 10; sec += 0.5 {
		if got := at(t, p, s, sec, shortReq, 0); !slices.Equal(got, []int{0, 1, 2}) {
			t.Fatalf("t=%gs, idle for less than ShrinkAfter: prefillers %v", sec, got)
		}
	}
	if got := at(t, p, s, 10, shortReq, 0); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("t=10s: prefillers %v, want worker 0 given back", got)
	}
	// Worker 0 decodes now: a short prompt may colocate there.
	// Idle again from t=10.5s: the next shrink waits ShrinkAfter from there.
	for sec := 10.5; sec <= 20; sec += 0.5 {
		if got := at(t, p, s, sec, shortReq, 0); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("t=%gs, within ShrinkAfter of the last change: prefillers %v", sec, got)
		}
	}
	if got := at(t, p, s, 20.5, shortReq, 0); !slices.Equal(got, []int{2}) {
		t.Fatalf("t=20.5s: prefillers %v", got)
	}
	if got := at(t, p, s, 60, shortReq, 0); !slices.Equal(got, []int{2}) {
		t.Fatalf("t=60s: the last prefiller left: %v", got)
	}
}

// TestPlannerNoFlap: a load that swings between idle and busy (below the
// grow threshold, above the shrink one) every few seconds changes nothing;
// after a grow the pool does not shrink until it has been idle for
// ShrinkAfter since.
func TestPlannerNoFlap(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true, MinDecodeShare: 0.25})
	s := planned4()
	s.Workers[2].Role = RoleDecode
	// 0.3 s of prefill for each of the two H100 prefillers: over the
	// shrink level (0.1 × 2 s on the one that would stay), under the grow
	// level (1 s on one).
	mid := int(0.3 * h100.PrefillTokensPerSec)
	for sec := 0.0; sec < 120; sec += 0.25 {
		pending := 0
		if int(sec/3)%2 == 1 {
			pending = mid
		}
		if got := at(t, p, s, sec, shortReq, pending); !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("t=%gs: prefillers %v under a swinging load", sec, got)
		}
	}
	// A breach grows the pool at once, into a decoder.
	long := &Request{InputTokens: 8000, PredictedOutput: 50}
	if got := at(t, p, s, 120, long, 60000); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("breach: prefillers %v", got)
	}
	for sec := 120.5; sec < 130; sec += 0.5 {
		if got := at(t, p, s, sec, shortReq, 0); len(got) != 3 {
			t.Fatalf("t=%gs, idle but within ShrinkAfter of the grow: prefillers %v", sec, got)
		}
	}
	if got := at(t, p, s, 130.5, shortReq, 0); len(got) != 2 {
		t.Fatalf("t=130.5s: prefillers %v, want one given back", got)
	}
	if _, err := NewPriced("x", PricedConfig{ShrinkBelow: 0.6}); err == nil {
		t.Fatal("ShrinkBelow over TTFTHeadroom accepted")
	}
}
