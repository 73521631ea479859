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

// TestToolRuleReadsTheSchema: on a tool set of its own, the tool rule
// reads what an argument is called ("percent"), "%" as that word, numbers
// only as whole words (the digits of "9:15" are no brightness), and a
// function word of a tool's name ("on") only beside a content word that
// names the tool; the argument rule does not run a value across a comma,
// nor take the verb that opens the clause after it. Each case failed
// before (issue 28's smart-home misses, in other words).
func TestToolRuleReadsTheSchema(t *testing.T) {
	tools := []llm.Tool{
		{Name: "fan_on", Description: "Start the ceiling fan.", Parameters: []byte(`{"type":"object","properties":{"room":{"type":"string"}}}`)},
		{Name: "set_speed", Description: "Change how fast the ceiling fan spins.", Parameters: []byte(`{"type":"object","properties":{"room":{"type":"string"},"percent":{"type":"integer","minimum":0,"maximum":100}}}`)},
		{Name: "set_reminder", Description: "Create a reminder.", Parameters: []byte(`{"type":"object","properties":{"at":{"type":"string","description":"Clock time, e.g. 9:15"}}}`)},
		{Name: "add_to_cart", Description: "Add a product to the cart.", Parameters: []byte(`{"type":"object","properties":{"product":{"type":"string"}}}`)},
	}
	e := &Engine{m: &Model{}}
	rule := func(text string) *argRule {
		return e.argRuleFor(&llm.Request{Messages: []llm.Message{{Role: "user", Content: text}}, ToolRequest: llm.ToolRequest{Tools: tools}})
	}
	for text, want := range map[string]string{
		"den fan at 30%":           "set_speed",
		"den fan to 30 percent":    "set_speed",
		"remind me at 9:15":        "set_reminder",
		"start the fan in the den": "fan_on",
	} {
		r := rule(text)
		for _, tl := range tools {
			if tl.Name != want && r.toolScore(r.tools[tl.Name]) >= r.toolScore(r.tools[want]) {
				t.Errorf("%q: %s scores %v, %s %v", text, tl.Name, r.toolScore(r.tools[tl.Name]), want, r.toolScore(r.tools[want]))
			}
		}
	}
	if r := rule("put on some music"); r.toolScore(r.tools["fan_on"]) != 0 {
		t.Errorf(`"on" alone names fan_on: %v`, r.toolScore(r.tools["fan_on"]))
	}
	r := rule("we ran out of rice, put it in the cart")
	spans := []string{"rice", "rice, put", "put", "put it", "cart"}
	scores := make([]float64, len(spans))
	for i, sp := range spans {
		scores[i] = r.score(r.tools["add_to_cart"], "product", sp, nil)
	}
	if got := spans[slices.Index(scores, slices.Max(scores))]; got != "rice" {
		t.Errorf("product: %q ranks first (%v), want rice", got, scores)
	}
}
