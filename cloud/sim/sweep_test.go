package sim

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestSweep: All gives one row per (policy, rate), policies outer, each
// the same as the run alone (the runs in parallel share nothing);
// MaxRate's rate passes the target where twice it does not; a
// ReportFrom slice summarises the later requests only and says no
// utilization.
func TestSweep(t *testing.T) {
	pools, cycle, err := ParseCluster("2xl4")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := LookupModel("llama3.1-8b")
	sw := &Sweep{
		Cluster:  Config{Pools: pools, CycleRoles: cycle, Model: m},
		Trace:    workload(11, 120, 4, 2000, 100),
		Policies: []string{sched.NameRoundRobin, sched.NameLLMD},
		Rates:    []float64{1, 3},
	}
	ctx := context.Background()
	rows, err := sw.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 2 policies × 2 rates", len(rows))
	}
	for i, r := range rows {
		p, x := sw.Policies[i/2], sw.Rates[i%2]
		if r.Policy != p || r.RateScale != x || r.Requests != len(sw.Trace) {
			t.Fatalf("row %d: %s at %g with %d requests, want %s at %g", i, r.Policy, r.RateScale, r.Requests, p, x)
		}
		alone, err := sw.Run(ctx, p, x)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, alone) {
			t.Fatalf("%s at %g: the sweep's row differs from the run alone", p, x)
		}
	}
	if rows[0].SLOTTFT != 2*time.Second || rows[0].SLOTPOT != 100*time.Millisecond {
		t.Fatalf("SLOs %v %v, want the Config defaults", rows[0].SLOTTFT, rows[0].SLOTPOT)
	}

	const target = 0.9
	best, err := sw.MaxRates(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range best {
		t.Logf("%s: max rate × %.3g, attainment %.3f", b.Policy, b.Scale, b.Summary.SLOAttainment)
		if b.Policy != sw.Policies[i] || b.Scale <= 0 || b.Summary.SLOAttainment < target || b.Summary.RateScale != b.Scale {
			t.Fatalf("%+v", b)
		}
		if over, err := sw.Run(ctx, b.Policy, 2*b.Scale); err != nil || over.SLOAttainment >= target {
			t.Fatalf("%s: twice its max rate %g still attains %.3f (%v)", b.Policy, b.Scale, over.SLOAttainment, err)
		}
	}

	sw.ReportFrom = sw.Trace[len(sw.Trace)/2].At
	s, err := sw.Run(ctx, sched.NameLLMD, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests == 0 || s.Requests >= len(sw.Trace) || !math.IsNaN(s.Pools[0].Utilization) || !math.IsInf(s.BusyCostPerMTok, 1) {
		t.Fatalf("slice: %d requests, utilization %v, busy cost %v", s.Requests, s.Pools[0].Utilization, s.BusyCostPerMTok)
	}
}

// TestScale: a rate scale divides arrival times and keeps the rest.
func TestScale(t *testing.T) {
	in := []Request{{At: 3 * time.Second, Input: 10, Output: 2, Blocks: []int{1}}}
	out := Scale(in, 2)
	if out[0].At != 1500*time.Millisecond || out[0].Input != 10 || out[0].Output != 2 || in[0].At != 3*time.Second {
		t.Fatalf("%+v from %+v", out[0], in[0])
	}
}
