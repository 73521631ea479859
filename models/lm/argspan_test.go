package lm

import (
	"slices"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/toolprior"
)

// TestArgRuleRanksSpans: the tool rule picks the tool a request's words
// name, and the argument rule, on a tool set of its own
// (none of the edge model's tools, none of the smart home's it was tuned
// on), ranks the span a person means first among the request's spans, and
// does not apply to tools the model's tool prior knows (its span head
// serves them).
func TestArgRuleRanksSpans(t *testing.T) {
	tools := []llm.Tool{
		{Name: "book_table", Description: "Reserve a table at a restaurant.", Parameters: []byte(`{"type":"object","properties":{"restaurant":{"type":"string"},"guests":{"type":"integer"}}}`)},
		{Name: "water_plants", Description: "Water the plants in a garden zone.", Parameters: []byte(`{"type":"object","properties":{"zone":{"type":"string","description":"e.g. front yard"}}}`)},
		{Name: "start_timer", Description: "Start a kitchen timer.", Parameters: []byte(`{"type":"object","properties":{"duration":{"type":"string","description":"e.g. 10:00"}}}`)},
	}
	e := &Engine{m: &Model{}}
	for _, c := range []struct {
		text, tool, key, want string
		spans                 []string
	}{
		{"book a table for 4 at Blue Harbor", "book_table", "restaurant", "Blue Harbor", []string{"book", "a table", "table", "4", "at Blue Harbor", "Blue", "Blue Harbor", "Harbor"}},
		{"water the plants in the back patio", "water_plants", "zone", "back patio", []string{"water", "the plants", "plants", "back", "back patio", "patio", "the back patio"}},
		{"start a timer for 12:30 please", "start_timer", "duration", "12:30", []string{"start", "timer", "12:30", "12:30 please", "please"}},
	} {
		r := e.argRuleFor(&llm.Request{Messages: []llm.Message{{Role: "user", Content: c.text}}, ToolRequest: llm.ToolRequest{Tools: tools}})
		if r == nil {
			t.Fatal("no rule for tools no prior knows")
		}
		scores := make([]float64, len(c.spans))
		for i, sp := range c.spans {
			scores[i] = r.score(r.tools[c.tool], c.key, sp, nil)
		}
		if got := c.spans[slices.Index(scores, slices.Max(scores))]; got != c.want {
			t.Errorf("%q: %s ranks %q first (%v), want %q", c.text, c.key, got, scores, c.want)
		}
	}
	known := &Engine{m: &Model{}, cfg: EngineConfig{ToolPrior: &toolprior.Prior{Labels: []string{"book_table", "water_plants", "start_timer", toolprior.Prose}}}}
	if known.argRuleFor(&llm.Request{Messages: []llm.Message{{Role: "user", Content: "book a table"}}, ToolRequest: llm.ToolRequest{Tools: tools}}) != nil {
		t.Error("the rule applies to tools the prior knows")
	}
	// The tool rule: each request's tool scores highest.
	for text, want := range map[string]string{
		"book a table for 4 at Blue Harbor":  "book_table",
		"water the plants in the back patio": "water_plants",
		"start a timer for 12:30 please":     "start_timer",
	} {
		r := e.argRuleFor(&llm.Request{Messages: []llm.Message{{Role: "user", Content: text}}, ToolRequest: llm.ToolRequest{Tools: tools}})
		for _, tl := range tools {
			if tl.Name != want && r.toolScore(r.tools[tl.Name]) >= r.toolScore(r.tools[want]) {
				t.Errorf("%q: %s scores %v, %s %v", text, tl.Name, r.toolScore(r.tools[tl.Name]), want, r.toolScore(r.tools[want]))
			}
		}
	}
	if r := e.argRuleFor(&llm.Request{Messages: []llm.Message{{Role: "user", Content: "how are you today"}}, ToolRequest: llm.ToolRequest{Tools: tools}}); r.toolScore(r.tools["book_table"]) != 0 {
		t.Error("small talk shares words with a tool")
	}
	// A value the call already holds is not copied again.
	r := e.argRuleFor(&llm.Request{Messages: []llm.Message{{Role: "user", Content: "book Luigi for two"}}, ToolRequest: llm.ToolRequest{Tools: tools}})
	if a, b := r.score(r.tools["book_table"], "restaurant", "Luigi", []string{"luigi"}), r.score(r.tools["book_table"], "restaurant", "Luigi", nil); a >= b {
		t.Errorf("a taken value scores %v, free %v", a, b)
	}
}
