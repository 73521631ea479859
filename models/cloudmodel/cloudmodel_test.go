package cloudmodel

import (
	"math"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/lmtrain/shippedtest"
	"github.com/phaseless/phaseless/transport/llm"
)

func TestShippedModelShapeAndProvenance(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	params := shippedtest.CheckShapeAndProvenance(t, m, Name)
	if params < 1_000_000 {
		t.Errorf("%d weights: the cloud model should be the larger one", params)
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
	split, err := corpus.Cloud(1) // the seed the shipped model was trained with
	if err != nil {
		t.Fatal(err)
	}
	picked, replies := shippedtest.HeldOutReplies(t, m, split.Test, 300)
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
	shippedtest.CheckRepliesEndTheirTurn(t, m, []string{"navigate to Denver", "set the temperature to 21 degrees", "play some jazz", "what time is it", "把温度调到二十一度"})
}
