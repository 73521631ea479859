package cloudmodel

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
	if params < 1_000_000 {
		t.Errorf("%d weights: the cloud model should be the larger one", params)
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
// generation, how often the model answers a held-out request well: a reply of
// the right kind for in-car requests (its intent's template, any slot
// values), and a reply that names the topic for "tell me about X" questions.
func TestHeldOutReplies(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	e, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	split, err := corpus.Cloud(1) // the seed the shipped model was trained with
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
	var right, wikiRight, wiki int
	for i, ex := range picked {
		if ex.Intent == "wiki" {
			wiki++
			topic := ex.Prompt[strings.LastIndex(ex.Prompt, " ")+1:]
			if strings.Contains(strings.ToLower(replies[i]), strings.TrimSuffix(topic, "?")) {
				wikiRight++
			}
		} else if corpus.ReplyMatches(ex.Intent, replies[i]) {
			right++
		}
	}
	acc := float64(right) / float64(len(picked)-wiki)
	topicRate := float64(wikiRight) / float64(max(wiki, 1))
	// Reported, not asserted: the shipped cloud run is too short to beat
	// chance here (docs/models.md); the loss check below is what it does learn.
	t.Logf("held-out in-car reply accuracy %.1f%% (%d of %d); wiki replies naming the topic %.1f%% (%d of %d)", 100*acc, right, len(picked)-wiki, 100*topicRate, wikiRight, wiki)

	// Held-out reply loss through the engine, on a few examples: far below
	// the 5.55 nats of a uniform guess over 258 tokens, and near what
	// training measured (phaseless.eval.val_loss), so the F16 file is the
	// model that was trained.
	var sum float64
	var n int
	for _, ex := range picked[:8] {
		ids := m.ChatTokens([]llm.Message{{Role: "user", Content: ex.Prompt}})
		for _, b := range []byte(ex.Answer + "\n" + llm.TurnEnd) {
			lg := m.Logits(ids)
			mx := lg[0]
			for _, v := range lg {
				mx = max(mx, v)
			}
			var z float64
			for _, v := range lg {
				z += math.Exp(float64(v - mx))
			}
			sum += float64(mx) + math.Log(z) - float64(lg[b])
			n++
			ids = append(ids, int32(b))
		}
	}
	loss := sum / float64(n)
	want, _ := m.Meta["phaseless.eval.val_loss"].(float32)
	t.Logf("held-out reply loss through the engine %.3f nats/byte over %d bytes (training measured %.3f)", loss, n, want)
	if loss > 2 || math.Abs(loss-float64(want)) > 0.5 {
		t.Errorf("held-out reply loss %.3f nats/byte; training measured %.3f", loss, want)
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
