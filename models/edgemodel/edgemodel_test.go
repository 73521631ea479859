package edgemodel

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/intents"
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
	if params > 2_000_000 {
		t.Errorf("%d weights, over the edge budget of 2M", params)
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
	split, err := corpus.Edge(1) // the seed the shipped model was trained with
	if err != nil {
		t.Fatal(err)
	}
	picked, replies := shippedtest.HeldOutReplies(t, m, split.Test, 300)
	right, calls := 0, 0
	for i, ex := range picked {
		if intents.ReplyMatches(ex.Intent, replies[i]) {
			right++
		}
		if strings.Contains(replies[i], chatfmt.ToolCallOpen) {
			calls++
		}
	}
	acc := float64(right) / float64(len(picked))
	t.Logf("held-out reply accuracy %.1f%% (%d of %d); replies that write a tool call although no tools were offered: %d", 100*acc, right, len(picked), calls)
	// Without the tools turn the model answers in prose: the tools stage
	// must not leak its call form into plain replies (measured: 1 of 318
	// after the 1,500-step stage, 0 for the shipped one).
	if calls > len(picked)/30 {
		t.Errorf("%d of %d plain replies write a tool call", calls, len(picked))
	}
	for i := range picked[:12] {
		t.Logf("  %s: %q → %q", picked[i].Intent, picked[i].Prompt, replies[i])
	}
	// The shipped model measured 67.6% (60.1% before its tools stage, 64.5%
	// after the 1,500-step one); the bound is well below it so that a
	// retrain on another machine passes and a broken model does not.
	if acc < 0.35 {
		t.Errorf("held-out reply accuracy %.1f%%, want at least 35%% (chance is about 1%%)", 100*acc)
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
