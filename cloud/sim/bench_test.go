package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// BenchmarkCluster runs a seeded workload (prefix-sharing, 2,000 requests)
// under the project's scheduler and reports simulated events per second of
// wall time. The 1,000-GPU case is the fleet-scale one:
//
//	go test -run '^$' -bench Cluster -benchtime 1x ./cloud/sim
func BenchmarkCluster(b *testing.B) {
	for _, c := range []struct {
		gpus int
		rate float64
	}{{16, 40}, {1000, 2500}} {
		b.Run(fmt.Sprintf("%dxh100", c.gpus), func(b *testing.B) {
			reqs := workload(11, 2000, c.rate, 3000, 200)
			var events uint64
			var wall time.Duration
			for b.Loop() {
				t0 := time.Now()
				res := runPolicy(b, fmt.Sprintf("%dxh100", c.gpus), sched.NameScheduler, reqs, EngineConfig{})
				wall += time.Since(t0)
				events += res.Events
			}
			b.ReportMetric(float64(events)/wall.Seconds(), "events/s")
		})
	}
}

// FuzzParseSpecs: the cluster and worker-URL parsers take operator input;
// anything accepted must describe a cluster the simulator can build.
func FuzzParseSpecs(f *testing.F) {
	for _, s := range []string{"8xh100", "4xh100,8xl4", "2xa100:stream,2xt4:conservative", "sim://h100?model=llama3.1-8b&n=8", "sim://l4?tp=2&role=decode", "0xh100", "sim://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if pools, _, err := ParseCluster(s); err == nil {
			for _, p := range pools {
				if p.Count < 1 || p.Role >= sched.NumRoles || p.GPU.Name == "" {
					t.Fatalf("%q: accepted pool %+v", s, p)
				}
			}
		}
		if u, err := ParseURL(s); err == nil {
			if u.N < 1 || u.Model.Name == "" || u.GPU.Name == "" {
				t.Fatalf("%q: accepted %+v", s, u)
			}
		}
	})
}
