package sim

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// TestWorkload: the benchmark spec of the issue is one spec; arrivals have
// the asked rate and burstiness; the same seed gives the same trace and
// another seed another; and the shared prefix makes the engines' prefix
// cache hit, which prompts without one never do.
func TestWorkload(t *testing.T) {
	w, err := ParseWorkload("rate=8,duration=600s,prompt=547,prefix=120,output=248,seed=7")
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := w.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reqs); n < 4600 || n > 5000 {
		t.Fatalf("%d requests at 8/s for 600 s", n)
	}
	for _, r := range reqs {
		if r.Input != 547 || r.Output != 248 || r.PrefixLen != 120 || r.PrefixID != 0 || r.At >= 600*time.Second {
			t.Fatalf("request %+v", r)
		}
	}
	again, _ := w.Generate()
	if !reflect.DeepEqual(reqs, again) {
		t.Fatal("the same workload gave another trace")
	}
	w.Seed = 8
	other, _ := w.Generate()
	if reflect.DeepEqual(reqs, other) {
		t.Fatal("another seed gave the same trace")
	}
	cv := func(spec string) float64 {
		w, err := ParseWorkload(spec)
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := w.Generate()
		var sum, sq float64
		for i := 1; i < len(rs); i++ {
			g := (rs[i].At - rs[i-1].At).Seconds()
			sum += g
			sq += g * g
		}
		n := float64(len(rs) - 1)
		mean := sum / n
		if math.Abs(mean-0.1)/0.1 > 0.05 {
			t.Fatalf("%s: mean gap %.4f s, want 0.1", spec, mean)
		}
		return math.Sqrt(sq/n-mean*mean) / mean
	}
	if c := cv("rate=10,requests=20000,prompt=100,output=10"); math.Abs(c-1) > 0.05 {
		t.Errorf("Poisson CV %.3f", c)
	}
	if c := cv("rate=10,requests=20000,prompt=100,output=10,arrival=gamma:3"); math.Abs(c-3)/3 > 0.1 {
		t.Errorf("gamma:3 CV %.3f", c)
	}
	if c := cv("rate=10,requests=20000,prompt=100,output=10,arrival=gamma:0.5"); math.Abs(c-0.5)/0.5 > 0.1 {
		t.Errorf("gamma:0.5 CV %.3f", c)
	}
	w, _ = ParseWorkload("rate=5,requests=4000,prompt=uniform:100:300,output=exp:50,prefix=150,prefixes=3,tenants=2")
	rs, _ := w.Generate()
	var in float64
	for i, r := range rs {
		if r.Input < 151 || r.Input > 300 || r.Output < 1 || r.PrefixID != i%3 || r.Tenant != []string{"tenant-0", "tenant-1"}[i%2] {
			t.Fatalf("request %d: %+v", i, r)
		}
		in += float64(r.Input)
	}
	if m := in / float64(len(rs)); m < 200 || m > 240 {
		t.Errorf("mean prompt %.1f of uniform:100:300 lengthened past a 150-token prefix", m)
	}

	hit := func(spec string) float64 {
		w, err := ParseWorkload(spec)
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := w.Generate()
		pools, _, _ := ParseCluster("2xh100")
		m, _ := LookupModel("llama3.1-8b")
		return Summarize(runConfig(t, Config{Pools: pools, Model: m, Scheduler: "round-robin"}, rs), 1, 0, 0, nil).PrefixHit
	}
	with, without := hit("rate=8,requests=400,prompt=547,prefix=120,output=24"), hit("rate=8,requests=400,prompt=547,output=24")
	// 7 of the prefix's 120 tokens' blocks are full (112 tokens), and every
	// request but each engine's first finds them cached.
	if without != 0 || math.Abs(with-112.0/547) > 0.01 {
		t.Fatalf("prefix hit %.4f with a 120-token shared prefix (want about %.4f), %.4f without", with, 112.0/547, without)
	}
}

func TestParseWorkloadRefuses(t *testing.T) {
	for _, bad := range []string{
		"", "rate=8,duration=10s,prompt=100", "rate=0,duration=10s,prompt=100,output=10", "rate=8,prompt=100,output=10",
		"rate=8,duration=10s,prompt=100,output=10,prefix=100", "rate=8,duration=10s,prompt=100,output=10,arrival=weibull",
		"rate=8,duration=10s,prompt=100,output=10,arrival=poisson:2", "rate=8,duration=10s,prompt=uniform:9:3,output=10",
		"rate=8,duration=10s,prompt=100,output=10,rate=9", "rate=8,duration=10s,prompt=100,output=10,colour=red",
		"rate=NaN,duration=10s,prompt=100,output=10", "rate=8,duration=10s,prompt=normal:NaN:1,output=10",
		"rate=1e6,duration=1000h,prompt=1,output=1", "rate=8,duration=10s,prompt=100,output=10,arrival=gamma:0",
	} {
		if _, err := ParseWorkload(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParseWorkload: any spec either fails to parse or generates a valid
// trace (sorted arrivals, lengths ≥ 1, the prefix inside the prompt).
func FuzzParseWorkload(f *testing.F) {
	f.Add("rate=8,duration=600s,prompt=547,prefix=120,output=248")
	f.Add("rate=5,requests=40,prompt=uniform:100:300,output=exp:50,prefix=150,prefixes=3,tenants=2,arrival=gamma:2,seed=3")
	f.Add("rate=1,requests=3,prompt=normal:10:40,output=1")
	f.Fuzz(func(t *testing.T, spec string) {
		w, err := ParseWorkload(spec)
		if err != nil {
			return
		}
		if w.Requests > 2000 || w.Requests == 0 && w.Rate*w.Duration.Seconds() > 2000 {
			return // valid, and too long for a fuzz iteration
		}
		rs, err := w.Generate()
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if r.Input < 1 || r.Output < 1 || (i > 0 && r.At < rs[i-1].At) || (r.PrefixLen > 0 && r.PrefixLen >= r.Input) {
				t.Fatalf("request %d: %+v", i, r)
			}
		}
	})
}
