package lm

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/grammar"
)

// wholeScore computes, on a fresh KV store, what choice decoding scores an
// alternative written right after prompt: the mean over its tokens and the
// token after it of their log-probabilities, the token after counting as
// the probability mass of every token the grammar allows there.
func wholeScore(m *Model, prompt []int32, alt []byte, after grammar.State) float64 {
	toks := m.tok.Tokenize(string(alt), false)
	all := slices.Concat(prompt, toks)
	b := &batch{}
	slots := make([]int32, len(all))
	for p, id := range all {
		slots[p] = int32(p)
		b.tokens = append(b.tokens, id)
		b.pos = append(b.pos, int32(p))
		b.seq = append(b.seq, 0)
	}
	b.slots = [][]int32{slots}
	for p := len(prompt) - 1; p < len(all); p++ {
		b.logits = append(b.logits, int32(p))
	}
	V := m.Config.Vocab
	out := make([]float32, len(b.logits)*V)
	m.forward(newWorkspace(1), b, newKVStore(m.Config, len(all)), out)
	var sum float64
	for j, id := range toks {
		sum += logSoftmax(out[j*V:(j+1)*V], nil)[id]
	}
	vi := m.vocabIndex()
	allow := make([]bool, vi.Trie.Vocab())
	vi.Trie.Mask(after, allow)
	if after.Accepting() {
		for _, id := range vi.EOG {
			allow[id] = true
		}
	}
	last := logSoftmax(out[len(toks)*V:], nil)
	mass := 0.0
	for id, ok := range allow {
		if ok {
			mass += math.Exp(last[id])
		}
	}
	return (sum + math.Log(mass)) / float64(len(toks)+1)
}

// TestChoiceDecodingWritesBestAlternative: at an enum whose values share
// prefixes, the engine writes the value whose whole-alternative score,
// computed here independently of the engine's forks, is the highest, for
// several random models and at temperature 0 and 1; byte-by-byte decoding (ByteChoices) still writes
// a valid value.
func TestChoiceDecodingWritesBestAlternative(t *testing.T) {
	schema := json.RawMessage(`{"type":"string","enum":["set_a","set_abc","sex","other value","s"]}`)
	vals := []string{`"set_a"`, `"set_abc"`, `"sex"`, `"other value"`, `"s"`}
	picked := map[string]bool{}
	for seed := range uint64(6) {
		m, _ := buildModel(t, tinyConfig(), F32, 40+seed, false)
		e := newEngine(t, m, EngineConfig{})
		eb := newEngine(t, m, EngineConfig{ByteChoices: true})
		req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "pick one"}}, MaxTokens: 40,
			ToolRequest: llm.ToolRequest{ResponseFormat: llm.ResponseFormat{Type: llm.FormatJSONSchema, Schema: schema}}}
		prompt, opt, err := e.chatRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		best, bestScore, second := "", math.Inf(-1), math.Inf(-1)
		for _, v := range vals {
			after, ok := opt.grammar.Start().AdvanceBytes([]byte(v))
			if !ok {
				t.Fatalf("%s refused", v)
			}
			s := wholeScore(m, prompt, []byte(v), after)
			switch {
			case s > bestScore:
				best, bestScore, second = v, s, bestScore
			case s > second:
				second = s
			}
		}
		if bestScore-second < 1e-6 {
			continue // a tie within float rounding: either answer is right
		}
		c, _ := run(t, e, req)
		if got := strings.TrimSpace(c.text); got != best {
			t.Errorf("seed %d: wrote %q, the best-scored alternative is %s", seed, got, best)
		}
		// The same at temperature 1: a choice point is decided, not
		// drawn, whatever the request's temperature (docs/tools.md).
		for draw := range uint64(4) {
			hot := *req
			hot.Temperature, hot.Seed = 1, draw+1
			if c, _ := run(t, e, &hot); strings.TrimSpace(c.text) != best {
				t.Errorf("seed %d at temperature 1, draw %d: wrote %q, the best-scored alternative is %s", seed, draw, c.text, best)
			}
		}
		picked[best] = true
		cb, _ := run(t, eb, req)
		if !slices.Contains(vals, strings.TrimSpace(cb.text)) {
			t.Errorf("seed %d: byte by byte wrote %q", seed, cb.text)
		}
	}
	t.Logf("best alternatives over the seeds: %v", picked)
}

// TestChoiceDecodingKeepsCacheBlocks: the scratch blocks the forks take
// are all returned, so choice decoding does not leak KV memory.
func TestChoiceDecodingKeepsCacheBlocks(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 4, false)
	e := newEngine(t, m, EngineConfig{})
	for seed := range uint64(4) {
		req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "set the fan to 3 or 4 and open the driver window"}}, MaxTokens: 120,
			Temperature: 1, Seed: seed + 1, ToolRequest: llm.ToolRequest{Tools: testTools}}
		run(t, e, req)
	}
	if st := e.Stats(); st.KVBlocksUsed != 0 {
		t.Errorf("%d blocks held after every request ended", st.KVBlocksUsed)
	}
}

// TestChoiceKeepsScoredKV: a chosen alternative's keys and values are kept
// from its scoring rather than computed again, and what the engine writes
// after it is the same, token for token, as when they are recomputed (sampled
// at temperature 1, so any difference in them would change the draws),
// for fewer prompt tokens run.
func TestChoiceKeepsScoredKV(t *testing.T) {
	for seed := range uint64(4) {
		m, _ := buildModel(t, tinyConfig(), F32, 60+seed, false)
		kept := newEngine(t, m, EngineConfig{})
		again := newEngine(t, m, EngineConfig{recomputeChosen: true})
		req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "set the fan to 3 and open the driver window"}}, MaxTokens: 120,
			Temperature: 1, Seed: seed + 1, ToolRequest: llm.ToolRequest{Tools: testTools, ToolChoice: llm.ToolChoice{Mode: llm.ToolRequired}}}
		a, _ := run(t, kept, req)
		b, _ := run(t, again, req)
		for i := range a.calls { // call ids are random
			a.calls[i].ID = ""
		}
		for i := range b.calls {
			b.calls[i].ID = ""
		}
		if a.text != b.text || !reflect.DeepEqual(a.calls, b.calls) {
			t.Fatalf("seed %d: kept KV wrote %q %v, recomputed %q %v", seed, a.text, a.calls, b.text, b.calls)
		}
		ka, kb := kept.Stats(), again.Stats()
		if ka.PrefillTokens >= kb.PrefillTokens || ka.ChoiceTokens != kb.ChoiceTokens || ka.KVBlocksUsed != 0 {
			t.Fatalf("seed %d: prompt tokens run %d kept against %d recomputed (choice tokens %d, %d), %d blocks held",
				seed, ka.PrefillTokens, kb.PrefillTokens, ka.ChoiceTokens, kb.ChoiceTokens, ka.KVBlocksUsed)
		}
	}
}
