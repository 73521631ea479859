package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
)

// TestOutageFallsBackAndTripsTheBreaker: a worker that refuses requests
// (an outage) sends them through the coordinator's fallback to the
// conservative pool while the tenant's two fallbacks per ten minutes
// last; the rest fail, the breaker counts them and opens, and FIFO places
// until it closes. After the outage its probe sees it healthy again.
// Every request still ends exactly once.
func TestOutageFallsBackAndTripsTheBreaker(t *testing.T) {
	pools, cycle, err := ParseCluster("2xh100:decode,1xh100:conservative")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := LookupModel("llama3.1-8b")
	var reqs []Request
	for i := range 400 {
		reqs = append(reqs, Request{At: time.Duration(i) * 100 * time.Millisecond, Input: 300, Output: 20, Tenant: fmt.Sprint("t", i%4)})
	}
	paths := map[place.Path]int{}
	// A 5 s probe: requests keep going to the refusing worker until one
	// sees it down.
	cfg := Config{Pools: pools, CycleRoles: cycle, Model: m, Scheduler: sched.NameRoundRobin, ProbeInterval: 5 * time.Second,
		Breaker: admit.BreakerConfig{Window: 5 * time.Second, MinRequests: 20, OpenFor: 10 * time.Second},
		Outages: []Outage{{Worker: "h100-0", From: 10100 * time.Millisecond, To: 20 * time.Second}},
		Placed:  func(p Placement) { paths[p.Decision.Path]++ }}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(res, 1, 2*time.Second, 100*time.Millisecond, nil)
	t.Logf("fallbacks %d, failed %d, breaker trips %d, paths %v", s.Fallbacks, s.Failed, s.BreakerTrips, paths)
	if s.Fallbacks != 8 { // 4 tenants × 2
		t.Errorf("%d fallbacks, want each tenant's 2", s.Fallbacks)
	}
	if s.Failed == 0 || s.BreakerTrips == 0 || paths[place.PathBreaker] == 0 {
		t.Errorf("failed %d, breaker trips %d, FIFO placements %d: want the failures to open the breaker", s.Failed, s.BreakerTrips, paths[place.PathBreaker])
	}
	if paths[place.PathFallback] != s.Fallbacks || paths[place.PathPolicy] == 0 {
		t.Errorf("paths %v", paths)
	}
	late := 0
	for i, o := range res.Outcomes {
		if o.Finished != 1 {
			t.Fatalf("request %d finished %d times", i, o.Finished)
		}
		if o.Fallback && (o.Worker != 2 || o.Status != StatusOK) {
			t.Errorf("request %d fell back to worker %d (%v), want the conservative one", i, o.Worker, o.Status)
		}
		if o.Status == StatusFailed && (o.Arrival < 10*time.Second || o.Arrival >= 15*time.Second) {
			t.Errorf("request %d failed, arriving at %v, outside the outage before a probe saw it", i, o.Arrival)
		}
		if o.Arrival >= 30*time.Second && o.Worker == 0 {
			late++
		}
	}
	if late == 0 {
		t.Error("the worker took nothing after its outage")
	}
}

// TestOutageLosesOrReplacesRunningRequests: a worker's failure takes what
// its engine runs with it, as the coordinator sees a worker's stream end
// in a 503: a request that has streamed tokens is lost there and then
// (the tokens it had, no more), one that has not runs once more where the
// Placer's Fallback says; nothing runs on the worker until the outage
// ends, and then it starts with an empty cache.
func TestOutageLosesOrReplacesRunningRequests(t *testing.T) {
	pools, cycle, err := ParseCluster("2xh100")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := LookupModel("llama3.1-8b")
	var reqs []Request
	for i := range 200 {
		// One tenant each: every request has its fallbacks left. The shared
		// prefix is in the cache before the failure and must be computed
		// again after it.
		reqs = append(reqs, Request{At: time.Duration(i) * 50 * time.Millisecond, Input: 2000, Output: 300, Tenant: fmt.Sprint("t", i), PrefixID: 1, PrefixLen: 1024})
	}
	const from, to = 5170 * time.Millisecond, 7 * time.Second // between two probes, while request 103 prefills there
	var placed []Placement
	cfg := Config{Pools: pools, CycleRoles: cycle, Model: m, Scheduler: sched.NameRoundRobin,
		Outages: []Outage{{Worker: "h100-0", From: from, To: to}}, Placed: func(p Placement) { placed = append(placed, p) }}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(res, 1, 2*time.Second, 100*time.Millisecond, nil)
	t.Logf("lost %d, fallbacks %d, failed %d, completed %d", s.Lost, s.Fallbacks, s.Failed, s.Completed)
	if s.Lost == 0 || s.Fallbacks == 0 || s.Lost+s.Completed+s.Refused+s.TooLong != len(reqs) {
		t.Fatalf("lost %d, fallbacks %d, completed %d, refused %d of %d", s.Lost, s.Fallbacks, s.Completed, s.Refused, len(reqs))
	}
	fallbackAt := map[int]bool{}
	for _, p := range placed {
		if p.Failed >= 0 {
			if p.Failed != 0 || p.Decision.Path != place.PathFallback {
				t.Errorf("request %d: fallback from worker %d by %v", p.Request, p.Failed, p.Decision.Path)
			}
			fallbackAt[p.Request] = true
		}
	}
	var after []Outcome // worker 0's requests after the outage, in arrival order
	for i, o := range res.Outcomes {
		first := o.Arrival + o.TTFT
		switch {
		case o.Finished != 1:
			t.Fatalf("request %d finished %d times", i, o.Finished)
		case o.Status == StatusLost:
			if o.Worker != 0 || o.Done != from || o.Output < 1 || o.Output >= 300 || first >= from {
				t.Errorf("lost request %d: worker %d, done %v, %d tokens, first at %v", i, o.Worker, o.Done, o.Output, first)
			}
		case o.Fallback:
			if !fallbackAt[i] || o.Worker != 1 || o.Status != StatusOK || o.Output != 300 {
				t.Errorf("request %d fell back to worker %d (%v, %d tokens)", i, o.Worker, o.Status, o.Output)
			}
		case o.Status == StatusOK && o.Worker == 0:
			if o.Done > from && first < to {
				t.Errorf("request %d ran on the failed worker through its outage: first token %v, done %v", i, first, o.Done)
			}
			if o.Arrival >= to {
				after = append(after, o)
			}
		}
	}
	// The restarted server's cache is empty: its first request computes the
	// shared prefix, the next find it.
	if len(after) < 2 || after[0].Cached != 0 || after[1].Cached < 1024 {
		t.Fatalf("worker 0 after the outage: %d requests, the first two with %v cached tokens", len(after), func() []int {
			var c []int
			for _, o := range after[:min(2, len(after))] {
				c = append(c, o.Cached)
			}
			return c
		}())
	}
}
