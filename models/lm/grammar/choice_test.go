package grammar

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestCopiedSpansMatchWordGraph: the spans a copied string lists one by one
// (a choice point) are exactly the strings of the compact word graph used
// for long sources, on random texts of words, punctuation and spaces.
func TestCopiedSpansMatchWordGraph(t *testing.T) {
	words := []string{"to", "San", "José,", "St.", "Louis!", "ok.", "the", "airport", ",", "a", "b?", "x:y", " "}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var parts []string
		for range 1 + rng.IntN(7) {
			parts = append(parts, words[rng.IntN(len(words))])
		}
		text := strings.Join(parts, " ")
		build := func(list bool) *Grammar {
			g, err := compileCopying(text, nil, func(c *compiler) []elem {
				if list {
					return c.copiedSpans(0, false)
				}
				return c.copiedWordGraph(0, false)
			})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		spans, graph := build(true), build(false)
		for i := 0; i <= len(text); i++ {
			for j := i; j <= len(text); j++ {
				v := []byte(`"` + text[i:j] + `"`)
				if a, b := spans.Match(v), graph.Match(v); a != b {
					t.Fatalf("text %q: %s matched %v as spans, %v as a word graph", text, v, a, b)
				}
			}
		}
	}
}

func choiceTexts(cs []Choice) []string {
	var out []string
	for _, c := range cs {
		out = append(out, string(c.Text))
	}
	return out
}

// TestChoicePoints walks a tool call through its choice points: call or
// prose, the tool's name, a copied integer, a copied span, an enum.
func TestChoicePoints(t *testing.T) {
	f := CallFormat{Open: "<tool_call>", Close: "</tool_call>", Sep: "\n"}
	tools := []Tool{
		{Name: "set_fan_speed", Schema: []byte(`{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":30,"x-phaseless-copy":true}},"required":["level"]}`)},
		{Name: "navigate_to", Schema: []byte(`{"type":"object","properties":{"destination":{"type":"string","maxLength":40,"x-phaseless-copy":true}},"required":["destination"]}`)},
		{Name: "set_window", Schema: []byte(`{"type":"object","properties":{"window":{"type":"string","enum":["driver","all"]}},"required":["window"]}`)},
	}
	g, err := ToolCalls(f, tools, ToolCallOptions{Prose: true, CopyFrom: "fan to 2 or 21, then San Jose"})
	if err != nil {
		t.Fatal(err)
	}
	cs, ok := g.Start().Choices()
	if !ok || len(cs) != 2 || string(cs[0].Text) != `<tool_call>{"name":` || !cs[1].Open() {
		t.Fatalf("start: choices %q (%v), want the call's opening and prose", choiceTexts(cs), ok)
	}
	if !cs[1].Start().Accepting() || cs[1].Start().Allows('<') && !cs[1].Start().Allows('x') {
		t.Errorf("the prose alternative does not continue as prose")
	}
	if st, _ := cs[1].Start().AdvanceBytes([]byte("<tool_call>")); !st.Dead() {
		t.Errorf("the prose alternative allows the call markup")
	}
	names, ok := cs[0].After().Choices()
	want := []string{`"set_fan_speed","arguments":{`, `"navigate_to","arguments":{`, `"set_window","arguments":{`}
	if !ok || !slices.Equal(choiceTexts(names), want) {
		t.Fatalf("names: %q (%v), want %q", choiceTexts(names), ok, want)
	}
	// set_fan_speed: `"level":` is forced, then the numbers of the text.
	s, ok := names[0].After().AdvanceBytes([]byte(`"level":`))
	if !ok {
		t.Fatal("level key refused")
	}
	nums, ok := s.Choices()
	if !ok || !slices.Equal(choiceTexts(nums), []string{"2", "21"}) {
		t.Fatalf("numbers: %q (%v)", choiceTexts(nums), ok)
	}
	if a := nums[0].After(); a.Allows('1') || !a.Allows('}') {
		t.Errorf(`after choosing "2": '1' allowed %v, '}' allowed %v`, a.Allows('1'), a.Allows('}'))
	}
	// navigate_to: the spans of the text after the opening quote.
	s, _ = names[1].After().AdvanceBytes([]byte(`"destination":"`))
	spans, ok := s.Choices()
	if !ok || !slices.Contains(choiceTexts(spans), "San Jose") || !slices.Contains(choiceTexts(spans), "San") || slices.Contains(choiceTexts(spans), "21,") {
		t.Fatalf("spans: %q (%v)", choiceTexts(spans), ok)
	}
	for _, c := range spans {
		if a := c.After(); !a.Allows('"') || a.Allows(' ') {
			t.Errorf("after span %q: the closing quote allowed %v, a space %v", c.Text, a.Allows('"'), a.Allows(' '))
		}
	}
	// set_window: the enum's values.
	s, _ = names[2].After().AdvanceBytes([]byte(`"window":`))
	if vals, ok := s.Choices(); !ok || !slices.Equal(choiceTexts(vals), []string{`"driver"`, `"all"`}) {
		t.Fatalf("enum: %q (%v)", choiceTexts(vals), ok)
	}
	// Inside prose nothing is a choice point.
	if st, _ := g.Start().AdvanceBytes([]byte("Sure")); func() bool { _, ok := st.Choices(); return ok }() {
		t.Errorf("prose text is a choice point")
	}
}

// TestCopiedSpansBounded: a copy source of few but long words is not
// listed span by span (31 words of 2,000 letters make 496 spans, 10 MB of
// grammar, which a 4 MiB request could raise to tens of GB); ordinary text
// of the same word count still is.
func TestCopiedSpansBounded(t *testing.T) {
	listed := func(words []string) bool {
		var spans []elem
		if _, err := compileCopying(strings.Join(words, " "), nil, func(c *compiler) []elem {
			spans = c.copiedSpans(0, false)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return spans != nil
	}
	var long, short []string
	for i := range 31 {
		long = append(long, strings.Repeat(string(rune('a'+i%26)), 2000))
		short = append(short, fmt.Sprintf("word%d", i))
	}
	if listed(long) {
		t.Fatal("31 words of 2,000 letters listed as spans")
	}
	if !listed(short) {
		t.Fatal("31 short words not listed as spans")
	}
}
