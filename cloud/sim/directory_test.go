package sim

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestPinDirectory: the simulated coordinator keeps the replicas'
// pinned-prefix directory as the live one does (cloud/affinity, through
// Locate and PinnedBlock): a request that pinned its prompt records it
// under its worker, and the next request that shares the prefix is placed
// with the directory's answer (place.Request.Pinned). An outage empties
// the worker's cache but not the directory, so, as live, the Placer is
// still told that worker holds the prefix until the pin's lifetime ends.
func TestPinDirectory(t *testing.T) {
	pools, cycle, err := ParseCluster("2xh100")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := LookupModel("llama3.1-8b")
	var reqs []Request
	for i := range 40 {
		reqs = append(reqs, Request{At: time.Duration(i) * 500 * time.Millisecond, Input: 1500, Output: 8, Tenant: "t", PrefixID: 7, PrefixLen: 1024})
	}
	const from = 10100 * time.Millisecond
	run := func(outages []Outage) (*Result, []Placement) {
		var placed []Placement
		c, err := New(Config{Pools: pools, CycleRoles: cycle, Model: m, Scheduler: sched.NameRoundRobin,
			Cache: CacheConfig{TTL: time.Minute}, Outages: outages,
			Placed: func(p Placement) { placed = append(placed, p) }})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(t.Context(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		return res, placed
	}
	// The worker that holds the pin when the outage starts: the one the
	// last request before it ran on.
	res, _ := run(nil)
	held := res.Outcomes[20].Worker
	res, placed := run([]Outage{{Worker: res.Workers[held].Name, From: from, To: from + time.Second}})
	if len(placed) == 0 || placed[0].Place.Pinned.Blocks != 0 {
		t.Fatalf("the first request found a pin: %+v", placed)
	}
	hits, stale := 0, 0
	for _, p := range placed[1:] {
		pin := p.Place.Pinned
		if pin.Blocks == 0 {
			t.Errorf("request %d: the directory had no pin for the shared prompt", p.Request)
			continue
		}
		hits++
		// Every request's whole prompt is pinned: the directory holds the
		// longest recorded prefix, at least the shared one.
		if pin.Blocks < 1024/16 || pin.Worker != res.Outcomes[p.Request-1].Worker && res.Outcomes[p.Request-1].Status == StatusOK {
			t.Errorf("request %d: pin %+v, the request before it ran on worker %d", p.Request, pin, res.Outcomes[p.Request-1].Worker)
		}
		if pin.Worker == held && p.View.Snap.Workers[held].PrefixBlocks < pin.Blocks && res.Outcomes[p.Request].Arrival > from {
			stale++ // the engine lost it; the directory still says so
		}
	}
	t.Logf("%d placements with the directory's pin, %d stale after the outage", hits, stale)
	if stale == 0 {
		t.Error("after the outage, no placement was told of the pin its worker lost")
	}
}
