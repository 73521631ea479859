package edgemodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cartools"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/lmtrain"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/toolprior"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// toolCase is one held-out request of testdata/toolcalls.jsonl, written
// for this test and in none of the training templates' wordings: the tool
// it should call ("" for small talk, which should get prose) and the exact
// arguments; InText marks requests whose argument values appear in the
// request's words (the goal is measured on those).
type toolCase struct {
	Request string         `json:"request"`
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args"`
	InText  bool           `json:"in_text"`
}

func loadToolCases(t *testing.T, file string) []toolCase {
	t.Helper()
	cases := readToolCases(t, file)
	for _, c := range cases {
		if corpus.FromToolTemplate(c.Request) {
			t.Errorf("held-out request %q is a training template's wording", c.Request)
		}
	}
	return cases
}

// readToolCases reads a request set without loadToolCases' check: the
// smart home's sets are held out from a tool set the model was never
// taught, and some of their wordings are the car's ("play my {query}
// playlist", taught as play_media).
func readToolCases(t *testing.T, file string) []toolCase {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []toolCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c toolCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// toolSets are the held-out request sets: toolcalls.jsonl was written in
// the session that added tool training, toolcalls2.jsonl in the next one,
// by a different hand and before its model was measured, toolcalls3.jsonl
// in the session that added the tool prior, once its weights were chosen
// on the dev set and before it was measured on this set. None is trained
// on (corpus tests check that no training request is one of them).
var toolSets = []string{"testdata/toolcalls.jsonl", "testdata/toolcalls2.jsonl", "testdata/toolcalls3.jsonl"}

// toolDevSet is the set decoding choices are tuned on: 72 requests written
// before the choice decoding was measured (committed first), in none of the
// training wordings nor the held-out sets'. The held-out sets above are for
// the final numbers only.
const toolDevSet = "testdata/toolcalls_dev.jsonl"

// TestToolCallAccuracy asks the shipped model, through the engine with the
// car tool set offered (tool_choice auto, greedy), every request of the dev
// set and the held-out sets, and measures how often it calls the right
// tool, and with exactly the right arguments; small talk should get prose.
// It measures up to five ways: choice points decided byte by byte
// (EngineConfig.ByteChoices, as before choice decoding) or scored whole
// (the engine's default) with the model's tool prior (as shipped) or
// without it (EngineConfig.NoToolPrior), with the tool set as shipped,
// whose free-form values the grammar copies from the request
// (grammar.CopyKeyword), and with that keyword removed, the model alone
// choosing the values; and it logs what choice decoding costs against byte
// decoding in the same run (tokens run through the model, and wall time).
// By default only the shipped way (choices scored with the prior, values
// copied) runs on the held-out sets, against the floors; the dev set, the
// other four ways and the cost take four times as long again and run when
// PHASELESS_TOOLS_COMPARE is set. Run with -v for the
// numbers:
// PHASELESS_TOOLS_COMPARE=1 go test -v -run TestToolCallAccuracy ./models/edgemodel
func TestToolCallAccuracy(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	e := engineOn(t, m, lm.EngineConfig{})
	eb := engineOn(t, m, lm.EngineConfig{ByteChoices: true})
	en := engineOn(t, m, lm.EngineConfig{NoToolPrior: true})
	ea := engineOn(t, m, lm.EngineConfig{ToolPrune: -1})
	free := cartools.Tools()
	for i := range free {
		free[i].Parameters = json.RawMessage(strings.ReplaceAll(string(free[i].Parameters), `"`+grammar.CopyKeyword+`":true`, `"`+grammar.CopyKeyword+`":false`))
	}
	tuned := strings.HasPrefix(m.Meta["phaseless.train.preset"].(string), "edge-tools")
	compare := os.Getenv("PHASELESS_TOOLS_COMPARE") != ""
	sets := toolSets
	if compare {
		sets = append([]string{toolDevSet}, toolSets...)
	}
	for _, set := range sets {
		name := strings.TrimSuffix(strings.TrimPrefix(set, "testdata/"), ".jsonl")
		cases := loadToolCases(t, set)
		for _, st := range settings {
			t.Run(name+"/"+st.name, func(t *testing.T) {
				if compare {
					measureToolCalls(t, eb, cases, free, st, "byte by byte, values chosen by the model")
					measureToolCalls(t, e, cases, free, st, "choices scored, values chosen by the model")
					b := measureToolCalls(t, eb, cases, cartools.Tools(), st, "byte by byte, values copied by the grammar")
					s := measureToolCalls(t, en, cases, cartools.Tools(), st, "choices scored, values copied by the grammar, no tool prior")
					t.Logf("cost of choice decoding against byte by byte, same run: %.2f× the tokens run through the model (%.0f against %.0f a request), %.2f× the wall time",
						s.tokens/b.tokens, s.tokens, b.tokens, s.wall.Seconds()/b.wall.Seconds())
				}
				s := measureToolCalls(t, e, cases, cartools.Tools(), st, "choices scored with the tool prior, values copied by the grammar (as shipped)")
				if compare {
					a := measureToolCalls(t, ea, cases, cartools.Tools(), st, "the same, every offered tool scored (no pruning)")
					t.Logf("pruning tools under %.1f%% of the prior: %.2f× the tokens (%.0f against %.0f a request), %.2f× the wall time",
						100*lm.DefaultToolPrune, s.tokens/a.tokens, s.tokens, a.tokens, s.wall.Seconds()/a.wall.Seconds())
				}
				if !tuned {
					t.Skip("the shipped model predates tool training")
				}
				// Bounds just below the measured numbers (docs/tools.md), so
				// that a model or a decoding change that loses calls, copies
				// or prose fails, at either setting.
				f := toolFloors[name]
				if s.rightTool < f.rightTool || s.exactInText < f.exactInText || s.prose < f.prose {
					t.Errorf("tool calling below its bounds %+v: %+v", f, s)
				}
			})
		}
	}
}

// toolFloors are TestToolCallAccuracy's bounds per set, at both settings,
// for choice decoding with the tool prior and values copied: each just
// below what the shipped model measured (docs/tools.md).
var toolFloors = map[string]toolScores{
	"toolcalls_dev": {rightTool: 0.90, exactInText: 0.85, prose: 0.85}, // measured 59/64, 48/55, 7/8
	"toolcalls":     {rightTool: 0.95, exactInText: 0.93, prose: 0.85}, // measured 73/76, 63/67, 8/8
	"toolcalls2":    {rightTool: 0.94, exactInText: 0.92, prose: 0.85}, // measured 78/82, 56/60, 10/10
	"toolcalls3":    {rightTool: 0.95, exactInText: 0.88, prose: 0.70}, // measured 48/50, 33/37, 6/8
}

// setting is how an app sends its sampling settings: TestToolCallAccuracy
// measures every set both ways.
type setting struct {
	name        string
	temperature *float64 // nil: the field is left out
}

// settings are temperature 0, as the project's tests and demo send, and no
// temperature at all, as both official SDKs send by default (the server
// then applies its default; issue 28 found the tool decision falling apart
// there).
var settings = []setting{{"temperature 0", new(float64)}, {"no temperature", nil}}

// TestToolSetsNotTrained checks that no tool request of the held-out sets
// or the dev set is a training prompt of the tools stage (whatever its
// source: tool templates, CLINC150, in-car prose), beyond the template
// check of loadToolCases, and that the dev set shares no request with the
// held-out sets.
func TestToolSetsNotTrained(t *testing.T) {
	split, err := corpus.EdgeToolsTune(lmtrain.EdgeToolsPreset().Train.Seed)
	if err != nil {
		t.Fatal(err)
	}
	trained := map[string]bool{}
	for _, e := range split.Train {
		trained[strings.ToLower(strings.TrimSpace(e.Prompt))] = true
	}
	for _, set := range append(slices.Clone(toolSets), toolDevSet) {
		for _, c := range loadToolCases(t, set) {
			switch {
			case !trained[strings.ToLower(c.Request)]:
			case c.Tool == "":
				// Small talk may be a CLINC150 utterance the base
				// corpus answers; it measures that prose stays prose.
				t.Logf("%s: small talk %q is a training prompt", set, c.Request)
			default:
				t.Errorf("%s: %q is a training prompt", set, c.Request)
			}
		}
	}
	heldOut := map[string]bool{}
	for _, set := range toolSets {
		for _, c := range loadToolCases(t, set) {
			heldOut[strings.ToLower(c.Request)] = true
		}
	}
	for _, c := range loadToolCases(t, toolDevSet) {
		if heldOut[strings.ToLower(c.Request)] {
			t.Errorf("%s: %q is also a held-out request", toolDevSet, c.Request)
		}
	}
}

type toolScores struct {
	rightTool, rightToolInText, exactInText, prose float64
	// tokens is the tokens the engine ran through the model per request
	// (prompts, replies and choice scoring); wall the measurement's time.
	tokens float64
	wall   time.Duration
}

func measureToolCalls(t *testing.T, e *lm.Engine, cases []toolCase, tools []llm.Tool, st setting, label string) toolScores {
	return measureCalls(t, e, cases, tools, st, label, false)
}

// measureCalls is measureToolCalls; with named, each request that should
// call a tool names it in tool_choice (small talk stays auto), which
// measures the arguments alone.
func measureCalls(t *testing.T, e *lm.Engine, cases []toolCase, tools []llm.Tool, st setting, label string, named bool) toolScores {
	t.Helper()
	h, err := httpapi.NewHandler(e, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	replies := make([]chatReply, len(cases))
	before, start := e.Stats(), time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// A seed per request keeps the no-temperature run reproducible.
			name := ""
			if named {
				name = c.Tool
			}
			r, err := askChat(h, c.Request, tools, st.temperature, uint64(i+1), 160, name)
			if err != nil {
				t.Error(err)
			}
			replies[i] = r
		}()
	}
	wg.Wait()
	wall, after := time.Since(start), e.Stats()
	ran := float64(after.PrefillTokens+after.DecodeTokens+after.ChoiceTokens-before.PrefillTokens-before.DecodeTokens-before.ChoiceTokens) / float64(len(cases))
	var calls, rightTool, rightInText, inText, exactInText, exactAll, talk, prose int
	for i, c := range cases {
		r := replies[i]
		if c.Tool == "" {
			talk++
			if len(r.calls) == 0 {
				prose++
			} else {
				t.Logf("small talk %q → call %s%s", c.Request, r.calls[0].Name, r.calls[0].Arguments)
			}
			continue
		}
		calls++
		if c.InText {
			inText++
		}
		if len(r.calls) == 0 || r.calls[0].Name != c.Tool {
			t.Logf("miss  %q → %q %+v (want %s)", c.Request, r.content, r.calls, c.Tool)
			continue
		}
		rightTool++
		if c.InText {
			rightInText++
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(r.calls[0].Arguments), &got); err != nil {
			// Cut at max_tokens: a free value the model wrote on and on
			// (values chosen by the model). Not exact; not a grammar bug.
			t.Logf("args  %q → %s, cut: %v", c.Request, r.calls[0].Arguments, err)
			continue
		}
		if !reflect.DeepEqual(got, c.Args) {
			t.Logf("args  %q → %s (want %v)", c.Request, r.calls[0].Arguments, c.Args)
			continue
		}
		exactAll++
		if c.InText {
			exactInText++
		}
	}
	pct := func(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }
	t.Logf("%s, %s: right tool %.1f%% (%d of %d; %d of %d where the values are in the request); exact arguments %.1f%% where the values are in the request (%d of %d), %.1f%% of all (%d of %d); small talk answered in prose %d of %d; %.0f tokens a request",
		label, st.name, pct(rightTool, calls), rightTool, calls, rightInText, inText, pct(exactInText, inText), exactInText, inText, pct(exactAll, calls), exactAll, calls, prose, talk, ran)
	return toolScores{rightTool: pct(rightTool, calls) / 100, rightToolInText: pct(rightInText, inText) / 100, exactInText: pct(exactInText, inText) / 100,
		prose: pct(prose, talk) / 100, tokens: ran, wall: wall}
}

