package corpus

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/intents"
)

func TestEdgeSplitIsDisjointAndFilled(t *testing.T) {
	s, err := Edge(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Train) < 5000 || len(s.Test) < 1000 {
		t.Fatalf("train %d, test %d examples: too few", len(s.Train), len(s.Test))
	}
	train := map[string]bool{}
	for _, e := range s.Train {
		train[e.Prompt] = true
	}
	leaks := 0
	for _, e := range s.Test {
		if e.Intent == "incar" && train[e.Prompt] {
			t.Errorf("held-out in-car prompt %q is also trained on", e.Prompt)
		}
		if train[e.Prompt] {
			leaks++
		}
	}
	for _, e := range append(s.Train, s.Test...) {
		if strings.Contains(e.Answer, "{") || strings.Contains(e.Prompt, "{") {
			t.Fatalf("unfilled slot in %+v", e)
		}
		if strings.Contains(e.Answer, "<|") {
			t.Fatalf("reply contains the turn end: %+v", e)
		}
	}
	t.Logf("train %d, test %d; %d test prompts also in CLINC150 train (duplicates in the source)", len(s.Train), len(s.Test), leaks)
	again, _ := Edge(1)
	if again.Train[17] != s.Train[17] || again.Test[3] != s.Test[3] {
		t.Fatal("same seed gave a different corpus")
	}
}

func TestSlotsEchoFromRequestToReply(t *testing.T) {
	s, _ := Edge(2)
	n := 0
	for _, e := range s.Train {
		if strings.HasPrefix(e.Prompt, "navigate to ") && strings.Contains(e.Answer, "navigation to") {
			place := strings.TrimPrefix(e.Prompt, "navigate to ")
			if !strings.Contains(e.Answer, place) {
				t.Fatalf("reply %q does not echo %q", e.Answer, place)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no navigation examples")
	}
}

func TestCalculatorComputes(t *testing.T) {
	for in, want := range map[string]string{"what is 2+2": "The answer is 4.", "what's 10 times 3": "The answer is 30.", "7 divided by 2": "The answer is 3.5."} {
		if got, _ := calculatorAnswer(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestWikiTopicInPromptAndAnswer(t *testing.T) {
	s := Wiki(1)
	if len(s.Train) < 10000 || len(s.Test) < 300 {
		t.Fatalf("train %d test %d", len(s.Train), len(s.Test))
	}
	for _, e := range s.Train[:200] {
		w := topic(strings.ToLower(strings.TrimSuffix(e.Answer, ".")))
		if !strings.Contains(e.Prompt, w) {
			t.Fatalf("prompt %q does not name topic %q", e.Prompt, w)
		}
	}
}

// TestRepliesMatchTheirIntent: every reply the corpus writes has the form
// the grader expects of its intent (models/intents).
func TestRepliesMatchTheirIntent(t *testing.T) {
	s, _ := Edge(3)
	for _, e := range s.Test {
		if !intents.ReplyMatches(e.Intent, e.Answer) {
			t.Fatalf("reply %q does not match its own intent %s", e.Answer, e.Intent)
		}
	}
}

func TestFactsHoldOutWordingsNotFacts(t *testing.T) {
	s := Facts(1, 2)
	train := map[string]bool{}
	trainedFacts := map[string]bool{}
	for _, e := range s.Train {
		train[strings.ToLower(strings.TrimSuffix(e.Prompt, "?"))] = true
		trainedFacts[e.Intent+"|"+e.Answer] = true
	}
	if len(trainedFacts) != factCount() {
		t.Fatalf("%d facts trained, want all %d", len(trainedFacts), factCount())
	}
	if len(s.Test) < factCount()/2 {
		t.Fatalf("only %d held-out questions", len(s.Test))
	}
	for _, e := range s.Test {
		if train[strings.ToLower(strings.TrimSuffix(e.Prompt, "?"))] {
			t.Errorf("held-out question %q is also trained on", e.Prompt)
		}
		if !trainedFacts[e.Intent+"|"+e.Answer] {
			t.Errorf("held-out question %q asks a fact never trained on", e.Prompt)
		}
		y, ok := FactAnswer(e.Intent)
		if !ok || !strings.Contains(strings.ToLower(e.Answer), strings.ToLower(y)) {
			t.Errorf("%q: reply %q does not hold the answer %q", e.Prompt, e.Answer, y)
		}
		if strings.ContainsAny(e.Prompt+e.Answer, "{}") {
			t.Errorf("unfilled slot in %+v", e)
		}
	}
	if _, ok := FactAnswer("weather"); ok {
		t.Error("a CLINC intent taken for a fact")
	}
}

func TestCloudMixesFactsAndCarRequests(t *testing.T) {
	s, err := Cloud(1)
	if err != nil {
		t.Fatal(err)
	}
	var facts int
	for _, e := range s.Train {
		if _, ok := FactAnswer(e.Intent); ok {
			facts++
		}
	}
	if share := float64(facts) / float64(len(s.Train)); share < 0.5 || share > 0.7 {
		t.Errorf("facts are %.0f%% of the cloud corpus, want about 60%%", 100*share)
	}
}

func TestCalculatorValue(t *testing.T) {
	if v, ok := CalculatorValue("what is 17 times 23"); !ok || v != 391 {
		t.Fatalf("calculator %v %v", v, ok)
	}
	if _, ok := CalculatorValue("how are you"); ok {
		t.Fatal("not arithmetic")
	}
}

// TestToolPromptsFromTemplates checks that FromToolTemplate recognises
// every tool-call prompt the corpus trains on, leads, tails and capitals
// included, so an evaluation set it passes shares no wording with training.
func TestToolPromptsFromTemplates(t *testing.T) {
	s, err := EdgeToolsTune(2)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range s.Train {
		if !strings.HasPrefix(e.Intent, "tool-") {
			continue
		}
		// Every fifth keeps the test quick (each pattern is tried on
		// each prompt); each template still comes up many times.
		if n++; n%5 != 0 {
			continue
		}
		if !FromToolTemplate(e.Prompt) {
			t.Errorf("training prompt %q is not recognised as a template's wording", e.Prompt)
		}
	}
	if n < 3000 {
		t.Errorf("%d tool-call training prompts, want the corpus's thousands", n)
	}
	for req, want := range map[string]bool{"hey car, set the fan to 3 thanks": true, "Set the fan to 3": true, "the fan is loud, make it quieter": false} {
		if FromToolTemplate(req) != want {
			t.Errorf("FromToolTemplate(%q) = %v", req, !want)
		}
	}
}
