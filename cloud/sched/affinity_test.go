package sched

import "testing"

// fixed always picks worker 0, splitting when split is set: what the
// affinity layer overrides, or not.
type fixed struct{ split bool }

func (fixed) Name() string { return "fixed" }
func (f fixed) Decide(req *Request, s *Snapshot) (Decision, error) {
	d := decided(req, s, 0, ReasonLeastLoad, PolicyRules)
	d.Split = f.split
	return d, nil
}

func TestAffinityRoutesToTheHolderWithRoom(t *testing.T) {
	a, err := NewAffinity(fixed{}, AffinityConfig{})
	if err != nil {
		t.Fatal(err)
	}
	worker := func(prefix, running int) Worker {
		return Worker{Healthy: true, Capacity: 16, Running: running, PrefixBlocks: prefix}
	}
	req := &Request{BlockHashes: make([]uint64, 20)}
	for _, tc := range []struct {
		name    string
		workers []Worker
		want    int
	}{
		{"holder leads", []Worker{worker(2, 0), worker(12, 2)}, 1},
		{"lead under MinBlocks: a shared system prompt", []Worker{worker(10, 0), worker(12, 0)}, 0},
		{"holder full", []Worker{worker(0, 0), worker(12, 16)}, 0},
		{"holder beyond the slack", []Worker{worker(0, 0), worker(12, 5)}, 0},
		{"holder unhealthy", []Worker{worker(0, 0), {PrefixBlocks: 12, Capacity: 16}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := a.Decide(req, &Snapshot{Workers: tc.workers})
			if err != nil || d.Worker != tc.want {
				t.Fatalf("worker %d (%v), want %d", d.Worker, err, tc.want)
			}
			if tc.want == 1 && (d.Reason != ReasonPrefix || d.PrefixBlocks != 12) {
				t.Fatalf("decision %+v", d)
			}
		})
	}
	if a.Name() != "fixed+affinity" {
		t.Fatal(a.Name())
	}
	// A split is the inner policy's decision and stands.
	sp, _ := NewAffinity(fixed{split: true}, AffinityConfig{})
	if d, _ := sp.Decide(req, &Snapshot{Workers: []Worker{worker(0, 0), worker(12, 0)}}); d.Worker != 0 || !d.Split {
		t.Fatalf("split overridden: %+v", d)
	}
	if _, err := NewAffinity(nil, AffinityConfig{}); err == nil {
		t.Fatal("nil inner accepted")
	}
	snap := &Snapshot{Workers: []Worker{worker(0, 0), worker(12, 0)}}
	if n := testing.AllocsPerRun(100, func() { a.Decide(req, snap) }); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
}
