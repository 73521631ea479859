// Package shippedtest holds the checks that the tests of every shipped
// language model (models/edgemodel, models/cloudmodel) run alike: shape and
// provenance, and replies to held-out requests through the real engine.
package shippedtest

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lmtrain"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
)

// CheckShapeAndProvenance checks that m is a byte-level model named name
// whose metadata records how it was trained, and that any UTF-8 (Chinese
// included) gives finite logits. It returns the model's weight count.
func CheckShapeAndProvenance(t *testing.T, m *lm.Model, name string) int {
	t.Helper()
	c := m.Config
	params := 2*c.Vocab*c.Dim + c.Dim + c.Layers*(2*c.Dim+2*c.Dim*c.Heads*c.HeadDim()+2*c.Dim*c.KVHeads*c.HeadDim()+3*c.Dim*c.FFN)
	if spec := m.TokenizerSpec(); !spec.IsByteVocab() {
		t.Errorf("tokenizer %q, want byte-level", spec.Model)
	}
	if m.Meta["general.name"] != name {
		t.Errorf("general.name %v, want %s", m.Meta["general.name"], name)
	}
	for _, k := range []string{"phaseless.train.config", "phaseless.train.command", "phaseless.data.sources", "phaseless.eval.val_loss"} {
		if _, ok := m.Meta[k]; !ok {
			t.Errorf("metadata lacks %s", k)
		}
	}
	// The sampling the presets declare (lmtrain.ShippedSampling), which
	// `phaselessctl lm sampling` wrote into the files trained before it.
	got, _ := json.Marshal(m.Sampling())
	want, _ := json.Marshal(lmtrain.ShippedSampling())
	if string(got) != string(want) {
		t.Errorf("declared sampling %s, want %s", got, want)
	}
	ids := append([]int32{m.Tokenizer().BOS()}, m.Tokenizer().Encode("把温度调到二十一度")...)
	if err := m.ValidateTokens(ids); err != nil {
		t.Fatal(err)
	}
	for _, v := range m.Logits(ids) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logit")
		}
	}
	return params
}

// HeldOutReplies picks about n evenly spaced held-out examples and returns
// them with m's replies, generated through the engine's batched path (16 at
// a time, seeded) exactly as a user would get them.
func HeldOutReplies(t *testing.T, m *lm.Model, test []corpus.Example, n int) ([]corpus.Example, []string) {
	t.Helper()
	e, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	step := max(1, len(test)/n)
	var picked []corpus.Example
	for i := 0; i < len(test); i += step {
		picked = append(picked, test[i])
	}
	replies := make([]string, len(picked))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, ex := range picked {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var b strings.Builder
			req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: ex.Prompt}}, MaxTokens: 100, Seed: 1}
			if _, err := e.Generate(context.Background(), req, func(tk llm.Token) error { b.WriteString(tk.Text); return nil }); err != nil {
				t.Error(err)
			}
			replies[i] = b.String()
		}()
	}
	wg.Wait()
	return picked, replies
}

// CheckRepliesEndTheirTurn checks that m answers each prompt with a
// non-empty reply that ends at the chat template's turn end (finish "stop"),
// as the agent expects; and that the same reply cut by max_tokens one token
// into the turn-end marker ends with the reply's text, not with the part
// of the marker it wrote (issue 28: "…in Paris.\n<").
func CheckRepliesEndTheirTurn(t *testing.T, m *lm.Model, prompts []string) {
	t.Helper()
	e, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gen := func(q string, maxTokens int) (string, llm.Final) {
		var b strings.Builder
		fin, err := e.Generate(context.Background(), &llm.Request{Messages: []llm.Message{{Role: "user", Content: q}}, MaxTokens: maxTokens, Seed: 1},
			func(tk llm.Token) error { b.WriteString(tk.Text); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), fin
	}
	for _, q := range prompts {
		reply, fin := gen(q, 120)
		t.Logf("%q → %q", q, reply)
		if fin.FinishReason != "stop" || strings.TrimSpace(reply) == "" {
			t.Errorf("%q: finish %q after %q", q, fin.FinishReason, reply)
			continue
		}
		// The marker "<|" is the last two tokens of a byte-level model's
		// stopped reply: cut after the first.
		cut, cfin := gen(q, fin.CompletionTokens-1)
		if cut != reply || cfin.FinishReason != "length" {
			t.Errorf("%q cut at %d tokens: %q finish %q, want %q finish length", q, fin.CompletionTokens-1, cut, cfin.FinishReason, reply)
		}
	}
}