// chatReply is what an OpenAI chat completion returned: its text and its
// calls.
type chatReply struct {
	content string
	calls   []llm.ToolCall
}

// askChat sends one user request with tools through the OpenAI handler, as
// an app does, with the given temperature (nil: none) and seed, and
// returns the reply (at most maxTokens); named, when set, is the tool
// tool_choice names.
func askChat(h http.Handler, request string, tools []llm.Tool, temperature *float64, seed uint64, maxTokens int, named string) (chatReply, error) {
	type function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	body := chatBody(request, temperature, seed, maxTokens)
	var ts []tool
	for _, tl := range tools {
		ts = append(ts, tool{"function", function{tl.Name, tl.Description, tl.Parameters}})
	}
	if len(ts) > 0 {
		body["tools"] = ts
	}
	if named != "" {
		body["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": named}}
	}
	var resp struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := postChat(h, request, body, &resp); err != nil {
		return chatReply{}, err
	}
	if len(resp.Choices) != 1 {
		return chatReply{}, fmt.Errorf("%q: %d choices", request, len(resp.Choices))
	}
	var r chatReply
	m := resp.Choices[0].Message
	if m.Content != nil {
		r.content = *m.Content
	}
	for _, c := range m.ToolCalls {
		r.calls = append(r.calls, llm.ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return r, nil
}

// chatBody is an OpenAI chat request of one user turn, as an app sends
// it: temperature nil leaves the field out.
func chatBody(request string, temperature *float64, seed uint64, maxTokens int) map[string]any {
	body := map[string]any{"model": "edge", "max_tokens": maxTokens, "seed": seed,
		"messages": []map[string]string{{"role": "user", "content": request}}}
	if temperature != nil {
		body["temperature"] = *temperature
	}
	return body
}

// postChat posts body to h's chat endpoint and decodes a 200 answer into
// out.
func postChat(h http.Handler, request string, body map[string]any, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(raw)))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("%q: %d %s", request, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		return fmt.Errorf("%q: reply %s: %v", request, rec.Body, err)
	}
	return nil
}

