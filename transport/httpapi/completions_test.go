package httpapi

import (
	"bufio"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

func TestCompletionNonStream(t *testing.T) {
	gen := &scriptGen{tokens: []string{"Once", " upon", " a"}, failAt: -1, route: "local"}
	url := serve(t, gen, Options{})
	resp := post(t, url+"/v1/completions", `{"model":"auto","prompt":"","max_tokens":4,"temperature":0,"top_p":0.5,"seed":9,"stop":["\n"]}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	c := decode[textCompletion](t, resp.Body)
	if c.Object != "text_completion" || !strings.HasPrefix(c.ID, "cmpl-") || len(c.Choices) != 1 {
		t.Fatalf("shape: %+v", c)
	}
	ch := c.Choices[0]
	if ch.Text != "Once upon a" || ch.FinishReason == nil || *ch.FinishReason != "stop" || string(ch.Logprobs) != "null" {
		t.Errorf("choice %+v", ch)
	}
	if c.Usage == nil || c.Usage.PromptTokens != 7 || c.Usage.CompletionTokens != 3 || c.Usage.TotalTokens != 10 {
		t.Errorf("usage %+v", c.Usage)
	}
	req := gen.request()
	want := &llm.Request{ID: req.ID, Model: "auto", Raw: true, Prompt: "", MaxTokens: 4, Temperature: 0, TopP: 0.5, Seed: 9, Stop: []string{"\n"}}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("decoded request\n%+v\nwant\n%+v", req, want)
	}
}

// TestCompletionStream: one text_completion event per token, flushed on its
// own (the generator emits token n+1 only after the client read token n),
// then the finish reason, the usage when asked for, and [DONE].
func TestCompletionStream(t *testing.T) {
	gen := &scriptGen{tokens: []string{"a", "b", "c"}, failAt: -1, route: "local", gate: make(chan struct{})}
	url := serve(t, gen, Options{})
	resp := post(t, url+"/v1/completions", `{"prompt":["Once"],"stream":true,"stream_options":{"include_usage":true}}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	var text strings.Builder
	for i := range 3 {
		ev, err := readEvent(br)
		if err != nil {
			t.Fatal(err)
		}
		c := decodeString[textCompletion](t, ev.data)
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Choices[0].FinishReason != nil {
			t.Fatalf("event %d: %s", i, ev.data)
		}
		text.WriteString(c.Choices[0].Text)
		if i < 2 {
			gen.gate <- struct{}{}
		}
	}
	if text.String() != "abc" {
		t.Errorf("text %q", text.String())
	}
	rest := readAllEvents(t, br)
	if len(rest) != 3 || rest[2].data != "[DONE]" {
		t.Fatalf("tail events %+v", rest)
	}
	if fin := decodeString[textCompletion](t, rest[0].data); len(fin.Choices) != 1 || fin.Choices[0].Text != "" || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" {
		t.Errorf("finish event %s", rest[0].data)
	}
	if u := decodeString[textCompletion](t, rest[1].data); len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 3 {
		t.Errorf("usage event %s", rest[1].data)
	}
	if r := gen.request(); !r.Raw || r.Prompt != "Once" || r.MaxTokens != defaultCompletionTokens || r.Temperature != 1 {
		t.Errorf("decoded request %+v (want OpenAI's defaults: 16 tokens, temperature 1)", r)
	}
}

func TestCompletionValidation(t *testing.T) {
	for _, tc := range []struct{ body, param string }{
		{`{"prompt":[1,2,3]}`, "prompt"},
		{`{"prompt":["a","b"]}`, "prompt"},
		{`{"prompt":7}`, "prompt"},
		{`{"prompt":"x","echo":true}`, "echo"},
		{`{"prompt":"x","suffix":"y"}`, "suffix"},
		{`{"prompt":"x","logprobs":2}`, "logprobs"},
		{`{"prompt":"x","best_of":2}`, "best_of"},
		{`{"prompt":"x","n":2}`, "n"},
		{`{"prompt":"x","max_tokens":0}`, "max_tokens"},
		{`{"prompt":"x","max_tokens":100000}`, "max_tokens"},
		{`{"prompt":"x","temperature":3}`, "temperature"},
		{`{"prompt":"x","top_p":0}`, "top_p"},
		{`{"prompt":"x","seed":-1}`, "seed"},
		{`{"prompt":"x","stop":["", "y"]}`, "stop"},
		{`{"prompt":"x","stream_options":{"include_usage":true}}`, "stream_options"},
		{`{"prompt":`, ""},
	} {
		gen := &scriptGen{failAt: -1}
		resp := post(t, serve(t, gen, Options{})+"/v1/completions", tc.body, nil)
		e := decode[oaiErrorBody](t, resp.Body)
		if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || (tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param)) {
			t.Errorf("%s: status %d error %+v", tc.body, resp.StatusCode, e.Error)
		}
		if gen.request() != nil {
			t.Errorf("%s reached the generator", tc.body)
		}
	}
}

