package prefetch

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/llm"
)

type clock struct{ t time.Time }

// kinds are two kinds of request behind their own system prompts (CLINC150
// utterances: banking's direct_deposit, travel's book_flight).
var (
	bank   = llm.Message{Role: "system", Content: "You are the bank's assistant. Answer about accounts and deposits."}
	travel = llm.Message{Role: "system", Content: "You are the travel desk. Book flights and hotels."}
)

func req(sys llm.Message, user string) ([]llm.Message, semantic.Fingerprint) {
	msgs := []llm.Message{sys, {Role: "user", Content: user}}
	return msgs, semantic.Of(msgs, semantic.ModeTopic)
}

func TestPredictsTheNextClusterAndItsPrefix(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	seq := []struct {
		sys  llm.Message
		user string
	}{
		{bank, "set up direct deposit for me"},
		{travel, "book a flight to boston for friday"},
		{bank, "how do i set up direct deposit"},
		{travel, "book me a flight to denver on monday"},
		{bank, "i want to switch to direct deposit"},
	}
	var preds []Prediction
	for _, s := range seq {
		msgs, fp := req(s.sys, s.user)
		preds, _ = m.Observe(clk.t, "t1", &fp, msgs, 2)
		clk.t = clk.t.Add(time.Second)
	}
	// After bank comes travel, every time.
	if len(preds) != 1 || preds[0].Probability != 1 || len(preds[0].Prefix) != 1 || !preds[0].Prefix[0].Equal(travel) {
		t.Fatalf("predictions %+v, want travel's system prompt", preds)
	}
	st := m.Stats()
	if st.Hits != 2 || st.Misses != 2 {
		t.Fatalf("stats %+v: want the last two arrivals predicted, the two before not", st)
	}
	// Another tenant's history is its own.
	msgs, fp := req(bank, "set up direct deposit for me")
	if p, score := m.Observe(clk.t, "t2", &fp, msgs, 2); len(p) != 0 || score != Unscored {
		t.Fatalf("a new tenant got predictions %+v", p)
	}
}

func TestDecayFavoursTheRecentPattern(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	m, _ := New(Config{HalfLife: time.Minute, MinProbability: 0.01})
	observe := func(sys llm.Message, user string) []Prediction {
		msgs, fp := req(sys, user)
		p, _ := m.Observe(clk.t, "t", &fp, msgs, 3)
		clk.t = clk.t.Add(time.Second)
		return p
	}
	other := llm.Message{Role: "system", Content: "You are the car assistant. Climate and navigation."}
	for range 5 { // old habit: bank then travel
		observe(bank, "set up direct deposit for me")
		observe(travel, "book a flight to boston for friday")
	}
	clk.t = clk.t.Add(time.Hour) // sixty half-lives
	observe(bank, "set up direct deposit for me")
	observe(other, "turn the heat up")
	p := observe(bank, "set up direct deposit for me")
	if len(p) == 0 || !p[0].Prefix[0].Equal(other) {
		t.Fatalf("predictions %+v: the one recent transition should beat five stale ones", p)
	}
}

// TestEvictionKeepsTheChain: a new kind of request that evicts the least
// recently seen cluster still counts as the transition from the tenant's
// last request.
func TestEvictionKeepsTheChain(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	m, _ := New(Config{MaxClusters: 2})
	car := llm.Message{Role: "system", Content: "You are the car assistant. Climate and navigation."}
	var p []Prediction
	for _, k := range []struct {
		sys  llm.Message
		user string
	}{{bank, "set up direct deposit for me"}, {travel, "book a flight to boston for friday"}, {car, "turn the heat up"}, {travel, "book a flight to denver"}} {
		msgs, fp := req(k.sys, k.user)
		p, _ = m.Observe(clk.t, "t", &fp, msgs, 2)
		clk.t = clk.t.Add(time.Second)
	}
	// car evicted bank; travel → car was counted all the same.
	if len(p) != 1 || !p[0].Prefix[0].Equal(car) {
		t.Fatalf("predictions %+v, want car's system prompt after travel", p)
	}
}

func TestHintBudgets(t *testing.T) {
	var prev int
	for _, h := range []Hint{None, Low, Medium, High} {
		n, load := h.Budget()
		if n < prev || (h == None) != (n == 0 && load == 0) {
			t.Fatalf("%s: %d clusters, load %v", h, n, load)
		}
		prev = n
	}
	if n, _ := Hint("").Budget(); n != 2 {
		t.Fatal("the default is not medium")
	}
}