// TestShippedToolPrior: the shipped model carries the tool prior that
// `phaselessctl lm toolprior` trains on the tools stage's corpus (same
// labels and default weights, the same readings of the dev set's requests
// and of their words as spans), and it knows every tool of the car tool
// set.
func TestShippedToolPrior(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	p := m.ToolPrior()
	if p == nil {
		t.Fatal("the shipped model carries no tool prior")
	}
	preset := lmtrain.EdgeToolsPreset()
	split, err := preset.Corpus(preset.Train.Seed)
	if err != nil {
		t.Fatal(err)
	}
	q, err := toolprior.Train(corpus.ToolPriorExamples(split), toolprior.TrainConfig{Buckets: p.Buckets, Seed: preset.Train.Seed, Weight: p.Weight})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Labels, q.Labels) || float32(p.Weight) != float32(toolprior.DefaultWeight) ||
		float32(p.CallWeight) != float32(toolprior.DefaultCallWeight) || float32(p.CallBias) != float32(toolprior.DefaultCallBias) ||
		float32(p.SpanWeight) != float32(toolprior.DefaultSpanWeight) {
		t.Fatalf("shipped prior: labels %q weights %v %v %v %v; retrained: labels %q", p.Labels, p.Weight, p.CallWeight, p.CallBias, p.SpanWeight, q.Labels)
	}
	if err := q.TrainSpans(corpus.ToolSpanExamples(split), len(p.SpanW), p.SpanWeight, toolprior.TrainConfig{Seed: preset.Train.Seed}); err != nil {
		t.Fatal(err)
	}
	argmax := func(lp []float64) int { return slices.Index(lp, slices.Max(lp)) }
	for _, c := range loadToolCases(t, toolDevSet) {
		if a, b := argmax(p.LogProbs(c.Request)), argmax(q.LogProbs(c.Request)); a != b {
			t.Errorf("%q: shipped prior reads %q, retrained %q", c.Request, p.Labels[a], q.Labels[b])
		}
		// Every word of the request as a one-word span: the span head
		// ranks them alike.
		words := strings.Fields(c.Request)
		for key := range c.Args {
			lp, ok := p.SpanLogProbs(c.Request, key, words)
			lq, _ := q.SpanLogProbs(c.Request, key, words)
			if ok && argmax(lp) != argmax(lq) {
				t.Errorf("%q: shipped span head reads %q as %s, retrained %q", c.Request, words[argmax(lp)], key, words[argmax(lq)])
			}
		}
	}
	tools := map[string]bool{}
	for _, l := range p.Labels {
		tool, _, _ := toolprior.ParseLabel(l)
		tools[tool] = true
	}
	for _, tl := range cartools.Tools() {
		if !tools[tl.Name] {
			t.Errorf("the prior does not know %s", tl.Name)
		}
	}
}

