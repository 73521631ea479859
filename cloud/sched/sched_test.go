package sched

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/phaseless/phaseless/transport/schedhint"
	"time"
)

func mustRules(t testing.TB) *Rules {
	t.Helper()
	p, err := NewRules(RulesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hashes(n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	return h
}

// fleet is one healthy worker per non-conservative role plus a conservative one.
func fleet() *Snapshot {
	return &Snapshot{Workers: []Worker{
		{Role: RolePrefill, Healthy: true, Capacity: 8},
		{Role: RoleDecode, Healthy: true, Capacity: 8},
		{Role: RoleStream, Healthy: true, Capacity: 8},
		{Role: RoleConservative, Healthy: true, Capacity: 8},
	}}
}

func TestClassify(t *testing.T) {
	p := mustRules(t)
	cases := []struct {
		name   string
		req    Request
		cached int
		want   Role
	}{
		{"dense prompt", Request{InputTokens: 100, InputChars: 300, EntropyBits: 4.6, PredictedOutput: 50}, 0, RolePrefill},
		{"dense but tiny", Request{InputTokens: 5, InputChars: 20, EntropyBits: 4.6, PredictedOutput: 50, Stream: true}, 0, RoleStream},
		{"plain English short stream", Request{InputTokens: 40, InputChars: 160, EntropyBits: 4.0, PredictedOutput: 40, Stream: true}, 0, RoleStream},
		{"long prompt, short answer", Request{InputTokens: 4000, InputChars: 16000, EntropyBits: 4.0, PredictedOutput: 10}, 0, RolePrefill},
		{"long prompt mostly cached", Request{InputTokens: 4000, InputChars: 16000, EntropyBits: 4.0, PredictedOutput: 10}, 240, RoleDecode},
		{"long generation", Request{InputTokens: 200, InputChars: 800, EntropyBits: 4.0, PredictedOutput: 800, Stream: true}, 0, RoleDecode},
		{"long prompt, long answer", Request{InputTokens: 1000, InputChars: 4000, EntropyBits: 4.0, PredictedOutput: 600}, 0, RoleDecode},
		{"short non-stream", Request{InputTokens: 30, InputChars: 100, EntropyBits: 3.9, PredictedOutput: 20}, 0, RoleDecode},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := p.Classify(&c.req, c.cached); got != c.want {
				t.Fatalf("Classify = %v, want %v", got, c.want)
			}
		})
	}
}

func TestRulesDecide(t *testing.T) {
	p := mustRules(t)
	stream := Request{InputTokens: 40, InputChars: 160, EntropyBits: 4.0, PredictedOutput: 40, Stream: true, BlockHashes: hashes(8)}
	cases := []struct {
		name       string
		req        Request
		mutate     func(s *Snapshot)
		wantWorker int
		wantReason Reason
	}{
		{"stream pool", stream, nil, 2, ReasonLeastLoad},
		{"thrashing stream worker skipped", stream, func(s *Snapshot) { s.Workers[2].KVFaultsPerMs = 13 }, 1, ReasonKVFaults},
		{"bursty worker avoided by streams", stream, func(s *Snapshot) {
			s.Workers[2].BurstSigma = 9
			s.Workers = append(s.Workers, Worker{Role: RoleStream, Healthy: true, Capacity: 8, Running: 1})
		}, 4, ReasonLeastLoad},
		{"bursty worker still used when alone", stream, func(s *Snapshot) { s.Workers[2].BurstSigma = 9 }, 2, ReasonLeastLoad},
		{"unhealthy skipped", stream, func(s *Snapshot) { s.Workers[2].Healthy = false }, 1, ReasonLeastLoad},
		{"full pool spills", stream, func(s *Snapshot) { s.Workers[2].Queued = 16 }, 1, ReasonLeastLoad},
		{"prefix affinity within slack", stream, func(s *Snapshot) {
			s.Workers = append(s.Workers, Worker{Role: RoleStream, Healthy: true, Capacity: 8, Running: 3, PrefixBlocks: 2})
		}, 4, ReasonPrefix},
		{"prefix too loaded loses", stream, func(s *Snapshot) {
			s.Workers = append(s.Workers, Worker{Role: RoleStream, Healthy: true, Capacity: 8, Running: 8, PrefixBlocks: 2})
		}, 2, ReasonLeastLoad},
		{"prefix in another pool wins", stream, func(s *Snapshot) {
			s.Workers[1].PrefixBlocks = 4
			s.Workers[1].Running = 3
		}, 1, ReasonPrefix},
		{"small prefix elsewhere does not", stream, func(s *Snapshot) { s.Workers[1].PrefixBlocks = 3 }, 2, ReasonLeastLoad},
		{"loaded prefix holder elsewhere does not", stream, func(s *Snapshot) {
			s.Workers[1].PrefixBlocks = 8
			s.Workers[1].Running = 6
		}, 2, ReasonLeastLoad},
		{"idle engine next door beats a busy pool", stream, func(s *Snapshot) { s.Workers[2].Running = 3 }, 0, ReasonLeastLoad},
		{"a little queueing keeps the pool", stream, func(s *Snapshot) { s.Workers[2].Running = 1 }, 2, ReasonLeastLoad},
		{"everything faulting: least load anywhere", stream, func(s *Snapshot) {
			for i := range s.Workers {
				s.Workers[i].KVFaultsPerMs = 50
				s.Workers[i].Running = 4 - i
			}
		}, 2, ReasonOverloaded},
		{"conservative as last pool", stream, func(s *Snapshot) {
			for i := 0; i < 3; i++ {
				s.Workers[i].Healthy = false
			}
		}, 3, ReasonLeastLoad},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := fleet()
			if c.mutate != nil {
				c.mutate(s)
			}
			d, err := p.Decide(&c.req, s)
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != c.wantWorker || d.Reason != c.wantReason {
				t.Fatalf("got worker %d reason %v, want %d %v", d.Worker, d.Reason, c.wantWorker, c.wantReason)
			}
			if d.Pool != s.Workers[d.Worker].Role {
				t.Fatalf("pool %v but worker role %v", d.Pool, s.Workers[d.Worker].Role)
			}
		})
	}
}

