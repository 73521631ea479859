package sched

import "testing"

var (
	h100 = Class{ID: ClassH100, PrefillTokensPerSec: 36700, DecodeStepSec: 0.0066, DecodeStepPerSeq: 0.000047, KVTokens: 400000, PricePerHour: 3}
	l4   = Class{ID: ClassL4, PrefillTokensPerSec: 4500, DecodeStepSec: 0.064, DecodeStepPerSeq: 0.0004, KVTokens: 30000, PricePerHour: 0.8}
)

// mixed is two H100 prefill workers and two L4 decode workers.
func mixed() *Snapshot {
	return &Snapshot{Workers: []Worker{
		{Role: RolePrefill, Healthy: true, Capacity: 256, Class: h100},
		{Role: RolePrefill, Healthy: true, Capacity: 256, Class: h100},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: l4},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: l4},
	}}
}

func TestPricedSplit(t *testing.T) {
	p, err := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	if err != nil {
		t.Fatal(err)
	}
	s := mixed()
	s.Workers[0].PendingPrefill = 20000 // the first H100 is busy prefilling
	long := &Request{InputTokens: 3000, PredictedOutput: 100}
	d, _ := p.Decide(long, s)
	// The prefill goes to the idle H100; per token an H100 decodes for less
	// than an L4, and a 100-token decode can bear a prefiller's stalls. The
	// best decoder is then a prefiller, stalled by prefills as the idle
	// H100 itself would be: the request runs whole there, with no transfer
	// and no second copy of its KV.
	if d.Split || d.Worker != 1 || d.Reason != ReasonPriced {
		t.Fatalf("long prompt: %+v", d)
	}
	// A short decode cannot: its handful of tokens would wait out the
	// prefills the H100s take, so it decodes on an L4.
	if d, _ := p.Decide(&Request{InputTokens: 3000, PredictedOutput: 3}, s); !d.Split || s.Workers[d.DecodeWorker].Class.ID != ClassL4 {
		t.Fatalf("short decode: %+v", d)
	}
	// A short prompt prefills where it decodes.
	short := &Request{InputTokens: 20, PredictedOutput: 100}
	if d, _ := p.Decide(short, s); d.Split {
		t.Fatalf("short prompt: %+v", d)
	}
	// A one-token answer never splits: there is nothing to decode.
	if d, _ := p.Decide(&Request{InputTokens: 3000, PredictedOutput: 1}, s); d.Split || s.Workers[d.Worker].Role != RolePrefill {
		t.Fatalf("one-token answer: %+v", d)
	}
	// A prompt and output the L4s cannot hold decode on an H100.
	if d, _ := p.Decide(&Request{InputTokens: 40000, PredictedOutput: 100}, s); s.Workers[d.Worker].Class.ID != ClassH100 || d.Split && s.Workers[d.DecodeWorker].Class.ID != ClassH100 {
		t.Fatalf("over the L4's KV: %+v", d)
	}
	// Without classes, the decider sees four equal workers.
	blind, _ := NewPriced("b", PricedConfig{})
	if d, _ := blind.Decide(short, mixed()); d.Split {
		t.Fatalf("colocating policy split: %+v", d)
	}
	if _, err := NewPriced("x", PricedConfig{TTFTHeadroom: 2}); err == nil {
		t.Fatal("headroom 2 accepted")
	}
}

// TestPricedPerToken: classes are priced per token of work, not per hour.
// At the simulator's prices an idle H100 is the cheaper decoder; an L4 so
// cheap that its tokens cost less takes the decode.
func TestPricedPerToken(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	s := mixed()
	s.Workers[1].Role = RoleDecode // one H100 on the decode side, next to the L4s
	req := &Request{InputTokens: 20, PredictedOutput: 200}
	if d, _ := p.Decide(req, s); s.Workers[d.Worker].Class.ID != ClassH100 {
		t.Fatalf("at $3 and $0.8 an hour: %+v", d)
	}
	h, l := p.workCost(req, &s.Workers[1], phaseDecode), p.workCost(req, &s.Workers[2], phaseDecode)
	if !(h < l) {
		t.Fatalf("decode cost H100 %g, L4 %g", h, l)
	}
	cheap := mixed()
	cheap.Workers[1].Role = RoleDecode
	for i := 2; i < 4; i++ {
		cheap.Workers[i].Class.PricePerHour = 0.8 * h / l / 2 // half the H100's per-token cost
	}
	p2, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	if d, _ := p2.Decide(req, cheap); cheap.Workers[d.Worker].Class.ID != ClassL4 {
		t.Fatalf("an L4 at half the H100's cost per token: %+v", d)
	}
	// Busy H100s (their estimated TPOT over the SLO) leave decodes to the L4s.
	for i := range 2 {
		s.Workers[i].Running = 2000
	}
	if d, _ := p.Decide(req, s); s.Workers[d.Worker].Class.ID != ClassL4 {
		t.Fatalf("busy H100s: %+v", d)
	}
}

func TestPricedAllocs(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	s := mixed()
	req := &Request{InputTokens: 3000, PredictedOutput: 100, BlockHashes: hashes(100)}
	if n := testing.AllocsPerRun(100, func() { _, _ = p.Decide(req, s) }); n != 0 {
		t.Fatalf("Decide allocates %v times", n)
	}
}