// TestNoMarkupInProse samples the shipped model 50 times at temperature 1,
// with the car tools offered, on a request a tool serves and on requests
// none does, and requires every reply to be well-formed calls or prose
// that holds no piece of the call markup: issue 28 saw "<tool_calhed you…"
// for "set the fan to 3" in 5 of 20 seeds.
func TestNoMarkupInProse(t *testing.T) {
	h := shippedHandler(t)
	const seeds = 50
	one := 1.0
	for _, request := range []string{"set the fan to 3", "hey, how is your day going", "what's the capital of france"} {
		var calls, prose int
		var wg sync.WaitGroup
		var mu sync.Mutex // guards calls, prose
		sem := make(chan struct{}, 8)
		for seed := range seeds {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				r, err := askChat(h, request, cartools.Tools(), &one, uint64(seed+1), 96, "")
				if err != nil {
					t.Error(err)
					return
				}
				if strings.HasPrefix(r.content, "<") || strings.Contains(r.content, "<t") {
					t.Errorf("%q, seed %d: prose holds call markup: %q", request, seed+1, r.content)
				}
				for _, c := range r.calls {
					if !json.Valid([]byte(c.Arguments)) {
						t.Errorf("%q, seed %d: call %s has arguments %q", request, seed+1, c.Name, c.Arguments)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(r.calls) > 0 {
					calls++
				} else {
					prose++
				}
			}()
		}
		wg.Wait()
		t.Logf("%q at temperature 1, %d seeds: %d calls, %d prose", request, seeds, calls, prose)
	}
}

// TestServesTools: the shipped model serves the car's tools (its tool
// prior knows each), not an app's own ones it was never taught, nor none;
// the agent's router keeps the first on the device.
func TestServesTools(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	car := cartools.Tools()
	if !m.ServesTools(car) || !m.ServesTools(car[:1]) {
		t.Error("the edge model does not serve the car's tools")
	}
	if m.ServesTools(append(car[:1:1], llm.Tool{Name: "dim_lights"})) || m.ServesTools(nil) {
		t.Error("the edge model claims a tool it was not taught, or no tools")
	}
}

// homeTools is a second tool set, a smart home's, written as an app
// writes its own (plain OpenAI tools: no x-phaseless-copy, names and
// wording unlike the car's), and homeSets its requests: the dev set that
// copying unmarked arguments was tuned on, the held-out set committed
// before anything was measured on either (d1dd632), and a second held-out
// set written once the first had been looked at (its misses guided the
// tool rule's reading of argument names, "%" and whole-word numbers),
// committed before that change was measured on it (82fca1a).
const homeTools = "testdata/hometools.json"

var homeSets = []string{"testdata/homecalls_dev.jsonl", "testdata/homecalls.jsonl", "testdata/homecalls2.jsonl"}

func loadOpenAITools(t *testing.T, file string) []llm.Tool {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var in []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	var out []llm.Tool
	for _, f := range in {
		out = append(out, llm.Tool{Name: f.Function.Name, Description: f.Function.Description, Parameters: f.Function.Parameters})
	}
	return out
}

// TestUserToolAccuracy asks the shipped model the smart home's requests
// with its tools, at both settings: with tool_choice naming the right tool
// (the arguments alone: what an app's own free-text arguments get) and
// auto (the model was taught only the car's tools: the tool rule of
// models/lm/argspan.go picks among the smart home's). Run with
// PHASELESS_TOOLS_COMPARE=1 for the dev set and the arguments with
// copying turned off ("x-phaseless-copy": false on every property).
func TestUserToolAccuracy(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	e := engineOn(t, m, lm.EngineConfig{})
	tools := loadOpenAITools(t, homeTools)
	noCopy := slices.Clone(tools)
	for i := range noCopy {
		var schema map[string]any
		if err := json.Unmarshal(noCopy[i].Parameters, &schema); err != nil {
			t.Fatal(err)
		}
		for _, p := range schema["properties"].(map[string]any) {
			p.(map[string]any)[grammar.CopyKeyword] = false
		}
		noCopy[i].Parameters, _ = json.Marshal(schema)
	}
	compare := os.Getenv("PHASELESS_TOOLS_COMPARE") != ""
	sets := homeSets[1:]
	if compare {
		sets = homeSets
	}
	for _, set := range sets {
		name := strings.TrimSuffix(strings.TrimPrefix(set, "testdata/"), ".jsonl")
		cases := readToolCases(t, set)
		for _, st := range settings {
			t.Run(name+"/"+st.name, func(t *testing.T) {
				if compare {
					measureCalls(t, e, cases, noCopy, st, "tool named, unmarked arguments not copied", true)
					measureCalls(t, e, cases, noCopy, st, "tool_choice auto, unmarked arguments not copied", false)
				}
				s := measureCalls(t, e, cases, tools, st, "tool named, unmarked arguments copied (as shipped)", true)
				a := measureCalls(t, e, cases, tools, st, "tool_choice auto, unmarked arguments copied (as shipped)", false)
				if f := userToolFloors[name]; s.exactInText < f.exactInText || a.rightTool < f.rightTool || a.prose < f.prose {
					t.Errorf("below the bounds %+v: tool named %+v, auto %+v", f, s, a)
				}
			})
		}
	}
}

// userToolFloors bound TestUserToolAccuracy per set, at both settings:
// exact arguments with the tool named, right tool and prose with
// tool_choice auto, each just below what was measured (docs/tools.md).
var userToolFloors = map[string]toolScores{
	"homecalls_dev": {exactInText: 0.90, rightTool: 0.95, prose: 1}, // measured 22/24; 24/24, 2/2
	"homecalls":     {exactInText: 0.85, rightTool: 0.87, prose: 1}, // measured 40/46; 41/46, 4/4
	"homecalls2":    {exactInText: 0.76, rightTool: 0.88, prose: 1}, // measured 33/42; 38/42, 4/4
}

// engineOn runs an engine on m with cfg, closed when t ends.
func engineOn(t *testing.T, m *lm.Model, cfg lm.EngineConfig) *lm.Engine {
	t.Helper()
	e, err := lm.NewEngine(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// shippedHandler serves the shipped edge model through the OpenAI
// handler with the engine's defaults, closed when t ends.
func shippedHandler(t *testing.T) *httpapi.Handler {
	t.Helper()
	m, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.NewHandler(engineOn(t, m, lm.EngineConfig{}), httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