func TestNoWorker(t *testing.T) {
	s := fleet()
	for i := range s.Workers {
		s.Workers[i].Healthy = false
	}
	req := &Request{InputTokens: 1}
	for _, p := range []Policy{mustRules(t), &RoundRobin{}, LeastLoaded{}} {
		if _, err := p.Decide(req, s); !errors.Is(err, ErrNoWorker) {
			t.Errorf("%s: err = %v, want ErrNoWorker", p.Name(), err)
		}
	}
	if _, err := Fallback(req, s, 0); !errors.Is(err, ErrNoWorker) {
		t.Errorf("Fallback: %v", err)
	}
}

func TestBaselines(t *testing.T) {
	s := fleet()
	req := &Request{InputTokens: 10}
	rr := &RoundRobin{}
	var seen []int
	for range 6 {
		d, err := rr.Decide(req, s)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, d.Worker)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []int{0, 0, 1, 1, 2, 2}) {
		t.Fatalf("round-robin visited %v; want each non-conservative worker twice", seen)
	}
	s.Workers[0].Running, s.Workers[1].Running, s.Workers[2].Running = 3, 1, 2
	if d, _ := (LeastLoaded{}).Decide(req, s); d.Worker != 1 {
		t.Fatalf("least-loaded picked %d", d.Worker)
	}
	// Fallback prefers the conservative pool even when it is busier.
	s.Workers[3].Running = 7
	if d, _ := Fallback(req, s, 1); d.Worker != 3 || d.Reason != ReasonFallback {
		t.Fatalf("fallback picked %d (%v)", d.Worker, d.Reason)
	}
	// Without a conservative pool it avoids the worker that failed.
	s.Workers[3].Healthy = false
	if d, _ := Fallback(req, s, 1); d.Worker != 2 {
		t.Fatalf("fallback without conservative pool picked %d", d.Worker)
	}
}

func TestHintRoundTrip(t *testing.T) {
	p := mustRules(t)
	s := fleet()
	s.Workers[0].KVFaultsPerMs, s.Workers[0].BurstSigma, s.Workers[0].Running = 3.4, 5.5, 4
	s.Workers[0].PrefixBlocks = 3
	req := &Request{InputTokens: 2000, InputChars: 8000, EntropyBits: 4.5, PredictedOutput: 20, BlockHashes: hashes(4)}
	d, err := p.Decide(req, s)
	if err != nil {
		t.Fatal(err)
	}
	hint := d.Hint()
	if len(hint) != schedhint.Len || schedhint.Len != 16 {
		t.Fatalf("hint %q has length %d, schedhint.Len %d", hint, len(hint), schedhint.Len)
	}
	h, err := schedhint.Parse(hint)
	if err != nil {
		t.Fatal(err)
	}
	// The codec's precision is schedhint's test; here: the decision's own
	// signals went in, from the request and the chosen worker.
	if h.InputTokens < 1900 || h.InputTokens > 2100 || h.PrefixFraction < 0.74 || h.PrefixFraction > 0.76 || h.KVFaultsPerMs != 3.4 || h.Load != 0.5 {
		t.Errorf("hint %+v", h)
	}
	if h.Pool != RolePrefill || h.Reason != ReasonPrefix || h.Policy != PolicyRules {
		t.Errorf("pool/reason/policy = %v/%v/%v", h.Pool, h.Reason, h.Policy)
	}
}

