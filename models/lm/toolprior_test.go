package lm

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/toolprior"
)

// priorTools are two tools with a boolean and an enum the prior can fix.
var priorTools = []llm.Tool{
	{Name: "heat", Parameters: json.RawMessage(`{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"],"additionalProperties":false}`)},
	{Name: "window", Parameters: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["open","close"]}},"required":["action"],"additionalProperties":false}`)},
	{Name: "drive", Parameters: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","minLength":1,"maxLength":30,"x-phaseless-copy":true}},"required":["to"],"additionalProperties":false}`)},
}

// testPrior is a prior trained on a few requests for priorTools, weighted
// so heavily that it decides every point it knows.
func testPrior(t *testing.T) *toolprior.Prior {
	t.Helper()
	var ex []toolprior.Example
	for range 20 {
		ex = append(ex,
			toolprior.Example{Text: "heat on please", Label: `heat {"on":true}`},
			toolprior.Example{Text: "warm me up, heat", Label: `heat {"on":true}`},
			toolprior.Example{Text: "stop the heat", Label: `heat {"on":false}`},
			toolprior.Example{Text: "no more heat", Label: `heat {"on":false}`},
			toolprior.Example{Text: "open the window", Label: `window {"action":"open"}`},
			toolprior.Example{Text: "close the window", Label: `window {"action":"close"}`},
			toolprior.Example{Text: "drive to Paris", Label: "drive"},
			toolprior.Example{Text: "drive me over to New York please", Label: "drive"},
			toolprior.Example{Text: "hello how are you", Label: toolprior.Prose})
	}
	p, err := toolprior.Train(ex, toolprior.TrainConfig{Buckets: 256, Seed: 1, Weight: 1000})
	if err != nil {
		t.Fatal(err)
	}
	spans := []toolprior.SpanExample{{Text: "drive to Paris", Key: "to", Value: "Paris"}, {Text: "drive me over to New York please", Key: "to", Value: "New York"},
		{Text: "drive to Old Town now", Key: "to", Value: "Old Town"}}
	if err := p.TrainSpans(slices.Repeat(spans, 20), 128, 1000, toolprior.TrainConfig{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestToolPriorDecidesWhatItKnows runs a random-weight model, whose own
// choices are noise, with a dominant prior: each request gets the tool and
// the fixed argument the prior reads in it, at every seed. A request that
// offers a tool the prior was not trained on, or no prior (NoToolPrior),
// gets exactly the model's own reply.
func TestToolPriorDecidesWhatItKnows(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 7, false)
	prior := testPrior(t)
	with := newEngine(t, m, EngineConfig{ToolPrior: prior})
	without := newEngine(t, m, EngineConfig{ToolPrior: prior, NoToolPrior: true})
	want := map[string]llm.ToolCall{
		"please stop the heat now":   {Name: "heat", Arguments: `{"on":false}`},
		"heat on, i'm cold":          {Name: "heat", Arguments: `{"on":true}`},
		"could you close the window": {Name: "window", Arguments: `{"action":"close"}`},
		"open the window a bit":      {Name: "window", Arguments: `{"action":"open"}`},
		"please drive to Rome":       {Name: "drive", Arguments: `{"to":"Rome"}`},
	}
	req := func(text string, seed uint64, tools []llm.Tool) *llm.Request {
		return &llm.Request{Messages: []llm.Message{{Role: "user", Content: text}}, MaxTokens: 80, Temperature: 1, Seed: seed,
			ToolRequest: llm.ToolRequest{Tools: tools, ToolChoice: llm.ToolChoice{Mode: llm.ToolRequired, Single: true}}}
	}
	for text, w := range want {
		for seed := range uint64(4) {
			c, _ := run(t, with, req(text, seed+1, priorTools))
			if len(c.calls) != 1 || c.calls[0].Name != w.Name || c.calls[0].Arguments != w.Arguments {
				t.Errorf("%q seed %d: calls %+v, want %s%s", text, seed+1, c.calls, w.Name, w.Arguments)
			}
		}
	}
	// An unknown tool among those offered: the prior abstains, as if there
	// were none (the argument rule of argspan.go then decides either way).
	unknown := append(priorTools[:3:3], llm.Tool{Name: "radio", Parameters: json.RawMessage(`{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"],"additionalProperties":false}`)})
	for seed := range uint64(6) {
		a, _ := run(t, with, req("please stop the heat now", seed+1, unknown))
		b, _ := run(t, without, req("please stop the heat now", seed+1, unknown))
		if len(a.calls) != 1 || len(b.calls) != 1 || a.calls[0].Name != b.calls[0].Name || a.calls[0].Arguments != b.calls[0].Arguments {
			t.Fatalf("seed %d: an unknown tool offered, prior %+v, none %+v", seed+1, a.calls, b.calls)
		}
	}
}

func TestAltToolName(t *testing.T) {
	for text, want := range map[string]string{
		chatfmt.ToolCallOpen + `{"name":"set_fan_speed","arguments":`: "set_fan_speed",
		`"navigate_to","arguments":{"destination":`:                   "navigate_to",
		chatfmt.ToolCallOpen + `{"name":"a\"b","arguments":`:          `a"b`,
		`"set_fan_speed"`: "",
		`true`:            "",
		`"open"`:          "",
		chatfmt.ToolCallOpen + `{"name":"x","argumentsX":`: "",
	} {
		got, ok := altToolName([]byte(text))
		if got != want || ok != (want != "") {
			t.Errorf("altToolName(%q) = %q, %v; want %q", text, got, ok, want)
		}
	}
}

// TestToolPriorCallOrProse: at the call against prose, the call bias and
// the prior's probability of a call move the choice, and a prior with
// neither leaves it to the model. A random model's choice is noise, so
// the test sets the terms so large that they decide.
func TestToolPriorCallOrProse(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 7, false)
	base := testPrior(t)
	auto := func(e *Engine, text string, seed uint64) collected {
		c, _ := run(t, e, &llm.Request{Messages: []llm.Message{{Role: "user", Content: text}}, MaxTokens: 80, Temperature: 1, Seed: seed,
			ToolRequest: llm.ToolRequest{Tools: priorTools, ToolChoice: llm.ToolChoice{Mode: llm.ToolAuto}}})
		return c
	}
	calls := *base
	calls.CallBias = 1000
	prose := *base
	prose.CallBias = -1000
	byPrior := *base
	byPrior.CallWeight = 1000
	ec, ep, eb := newEngine(t, m, EngineConfig{ToolPrior: &calls}), newEngine(t, m, EngineConfig{ToolPrior: &prose}), newEngine(t, m, EngineConfig{ToolPrior: &byPrior})
	for seed := range uint64(4) {
		if c := auto(ec, "hello how are you", seed+1); len(c.calls) != 1 {
			t.Errorf("seed %d: call bias +1000 gave %+v %q", seed+1, c.calls, c.text)
		}
		if c := auto(ep, "please stop the heat now", seed+1); len(c.calls) != 0 {
			t.Errorf("seed %d: call bias -1000 gave calls %+v", seed+1, c.calls)
		}
		if c := auto(eb, "please stop the heat now", seed+1); len(c.calls) == 0 || c.calls[0].Name != "heat" {
			t.Errorf("seed %d: the prior reads a call, got %+v %q", seed+1, c.calls, c.text)
		}
		if c := auto(eb, "hello how are you", seed+1); len(c.calls) != 0 {
			t.Errorf("seed %d: the prior reads prose, got calls %+v", seed+1, c.calls)
		}
	}
}

// TestPruneTools: at the first call's tool point only the tools the prior
// gives at least the cut (renormalised over those offered) are scored,
// with prose and the prior's best always kept; anywhere the prior does not
// know every tool, past the tool point, or with the cut off, nothing is
// dropped.
func TestPruneTools(t *testing.T) {
	alt := func(name string) alternative {
		return alternative{text: []byte(chatfmt.ToolCallOpen + `{"name":"` + name + `","arguments":`)}
	}
	names := func(alts []alternative) []string {
		var out []string
		for _, a := range alts {
			if a.open {
				out = append(out, "(prose)")
				continue
			}
			n, _ := altToolName(a.text)
			out = append(out, n)
		}
		return out
	}
	rp := func() *requestPrior {
		return &requestPrior{weight: 0.2, labels: []priorLabel{
			{tool: "heat", args: map[string]string{"on": "true"}, p: 0.5}, {tool: "heat", args: map[string]string{"on": "false"}, p: 0.3},
			{tool: "window", p: 0.0018}, {tool: "drive", p: 0.02}}}
	}
	offered := []alternative{{open: true}, alt("heat"), alt("window"), alt("drive")}
	for _, c := range []struct {
		name string
		rp   *requestPrior
		alts []alternative
		cut  float64
		want []string
	}{
		// window's share is 0.0018/0.8218 = 0.0022, under 0.003.
		{"drops what the prior rules out", rp(), offered, 0.003, []string{"(prose)", "heat", "drive"}},
		{"a lower cut keeps it", rp(), offered, 0.002, []string{"(prose)", "heat", "window", "drive"}},
		{"the best stays whatever the cut", rp(), offered, 0.99, []string{"(prose)", "heat"}},
		{"cut off", rp(), offered, -1, []string{"(prose)", "heat", "window", "drive"}},
		{"an unknown tool leaves the point whole", rp(), append(slices.Clone(offered), alt("radio")), 0.003, []string{"(prose)", "heat", "window", "drive", "radio"}},
		{"no prior", nil, offered, 0.003, []string{"(prose)", "heat", "window", "drive"}},
		{"past the tool point", &requestPrior{tool: "heat", labels: rp().labels, weight: 0.2}, offered, 0.003, []string{"(prose)", "heat", "window", "drive"}},
		{"a prior of weight 0 prunes nothing", &requestPrior{labels: rp().labels}, offered, 0.003, []string{"(prose)", "heat", "window", "drive"}},
	} {
		if got := names(c.rp.pruneTools(slices.Clone(c.alts), c.cut)); !slices.Equal(got, c.want) {
			t.Errorf("%s: kept %q, want %q", c.name, got, c.want)
		}
	}
}

// TestToolPruneSavesTokens: on an engine, pruning runs fewer tokens
// through the model at the tool point and, where the prior decides, makes
// the same call as scoring every tool. (The test prior, trained on nine
// requests, is less sure than the shipped one: the cut is raised to 0.2.)
func TestToolPruneSavesTokens(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 7, false)
	prior := testPrior(t)
	pruned := newEngine(t, m, EngineConfig{ToolPrior: prior, ToolPrune: 0.2})
	all := newEngine(t, m, EngineConfig{ToolPrior: prior, ToolPrune: -1})
	req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "please stop the heat now"}}, MaxTokens: 80, Temperature: 1, Seed: 3,
		ToolRequest: llm.ToolRequest{Tools: priorTools, ToolChoice: llm.ToolChoice{Mode: llm.ToolRequired, Single: true}}}
	a, _ := run(t, pruned, req)
	b, _ := run(t, all, req)
	if len(a.calls) != 1 || len(b.calls) != 1 || a.calls[0].Name != b.calls[0].Name || a.calls[0].Arguments != b.calls[0].Arguments {
		t.Fatalf("pruned %+v, every tool scored %+v", a.calls, b.calls)
	}
	if p, q := pruned.Stats().ChoiceTokens, all.Stats().ChoiceTokens; p >= q {
		t.Fatalf("pruning scored %d tokens, every tool %d", p, q)
	}
}