// TestCloudRefusesCompletions: the cloud serves chat only; a raw completion
// is a 400 in OpenAI's error shape that says where it does run.
func TestCloudRefusesCompletions(t *testing.T) {
	gen := &scriptGen{failAt: -1}
	resp := post(t, serve(t, gen, Options{Cloud: true})+"/v1/completions", `{"prompt":"Once"}`, nil)
	e := decode[oaiErrorBody](t, resp.Body)
	if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "phaseless-agent --model") {
		t.Errorf("status %d error %+v", resp.StatusCode, e.Error)
	}
	if gen.request() != nil {
		t.Error("the cloud ran a raw completion")
	}
	get, err := http.Get(serve(t, gen, Options{}) + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/completions: status %d", get.StatusCode)
	}
}

// TestClientRefusesRaw: an OpenAI-compatible upstream is driven through
// chat completions, so a raw completion fails before any request is sent.
func TestClientRefusesRaw(t *testing.T) {
	gen := &scriptGen{tokens: []string{"x"}, failAt: -1}
	c, err := NewClient(ClientConfig{URL: serve(t, gen, Options{})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Generate(t.Context(), &llm.Request{Raw: true, MaxTokens: 1}, nil)
	if llm.CodeOf(err) != llm.CodeInvalid || gen.request() != nil {
		t.Errorf("err %v, upstream saw %v", err, gen.request())
	}
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","prompt":"","max_tokens":60,"temperature":0}`,
		`{"prompt":["Once upon a time"],"stream":true,"stream_options":{"include_usage":true},"stop":"\n","seed":7,"top_p":0.9}`,
		`{"prompt":[1,2,3]}`, `{"prompt":null,"echo":false,"suffix":"","logprobs":null,"best_of":1,"n":1}`,
		`{"prompt":"x","max_tokens":9223372036854775808}`, `{"prompt":"x","temperature":"low"}`,
		`[]`, `null`, `{`,
	} {
		f.Add([]byte(s))
	}
	lim := limits{maxTokens: DefaultMaxOutputTokens, defaultTokens: DefaultOutputTokens}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, e := decodeCompletion(body, lim)
		if e != nil {
			if req != nil || e.status != http.StatusBadRequest && e.status != http.StatusNotFound || e.message == "" {
				t.Fatalf("bad rejection: %+v", e)
			}
			return
		}
		if !req.Raw || len(req.Messages) != 0 {
			t.Fatalf("accepted a completion as %+v", req)
		}
		checkDecoded(t, lim, 1, req.MaxTokens, req.Temperature)
	})
}

// sdkCompletion is what examples/sdk-test/completions.mjs prints per call.
type sdkCompletion struct {
	Check, Object, Text, Finish, Route, Name, Type, Param string
	Usage                                                 *ChatUsage
	Chunks, Status                                        int
	Threw                                                 bool
}

// TestOfficialSDKCompletions runs the official OpenAI SDK's
// completions.create, unchanged, against a real handler: the object, the
// text streamed and not, usage, and a refused token-id prompt.
func TestOfficialSDKCompletions(t *testing.T) {
	dir := sdktest.Install(t)
	res := map[string]sdkCompletion{}
	for _, r := range sdktest.Run[sdkCompletion](t, dir, "completions.mjs", serve(t, sdkGen{}, Options{})) {
		res[r.Check] = r
	}
	if r := res["create"]; r.Object != "text_completion" || r.Text != "Hello from Phaseless" || r.Finish != "stop" || r.Route != "local" || r.Usage == nil || r.Usage.TotalTokens != 8 {
		t.Errorf("create %+v", r)
	}
	if r := res["stream"]; r.Text != "Hello from Phaseless" || r.Finish != "stop" || r.Chunks != 4 || r.Usage == nil || r.Usage.CompletionTokens != 3 {
		t.Errorf("stream %+v", r)
	}
	if r := res["invalid"]; !r.Threw || r.Status != 400 || r.Name != "BadRequestError" || r.Type != "invalid_request_error" || r.Param != "prompt" {
		t.Errorf("invalid %+v", r)
	}
}
