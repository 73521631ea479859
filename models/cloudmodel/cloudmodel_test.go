package cloudmodel

import (
	"math"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/intents"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/lmtrain/shippedtest"
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

// Bounds on the shipped model's held-out accuracy, well below what it
// measured (78.3% and 23.0%, docs/models.md) so that a retrain with the same
// preset on another machine passes, and a broken or random model does not.
const (
	minFactAccuracy = 0.6
	minCarAccuracy  = 0.1
)

// TestHeldOutReplies measures, through the engine's batched generation, how
// often the model answers a held-out request well: the exact answer for a
// fact asked in a wording it was not trained on (every held-out fact
// question), and a reply of the right kind for in-car requests (its intent's
// template, any slot values; about 300 of them). The edge model answers the
// same fact questions, to show the difference the cloud makes.
func TestHeldOutReplies(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	split, err := corpus.Cloud(1) // the seed the shipped model was trained with
	if err != nil {
		t.Fatal(err)
	}
	var factTest, carTest []corpus.Example
	for _, ex := range split.Test {
		if _, ok := corpus.FactAnswer(ex.Intent); ok {
			factTest = append(factTest, ex)
		} else {
			carTest = append(carTest, ex)
		}
	}
	factAcc, picked, replies := exactAnswers(t, m, factTest)
	t.Logf("held-out fact questions answered exactly: %.1f%% of %d", 100*factAcc, len(picked))
	for i := range picked[:12] {
		t.Logf("  %q → %q (want %q)", picked[i].Prompt, replies[i], picked[i].Answer)
	}
	edge, err := edgemodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	edgeAcc, _, edgeReplies := exactAnswers(t, edge, factTest)
	t.Logf("the edge model on the same questions: %.1f%% (e.g. %q → %q)", 100*edgeAcc, picked[0].Prompt, edgeReplies[0])
	if factAcc < minFactAccuracy || factAcc < edgeAcc+0.3 {
		t.Errorf("held-out facts answered exactly %.1f%% (edge model %.1f%%), want at least %.0f%% and well above the edge model",
			100*factAcc, 100*edgeAcc, 100*minFactAccuracy)
	}

	picked, replies = shippedtest.HeldOutReplies(t, m, carTest, 300)
	right := 0
	for i, ex := range picked {
		if intents.ReplyMatches(ex.Intent, replies[i]) {
			right++
		}
	}
	carAcc := float64(right) / float64(len(picked))
	t.Logf("held-out in-car replies of the right kind %.1f%% (%d of %d)", 100*carAcc, right, len(picked))
	if carAcc < minCarAccuracy {
		t.Errorf("held-out in-car reply accuracy %.1f%%, want at least %.0f%% (chance is about 1%%)", 100*carAcc, 100*minCarAccuracy)
	}

	// Held-out reply loss through the engine, on a few examples: far below
	// the 5.55 nats of a uniform guess over 258 tokens, and near what
	// training measured (phaseless.eval.val_loss), so the F16 file is the
	// model that was trained.
	var sum float64
	var n int
	for _, ex := range split.Test[:16] {
		ids := m.ChatTokens([]llm.Message{{Role: "user", Content: ex.Prompt}})
		for _, b := range []byte(ex.Answer + "\n" + chatfmt.TurnEnd) {
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

// exactAnswers generates m's replies to every example and returns the share
// that are exactly the expected answer.
func exactAnswers(t *testing.T, m *lm.Model, test []corpus.Example) (float64, []corpus.Example, []string) {
	t.Helper()
	picked, replies := shippedtest.HeldOutReplies(t, m, test, len(test))
	right := 0
	for i, ex := range picked {
		if strings.TrimSpace(replies[i]) == ex.Answer {
			right++
		}
	}
	return float64(right) / float64(len(picked)), picked, replies
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
