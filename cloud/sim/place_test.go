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
