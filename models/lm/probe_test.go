package lm

import (
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phaseless/phaseless/llm"
)

// refProbe computes a Probe the slow way, with Model.Logits for every
// prefix: the definition ProbeChats must match.
func refProbe(m *Model, ids []int32, steps int) (nll float64, ent []float64, greedy []int32) {
	for j := 1; j < len(ids); j++ {
		lg := m.Logits(ids[:j])
		nll += logSumExp(lg) - float64(lg[ids[j]])
	}
	nll /= float64(len(ids) - 1)
	toks := slices.Clone(ids)
	for range steps {
		lg := m.Logits(toks)
		var p Probe
		tok := p.step(lg)
		ent = append(ent, p.Entropy[0])
		toks = append(toks, tok)
		greedy = append(greedy, tok)
	}
	return nll, ent, greedy
}

func TestProbeMatchesLogitsReference(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 5, false)
	texts := []string{"navigate home", "what is the capital of France", "把温度调到二十一度", "x"}
	const steps = 4
	got := m.ProbeChats(texts, steps, 0, 2)
	for i, text := range texts {
		ids := m.ChatTokens([]llm.Message{{Role: "user", Content: text}})
		nll, ent, _ := refProbe(m, ids, steps)
		if math.Abs(got[i].PromptNLL-nll) > 1e-4 {
			t.Errorf("%q: prompt NLL %v, reference %v", text, got[i].PromptNLL, nll)
		}
		if len(got[i].Entropy) != steps || len(got[i].TopProb) != steps {
			t.Fatalf("%q: %d entropies, %d top probabilities, want %d", text, len(got[i].Entropy), len(got[i].TopProb), steps)
		}
		for s := range steps {
			if math.Abs(got[i].Entropy[s]-ent[s]) > 1e-4 {
				t.Errorf("%q step %d: entropy %v, reference %v", text, s, got[i].Entropy[s], ent[s])
			}
			if got[i].Entropy[s] < 0 || got[i].Entropy[s] > math.Log(float64(m.Config.Vocab))+1e-9 {
				t.Errorf("%q step %d: entropy %v outside [0, ln V]", text, s, got[i].Entropy[s])
			}
		}
		// Alone or in a batch: the same numbers.
		one := m.ProbeChat(text, steps, 0, 1)
		if math.Abs(one.PromptNLL-got[i].PromptNLL) > 1e-5 || math.Abs(one.Entropy[steps-1]-got[i].Entropy[steps-1]) > 1e-5 {
			t.Errorf("%q: alone %+v, batched %+v", text, one, got[i])
		}
	}
}

func TestProbeFitsLongPromptsInContext(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 5, false)
	long := strings.Repeat("é tell me everything ", 40) // 840 bytes, far past 256 tokens
	p := m.ProbeChat(long, 8, 0, 1)
	if !p.Truncated || len(p.Entropy) != 8 {
		t.Fatalf("truncated %v, %d steps", p.Truncated, len(p.Entropy))
	}
	// A bound cuts to it: the probe of the long text equals that of its
	// start that fits.
	b := m.ProbeChat(long, 2, 64, 1)
	ids := m.ChatTokens([]llm.Message{{Role: "user", Content: long}})
	if !b.Truncated || len(ids) <= 64 {
		t.Fatal("not truncated to the bound")
	}
	var fit string
	for n := len(long); n > 0; n-- {
		if len(m.ChatTokens([]llm.Message{{Role: "user", Content: long[:n]}})) <= 64 && utf8.ValidString(long[:n]) {
			fit = long[:n]
			break
		}
	}
	if f := m.ProbeChat(fit, 2, 0, 1); math.Abs(f.PromptNLL-b.PromptNLL) > 1e-6 {
		t.Errorf("bounded probe NLL %v, probe of the fitting prefix %v", b.PromptNLL, f.PromptNLL)
	}
	if math.IsNaN(p.PromptNLL) || p.PromptNLL <= 0 {
		t.Fatalf("prompt NLL %v", p.PromptNLL)
	}
	if s := m.ProbeChat("short", 8, 0, 1); s.Truncated {
		t.Fatal("a short prompt was truncated")
	}
}
