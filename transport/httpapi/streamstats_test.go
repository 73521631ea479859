package httpapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// cachedGen answers with three tokens of known engine latency and a Final
// whose prompt was partly served from a cached prefix.
type cachedGen struct{ got chan *llm.Request }

func (g cachedGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if g.got != nil {
		g.got <- req
	}
	for i, t := range []string{"Hi", " the", "re"} {
		if err := emit(llm.Token{Text: t, ID: int32(i), EngineLatency: time.Duration(i+1) * 1500 * time.Microsecond}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: 40, PrefixHitTokens: 30, CompletionTokens: 3, FinishReason: "stop"}, nil
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStreamStatsFields checks the raw bytes: each token event carries its
// generation latency and the final event the prefix-cache efficiency, in
// both APIs, and the usage reports cached tokens in each API's own field.
func TestStreamStatsFields(t *testing.T) {
	url := serve(t, cachedGen{}, Options{})
	oai := readAll(t, post(t, url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, nil).Body)
	for _, want := range []string{
		"phaseless: {\"gen_us\":1500}\ndata: ", "phaseless: {\"gen_us\":3000}\n", "phaseless: {\"gen_us\":4500}\n",
		`"prompt_tokens_details":{"cached_tokens":30}`,
		"phaseless: {\"prompt_tokens\":40,\"prefix_hit_tokens\":30,\"prefix_cache_efficiency\":0.75}\ndata: [DONE]\n\n",
	} {
		if !strings.Contains(oai, want) {
			t.Errorf("OpenAI stream lacks %q:\n%s", want, oai)
		}
	}
	ant := readAll(t, post(t, url+"/v1/messages",
		`{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"stream":true}`, nil).Body)
	for _, want := range []string{
		"event: content_block_delta\nphaseless: {\"gen_us\":1500}\n",
		`"usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":30,"cache_creation_input_tokens":0}`,
		"event: message_stop\nphaseless: {\"prompt_tokens\":40,\"prefix_hit_tokens\":30,\"prefix_cache_efficiency\":0.75}\n",
	} {
		if !strings.Contains(ant, want) {
			t.Errorf("Anthropic stream lacks %q:\n%s", want, ant)
		}
	}
}

// TestNonStreamedStatsHeaders checks the headers a non-streamed answer
// carries instead of the SSE field, and the usage fields.
func TestNonStreamedStatsHeaders(t *testing.T) {
	url := serve(t, cachedGen{}, Options{})
	for _, c := range []struct{ path, body, usage string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, `"prompt_tokens_details":{"cached_tokens":30}`},
		{"/v1/messages", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `"cache_read_input_tokens":30`},
	} {
		resp := post(t, url+c.path, c.body, nil)
		body := readAll(t, resp.Body)
		for h, want := range map[string]string{
			HeaderGenMeanUS: "3000", HeaderGenMaxUS: "4500",
			HeaderPrefixHitTokens: "30", HeaderPrefixCacheEfficiency: "0.75",
		} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("%s: %s = %q, want %q", c.path, h, got, want)
			}
		}
		if !strings.Contains(body, c.usage) {
			t.Errorf("%s: body lacks %s: %s", c.path, c.usage, body)
		}
	}
}

// continuedGen is an answer whose engine changed mid-way (the agent's local
// continuation of a cloud answer): its second token says so.
type continuedGen struct{}

func (continuedGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	emit(llm.Token{Text: "Hi"})
	emit(llm.Token{Text: " there", Continued: &llm.Continuation{Route: llm.RouteLocal, Reason: llm.ContinueCloudLost, Detail: "link lost"}})
	emit(llm.Token{Text: "!"})
	return llm.Final{CompletionTokens: 3, FinishReason: "stop"}, nil
}

