package sim

import (
	"math"
	"testing"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestReferenceClass keeps sched.ReferenceClass (how an undeclared worker
// is priced) in step with this simulator's H100 serving Llama-3.1-8B, and
// checks the classes order the GPUs as their datasheets do.
func TestReferenceClass(t *testing.T) {
	m, _ := LookupModel("llama3.1-8b")
	class := func(name string) sched.Class {
		g, _ := LookupGPU(name)
		d, err := NewDeployment(g, m, 0, EngineConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Class(g.PricePerHour)
	}
	h, l := class("h100"), class("l4")
	ref := sched.ReferenceClass
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"prefill", h.PrefillTokensPerSec, ref.PrefillTokensPerSec}, {"decode", h.DecodeStepSec, ref.DecodeStepSec},
		{"per seq", h.DecodeStepPerSeq, ref.DecodeStepPerSeq}, {"kv", float64(h.KVTokens), float64(ref.KVTokens)}} {
		if math.Abs(f.got/f.want-1) > 0.1 {
			t.Errorf("h100 %s = %v, ReferenceClass says %v", f.name, f.got, f.want)
		}
	}
	if h.ID != sched.ClassH100 || l.ID != sched.ClassL4 || !(l.PrefillTokensPerSec < h.PrefillTokensPerSec/4) ||
		!(l.DecodeStepSec > 5*h.DecodeStepSec) || !(l.KVTokens < h.KVTokens/10) || l.PricePerHour >= h.PricePerHour {
		t.Fatalf("l4 %+v against h100 %+v", l, h)
	}
}

// TestSplit: the disaggregating policy splits long prompts on a mixed
// cluster (prefill on the H100s, decode on another worker: an L4, or the
// other H100, which decodes for less per token), every request still
// produces all its tokens exactly once, and the KV transfer takes what the
// link's bandwidth says.
func TestSplit(t *testing.T) {
	reqs := workload(5, 300, 20, 3000, 60)
	m, _ := LookupModel("llama3.1-8b")
	run := func(link string) *Result {
		pools, _, err := ParseCluster("2xh100,4xl4")
		if err != nil {
			t.Fatal(err)
		}
		p, _ := sched.ByName(sched.NamePricedPD, sched.RulesConfig{})
		cfg := Config{Pools: pools, Model: m, Policy: p}
		if link != "" {
			l, err := LookupLink(link)
			if err != nil {
				t.Fatal(err)
			}
			cfg.KVLink = &l
		}
		return runConfig(t, cfg, reqs)
	}
	xfer := map[string]float64{}
	for _, link := range []string{"", "nvlink", "tcp"} {
		res := run(link)
		splits := 0
		for i, o := range res.Outcomes {
			if o.Finished != 1 || o.Status != StatusOK || o.Output != reqs[i].Output {
				t.Fatalf("%s: request %d: %+v", link, i, o)
			}
			if !(o.Cost > 0) {
				t.Fatalf("request %d cost %v", i, o.Cost)
			}
			if !o.Split {
				continue
			}
			splits++
			p, d := res.Workers[o.Worker], res.Workers[o.DecodeWorker]
			if p.Role != sched.RolePrefill || o.DecodeWorker == o.Worker {
				t.Fatalf("split %d: prefill on %s (%v), decode on %s (%v)", i, p.Name, p.Role, d.Name, d.Role)
			}
			xfer[link] += o.Transfer.Seconds()
			if link == "tcp" {
				// Queued behind earlier transfers at most: never faster than the wire.
				l, _ := LookupLink("tcp")
				if min := float64(o.Prompt) * m.KVBytesPerToken() / l.BytesPerSec; o.Transfer.Seconds() < min {
					t.Fatalf("split %d: %d tokens crossed tcp in %v, the wire needs %.4fs", i, o.Prompt, o.Transfer, min)
				}
			}
		}
		if splits == 0 {
			t.Fatalf("%s: no request split", link)
		}
	}
	if !(xfer["tcp"] > 10*xfer["nvlink"]) || !(xfer[""] > xfer["nvlink"]) {
		t.Fatalf("transfer seconds by link: %v", xfer)
	}
}
