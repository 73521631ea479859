package edgemodel

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/transport/llm"
)

func TestShippedModelShapeAndProvenance(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	params := 2*c.Vocab*c.Dim + c.Dim + c.Layers*(2*c.Dim+2*c.Dim*c.Heads*c.HeadDim()+2*c.Dim*c.KVHeads*c.HeadDim()+3*c.Dim*c.FFN)
	if params > 2_000_000 {
		t.Errorf("%d weights, over the edge budget of 2M", params)
	}
	if spec := m.TokenizerSpec(); spec.Model != lm.TokenizerByte {
		t.Errorf("tokenizer %q, want byte-level", spec.Model)
	}
	if m.Meta["general.name"] != Name {
		t.Errorf("general.name %v, want %s", m.Meta["general.name"], Name)
	}
	for _, k := range []string{"phaseless.train.config", "phaseless.train.command", "phaseless.data.sources", "phaseless.eval.val_loss"} {
		if _, ok := m.Meta[k]; !ok {
			t.Errorf("metadata lacks %s", k)
		}
	}
	// Any UTF-8 is valid input for a byte vocabulary, Chinese included.
	ids := append([]int32{m.Tokenizer().BOS()}, m.Tokenizer().Encode("把温度调到二十一度")...)
	if err := m.ValidateTokens(ids); err != nil {
		t.Fatal(err)
	}
	for _, v := range m.Logits(ids) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logit")
		}
	}
}

// TestHeldOutReplyAccuracy measures, through the engine's batched
// generation, how often the model answers a held-out request with a reply of
// the right kind (its intent's template, any slot values). Chance is about
// 1 in 85 (64 CLINC150 intents and 21 in-car groups).
func TestHeldOutReplyAccuracy(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	e, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	split, err := corpus.Edge(1) // the seed the shipped model was trained with
	if err != nil {
		t.Fatal(err)
	}
	test := split.Test
	step := max(1, len(test)/300)
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
	right := 0
	for i, ex := range picked {
		if corpus.ReplyMatches(ex.Intent, replies[i]) {
			right++
		}
	}
	acc := float64(right) / float64(len(picked))
	t.Logf("held-out reply accuracy %.1f%% (%d of %d)", 100*acc, right, len(picked))
	for i := range picked[:12] {
		t.Logf("  %s: %q → %q", picked[i].Intent, picked[i].Prompt, replies[i])
	}
	if acc < 0.10 {
		t.Errorf("held-out reply accuracy %.1f%% is near chance", 100*acc)
	}
}

// TestRepliesEndTheirTurn checks that replies are short sentences that end
// at the chat template's turn end (finish "stop"), as the agent expects.
func TestRepliesEndTheirTurn(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	e, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, q := range []string{"navigate to Denver", "set the temperature to 21 degrees", "play some jazz", "what time is it", "把温度调到二十一度"} {
		var b strings.Builder
		fin, err := e.Generate(context.Background(), &llm.Request{Messages: []llm.Message{{Role: "user", Content: q}}, MaxTokens: 120, Seed: 1},
			func(tk llm.Token) error { b.WriteString(tk.Text); return nil })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%q → %q", q, b.String())
		if fin.FinishReason != "stop" || strings.TrimSpace(b.String()) == "" {
			t.Errorf("%q: finish %q after %q", q, fin.FinishReason, b.String())
		}
	}
}