// TestContinuedField: the token where the engine changed carries
// "continued" in the stats field, in both APIs and only there; a
// non-streamed answer says it in x-phaseless-continued.
func TestContinuedField(t *testing.T) {
	url := serve(t, continuedGen{}, Options{})
	const field = `{"gen_us":0,"continued":{"route":"local","reason":"cloud_lost"}}`
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"/v1/messages", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"stream":true}`},
	} {
		got := readAll(t, post(t, url+c.path, c.body, nil).Body)
		if strings.Count(got, `"continued"`) != 1 || !strings.Contains(got, "phaseless: "+field+"\n") || !strings.Contains(got, "there") {
			t.Errorf("%s: stream lacks one %s:\n%s", c.path, field, got)
		}
		resp := post(t, url+c.path, strings.Replace(c.body, `"stream":true`, `"stream":false`, 1), nil)
		readAll(t, resp.Body)
		if h := resp.Header.Get(HeaderContinued); h != "local; reason=cloud_lost" {
			t.Errorf("%s: %s = %q", c.path, HeaderContinued, h)
		}
	}
}

// TestMaxOutputTokensAlias: max_output_tokens sets the limit in both APIs
// and is validated under its own name.
func TestMaxOutputTokensAlias(t *testing.T) {
	got := make(chan *llm.Request, 1)
	url := serve(t, cachedGen{got: got}, Options{})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_output_tokens":7}`},
		{"/v1/messages", `{"model":"auto","max_output_tokens":7,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		if resp := post(t, url+c.path, c.body, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", c.path, resp.Status)
		}
		if r := <-got; r.MaxTokens != 7 {
			t.Errorf("%s: MaxTokens = %d, want 7", c.path, r.MaxTokens)
		}
		bad := strings.Replace(c.body, `"max_output_tokens":7`, `"max_output_tokens":0`, 1)
		resp := post(t, url+c.path, bad, nil)
		if body := readAll(t, resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "max_output_tokens must be between") {
			t.Errorf("%s with 0: %s %s", c.path, resp.Status, body)
		}
	}
}

// TestOfficialSDKsStats runs the official SDKs against streams that carry
// the stats field: they must read the same text and events as without it,
// and find the cached prompt tokens in their own usage fields.
func TestOfficialSDKsStats(t *testing.T) {
	dir := sdktest.Install(t)
	url := serve(t, cachedGen{}, Options{})
	results := map[string]map[string]any{}
	for _, r := range sdktest.Run[map[string]any](t, dir, "stats.mjs", url) {
		check, _ := r["check"].(string)
		results[check] = r
	}
	sdktest.CheckStats(t, results, "Hi there", 40, 30)
}

// TestTraceparentHeader: a valid traceparent reaches the generator with its
// tracestate; a malformed one, or a tracestate alone, is a 400 naming the
// header; the upstream Client sends the context on to the next server.
func TestTraceparentHeader(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got := make(chan *llm.Request, 1)
	url := serve(t, cachedGen{got: got}, Options{})
	body := `{"messages":[{"role":"user","content":"hi"}]}`
	if resp := post(t, url+"/v1/chat/completions", body, map[string]string{"traceparent": tp, "tracestate": "congo=t61rcWkgMzE"}); resp.StatusCode != 200 {
		t.Fatalf("valid traceparent: %s", resp.Status)
	}
	if r := <-got; r.Trace != (llm.Trace{Parent: tp, State: "congo=t61rcWkgMzE"}) {
		t.Errorf("trace %+v", r.Trace)
	}
	for _, hdr := range []map[string]string{{"traceparent": "00-xyz-01"}, {"tracestate": "a=b"}} {
		resp := post(t, url+"/v1/chat/completions", body, hdr)
		if b := readAll(t, resp.Body); resp.StatusCode != 400 || (!strings.Contains(b, `"param":"traceparent"`) && !strings.Contains(b, `"param":"tracestate"`)) {
			t.Errorf("%v: %s %s", hdr, resp.Status, b)
		}
	}

	// The hop client passes the request's context on.
	c, err := NewClient(ClientConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if _, err := c.Generate(context.Background(), &llm.Request{Model: "auto", MaxTokens: 4, Messages: []llm.Message{{Role: "user", Content: "x"}},
		Trace: llm.Trace{Parent: tp}}, func(llm.Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.Trace.Parent != tp {
		t.Errorf("upstream got trace %+v", r.Trace)
	}
}