func TestOutputPredictor(t *testing.T) {
	p := NewOutputPredictor(2)
	if got := p.Predict("a", 512); got != 512 {
		t.Fatalf("cold prediction %d, want max_tokens", got)
	}
	for range 20 {
		p.Observe("a", 512, 16)
	}
	if got := p.Predict("a", 512); got < 16 || got > 40 {
		t.Fatalf("prediction after short answers = %d, want near 16", got)
	}
	if got := p.Predict("b", 100); got != 100 {
		t.Fatalf("other tenant inherited history: %d", got)
	}
	if got := p.Predict("a", 0); got != 1 {
		t.Fatalf("max_tokens 0 predicted %d", got)
	}
	// The table is bounded: a third tenant resets it.
	p.Observe("b", 10, 10)
	p.Observe("c", 10, 10)
	if got := p.Predict("a", 512); got != 512 {
		t.Fatalf("table grew past its bound: a still predicts %d", got)
	}
}

func TestRulesConfigValidate(t *testing.T) {
	if _, err := NewRules(RulesConfig{EntropyBits: 9}); err == nil {
		t.Error("EntropyBits 9 accepted")
	}
	if _, err := NewRules(RulesConfig{MaxLoad: math.NaN()}); err == nil {
		t.Error("NaN MaxLoad accepted")
	}
	if _, err := ByName("fastest", RulesConfig{}); err == nil {
		t.Error("unknown policy accepted")
	}
}

// benchFleet is 12 workers over the four pools with varied signals.
func benchFleet() (*Snapshot, *Request) {
	s := &Snapshot{}
	for i := range 12 {
		s.Workers = append(s.Workers, Worker{
			Role: Role(i % 4), Healthy: true, Capacity: 16, Running: i % 5, Queued: i % 3,
			KVFaultsPerMs: float64(i%7) * 2.5, BurstSigma: float64(i%5) * 2.4, KVUsage: float64(i) / 12, PrefixBlocks: i % 4,
		})
	}
	return s, &Request{InputTokens: 700, InputChars: 2800, EntropyBits: 4.1, PredictedOutput: 120, Stream: true, BlockHashes: hashes(43)}
}

func benchPolicy(b *testing.B, p Policy) {
	s, req := benchFleet()
	lat := make([]time.Duration, 1<<16) // a ring: the newest samples, no growth in the loop
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		d, err := p.Decide(req, s)
		lat[n%len(lat)] = time.Since(t0)
		n++
		if err != nil || d.Worker < 0 {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	lat = lat[:min(n, len(lat))]
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
}

// BenchmarkDecide is the hot path; LeastLoaded in the same run is the baseline
// (the cheapest sensible decision) to read it against.
func BenchmarkDecide(b *testing.B) {
	b.Run("rules", func(b *testing.B) { benchPolicy(b, mustRules(b)) })
	b.Run("least-loaded", func(b *testing.B) { benchPolicy(b, LeastLoaded{}) })
	b.Run("round-robin", func(b *testing.B) { benchPolicy(b, &RoundRobin{}) })
}

func TestDecideAllocsNothing(t *testing.T) {
	s, req := benchFleet()
	p := mustRules(t)
	buf := make([]byte, 0, schedhint.Len)
	allocs := testing.AllocsPerRun(200, func() {
		d, _ := p.Decide(req, s)
		buf = d.AppendHint(buf[:0])
	})
	if allocs != 0 {
		t.Fatalf("Decide+AppendHint allocates %v times per call", allocs)
	}
}

// TestDisaggregatedDecideAllocatesNothing: the --dev split policy runs on
// the hot path like every other.
func TestDisaggregatedDecideAllocatesNothing(t *testing.T) {
	d, err := NewDisaggregated()
	if err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{Workers: []Worker{{Role: RolePrefill, Healthy: true, Capacity: 4}, {Role: RoleDecode, Healthy: true, Capacity: 4}}}
	got, err := d.Decide(&Request{InputTokens: 10}, snap)
	if err != nil || got.Worker != 0 || !got.Split || got.DecodeWorker != 1 {
		t.Fatalf("%+v %v: want a split from the prefill worker to the decode one", got, err)
	}
	if n := testing.AllocsPerRun(100, func() { d.Decide(&Request{InputTokens: 10}, snap) }); n != 0 {
		t.Fatalf("Decide allocates %v times", n)
	}
}
