package sched

import "testing"

func TestLLMDScores(t *testing.T) {
	p, err := NewLLMD(LLMDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{InputTokens: 128, BlockHashes: hashes(8)}
	s := fleet()
	s.Workers[1].PrefixBlocks = 8 // whole prompt cached: +3
	s.Workers[2].KVUsage = 0      // others half full
	s.Workers[0].KVUsage, s.Workers[1].KVUsage, s.Workers[3].KVUsage = 0.5, 0.5, 0.5
	if d, _ := p.Decide(req, s); d.Worker != 1 || d.Reason != ReasonScore || d.Policy != PolicyLLMD {
		t.Fatalf("prefix holder not chosen: %+v", d)
	}
	s.Workers[1].Queued = 10 // a deep queue costs it the queue score (2) and more than the prefix's edge
	s.Workers[1].KVUsage = 1
	if d, _ := p.Decide(req, s); d.Worker == 1 {
		t.Fatalf("loaded prefix holder still chosen")
	}
	// Ties rotate instead of piling onto worker 0.
	seen := map[int]bool{}
	for range 8 {
		d, _ := p.Decide(&Request{InputTokens: 10}, fleet())
		seen[d.Worker] = true
	}
	if len(seen) < 3 {
		t.Fatalf("ties went to %v only", seen)
	}
	if _, err := NewLLMD(LLMDConfig{KVWeight: -1}); err == nil {
		t.Fatal("negative weight accepted")
	}
}

func TestExplicitPhases(t *testing.T) {
	p, err := NewExplicitPhases(ExplicitPhasesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := fleet()
	if d, _ := p.Decide(&Request{InputTokens: 4000}, s); d.Worker != 0 || d.Reason != ReasonDeclaredPhase {
		t.Fatalf("long prompt: %+v", d)
	}
	if d, _ := p.Decide(&Request{InputTokens: 100}, s); d.Worker != 1 {
		t.Fatalf("short prompt: %+v", d)
	}
	// A fixed pool: it does not spill even when the other pool idles.
	s.Workers[1].Running = 50
	if d, _ := p.Decide(&Request{InputTokens: 100}, s); d.Worker != 1 {
		t.Fatalf("spilled: %+v", d)
	}
	s.Workers[1].Healthy = false
	if d, _ := p.Decide(&Request{InputTokens: 100}, s); d.Reason != ReasonLeastLoad {
		t.Fatalf("no pool: %+v", d)
	}
	for _, n := range Names() {
		want := n
		if n == NameScheduler {
			want = DefaultPolicy
		}
		if q, err := ByName(n, RulesConfig{}); err != nil || q.Name() != want {
			t.Fatalf("ByName(%q) = %v, %v", n, q, err)
		}
	}
}