// TestPricedPlanner: on identical GPUs a TTFT breach in the prefill pool
// moves the decode-side worker with the fewest sequences into it, up to
// MinDecodeShare of the workers left decoding.
func TestPricedPlanner(t *testing.T) {
	p, err := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true, MinDecodeShare: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	s := &Snapshot{Workers: []Worker{
		{Role: RolePrefill, Healthy: true, Capacity: 256, Class: h100, PendingPrefill: 60000},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: h100, Running: 9},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: h100, Running: 3},
		{Role: RoleStream, Healthy: true, Capacity: 256, Class: h100, Running: 5},
	}}
	long := &Request{InputTokens: 4000, PredictedOutput: 20}
	d, _ := p.Decide(long, s)
	if !d.Split || d.Worker != 2 || d.DecodeWorker == 0 || d.DecodeWorker == 2 {
		t.Fatalf("first breach: %+v (want the prefill on worker 2, the emptiest decoder)", d)
	}
	// Worker 2 stays a prefiller: it takes the next long prompt and no decode.
	s.Workers[2].PendingPrefill = 4000
	d, _ = p.Decide(long, s)
	if !d.Split || d.Worker != 2 || d.DecodeWorker == 2 {
		t.Fatalf("after growing: %+v", d)
	}
	// With half the workers prefilling the pool stops growing: the next
	// breach goes back to a decode worker (Dynamo's local prefill).
	s.Workers[2].PendingPrefill = 60000
	d, _ = p.Decide(long, s)
	if d.Split || d.Worker == 0 || d.Worker == 2 {
		t.Fatalf("at the cap: %+v", d)
	}
	if _, err := NewPriced("x", PricedConfig{MinDecodeShare: 1}); err == nil {
		t.Fatal("MinDecodeShare 1 accepted")
	}
}

// TestPricedTakeBack: when the H100 prefill pool misses the TTFT and cannot
// grow (the L4s prefill far slower), an L4 takes a short prompt back only
// while the decode time its prefill stalls (prefill length × the sequences
// it runs) stays within the planner's stall budget (TTFTHeadroom × the TTFT
// SLO = 1 s), and hands the decode to an H100; otherwise the prompt queues
// on the prefill pool.
func TestPricedTakeBack(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true})
	s := mixed()
	for i := range 2 {
		s.Workers[i].PendingPrefill = 60000 // 1.6 s of prefill queued on each H100
	}
	req := &Request{InputTokens: 900, PredictedOutput: 100} // 0.2 s of prefill on an L4
	// The idle L4 takes the prefill back; its decode goes to an H100,
	// which decodes for a tenth of the L4's cost per token (a take-back
	// answers the prefill queue, not where to decode).
	d, _ := p.Decide(req, s)
	if s.Workers[d.Worker].Class.ID != ClassL4 || !d.Split || s.Workers[d.DecodeWorker].Class.ID != ClassH100 {
		t.Fatalf("idle L4s in a burst: %+v", d)
	}
	// Eight decodes on each L4 would be stalled 0.2 s each: 1.6 s in all.
	for i := 2; i < 4; i++ {
		s.Workers[i].Running = 8
	}
	if d, _ := p.Decide(req, s); s.Workers[d.Worker].Class.ID != ClassH100 {
		t.Fatalf("busy L4s: %+v", d)
	}
}

// TestPricedTakeBackSameClass: at the planner's cap, an H100 decoding 40
// sequences takes a long prompt back only once the prefill pool's estimate
// is past the TTFT SLO itself; within it, the prompt waits in the pool
// rather than stall those decodes.
func TestPricedTakeBackSameClass(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true, Disaggregate: true, MinDecodeShare: 0.5})
	s := &Snapshot{Workers: []Worker{
		{Role: RolePrefill, Healthy: true, Capacity: 256, Class: h100, PendingPrefill: 55000}, // 1.5 s queued
		{Role: RolePrefill, Healthy: true, Capacity: 256, Class: h100, PendingPrefill: 55000},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: h100, Running: 40},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: h100, Running: 40},
	}}
	long := &Request{InputTokens: 6000, PredictedOutput: 20} // 0.16 s × 40 decodes stalled
	if d, _ := p.Decide(long, s); s.Workers[d.Worker].Role != RolePrefill {
		t.Fatalf("pool within the SLO: %+v", d)
	}
	for i := range 2 {
		s.Workers[i].PendingPrefill = 80000 // 2.2 s
	}
	if d, _ := p.Decide(long, s); d.Split || s.Workers[d.Worker].Role != RoleDecode {
		t.Fatalf("pool past the SLO: %+v", d)
	}
}

// TestPricedKVShort: a worker whose free KV (as probed, less the prompts
// placed there and not yet prefilled) cannot hold the request would queue
// it for blocks or preempt: an equal worker with room takes it, and the
// short one is chosen only when no worker has room.
func TestPricedKVShort(t *testing.T) {
	p, _ := NewPriced("t", PricedConfig{Classes: true})
	s := &Snapshot{Workers: []Worker{
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: h100, KVUsage: 0.99},
		{Role: RoleDecode, Healthy: true, Capacity: 256, Class: h100, KVUsage: 0.5, Running: 30},
	}}
	req := &Request{InputTokens: 20000, PredictedOutput: 300}
	if d, _ := p.Decide(req, s); d.Worker != 1 {
		t.Fatalf("room on worker 1 only: %+v", d)
	}
	s.Workers[1].PendingPrefill = 190000 // its free half is spoken for
	s.Workers[1].KVUsage = 0.5
	if got := p.kvShort(&s.Workers[1], 20000+300); !(got > 0) {
		t.Fatalf("kvShort with the free blocks spoken for: %v", got)
	}
	if d, err := p.Decide(req, s); err != nil || d.Worker < 0 {
		t.Fatalf("no room anywhere still places: %+v %v", d, err)
	}
}
