package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scriptGen is a test generator: it records the request, sets metadata, emits
// its tokens (optionally waiting on a gate before each one after the first)
// and then returns err or a Final.
type scriptGen struct {
	tokens  []string
	failAt  int // return err after this many tokens; -1 = after all
	err     error
	route   string        // sent in the begin event, ahead of the first token
	gate    chan struct{} // when set, one receive before every token after the first
	blockCh chan struct{} // when set, block until ctx ends (a hung engine)

	mu       sync.Mutex // guards got, cancelled
	got      *llm.Request
	ctxCause error
}

func (g *scriptGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	g.mu.Lock()
	g.got = req
	g.mu.Unlock()
	st := llm.NewStream(emit)
	st.Meta.Route = g.route
	if g.route == "" {
		st = nil // a generator that decides nothing sends no begin event
	}
	send := func(t llm.Token) error {
		if st == nil {
			return emit(t)
		}
		return st.Emit(t)
	}
	if g.blockCh != nil {
		close(g.blockCh)
		<-ctx.Done()
		g.mu.Lock()
		g.ctxCause = ctx.Err()
		g.mu.Unlock()
		return llm.Final{}, ctx.Err()
	}
	for i, t := range g.tokens {
		if i == g.failAt {
			return llm.Final{}, g.err
		}
		if i > 0 && g.gate != nil {
			select {
			case <-g.gate:
			case <-ctx.Done():
				return llm.Final{}, ctx.Err()
			}
		}
		if err := send(llm.Token{Text: t, ID: int32(i)}); err != nil {
			return llm.Final{}, err
		}
	}
	if g.failAt == len(g.tokens) || (g.err != nil && g.failAt < 0) {
		return llm.Final{}, g.err
	}
	reason := "stop"
	if len(g.tokens) >= req.MaxTokens {
		reason = "length"
	}
	if st != nil {
		if err := st.Begin(); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: 7, CompletionTokens: len(g.tokens), FinishReason: reason}, nil
}

func (g *scriptGen) request() *llm.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got
}

// serve starts a real HTTP server on loopback with the handler mounted the
// way the agent and the cloud mount it.
func serve(t *testing.T, gen llm.Generator, opts Options) string {
	t.Helper()
	h, err := NewHandler(gen, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, MaxHeaderBytes: ServerMaxHeaderBytes}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decode[T any](t *testing.T, r io.Reader) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(r).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

const chatBody = `{"model":"auto","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Turn on "},{"type":"text","text":"the AC"}]}],"max_tokens":16}`
const msgBody = `{"model":"auto","system":"Be brief.","messages":[{"role":"user","content":"Turn on the AC"}],"max_tokens":16}`

func TestChatNonStream(t *testing.T) {
	gen := &scriptGen{tokens: []string{"Sure", ",", " done."}, failAt: -1, route: "local"}
	url := serve(t, gen, Options{})
	resp := post(t, url+"/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("x-phaseless-route"); got != "local" {
		t.Errorf("x-phaseless-route %q", got)
	}
	c := decode[chatCompletion](t, resp.Body)
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || len(c.Choices) != 1 {
		t.Fatalf("shape: %+v", c)
	}
	if c.Choices[0].Message.Content == nil || *c.Choices[0].Message.Content != "Sure, done." || c.Choices[0].FinishReason != "stop" || c.Choices[0].Message.Role != "assistant" {
		t.Errorf("choice %+v", c.Choices[0])
	}
	if c.Usage == nil || c.Usage.PromptTokens != 7 || c.Usage.CompletionTokens != 3 || c.Usage.TotalTokens != 10 {
		t.Errorf("usage %+v", c.Usage)
	}
	req := gen.request()
	want := []llm.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Turn on the AC"}}
	if !reflect.DeepEqual(req.Messages, want) || req.MaxTokens != 16 || req.Model != "auto" {
		t.Errorf("decoded request %+v", req)
	}
}

// sseEvent is one parsed server-sent event.
type sseEvent struct{ name, data string }

// readEvent reads the next SSE event, or io.EOF.
func readEvent(br *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[len("data: "):]
		}
	}
}

func readAllEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	br := bufio.NewReader(r)
	var evs []sseEvent
	for {
		ev, err := readEvent(br)
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

// TestChatStreamUnbuffered proves each token is flushed on its own: the
// generator emits token n+1 only after the client has read token n, so any
// buffering in the handler would deadlock (and trip the hang guard).
func TestChatStreamUnbuffered(t *testing.T) {
	gen := &scriptGen{tokens: []string{"a", "b", "c"}, failAt: -1, route: "cloud", gate: make(chan struct{})}
	url := serve(t, gen, Options{})
	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("x-phaseless-route") != "cloud" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	var text strings.Builder
	for i := range 3 {
		ev, err := readEvent(br)
		if err != nil {
			t.Fatal(err)
		}
		c := decodeString[chatChunk](t, ev.data)
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 || c.Choices[0].Delta.Content == nil {
			t.Fatalf("chunk %d: %s", i, ev.data)
		}
		if (i == 0) != (c.Choices[0].Delta.Role == "assistant") {
			t.Errorf("chunk %d role %q: only the first chunk carries the role", i, c.Choices[0].Delta.Role)
		}
		text.WriteString(*c.Choices[0].Delta.Content)
		if i < 2 {
			gen.gate <- struct{}{} // release the next token only now
		}
	}
	if text.String() != "abc" {
		t.Errorf("text %q", text.String())
	}
	rest := readAllEvents(t, br)
	if len(rest) != 3 || rest[2].data != "[DONE]" {
		t.Fatalf("tail events %+v", rest)
	}
	fin := decodeString[chatChunk](t, rest[0].data)
	if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" {
		t.Errorf("finish chunk %s", rest[0].data)
	}
	usage := decodeString[chatChunk](t, rest[1].data)
	if len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.CompletionTokens != 3 {
		t.Errorf("usage chunk %s", rest[1].data)
	}
	if gen.request().MaxTokens != DefaultOutputTokens {
		t.Errorf("default max tokens %d", gen.request().MaxTokens)
	}
}

func decodeString[T any](t *testing.T, s string) T {
	t.Helper()
	return decode[T](t, strings.NewReader(s))
}

func TestMessagesNonStream(t *testing.T) {
	gen := &scriptGen{tokens: []string{"x", "y"}, failAt: -1, route: "local"}
	url := serve(t, gen, Options{})
	resp := post(t, url+"/v1/messages", strings.Replace(msgBody, `"max_tokens":16`, `"max_tokens":2`, 1), map[string]string{"anthropic-version": "2023-06-01"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	m := decode[antMessage](t, resp.Body)
	if m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") || len(m.Content) != 1 || m.Content[0].(map[string]any)["text"] != "xy" {
		t.Fatalf("message %+v", m)
	}
	if m.StopReason == nil || *m.StopReason != "max_tokens" || m.Usage.InputTokens != 7 || m.Usage.OutputTokens != 2 {
		t.Errorf("stop/usage %+v", m)
	}
	if got := gen.request().Messages; len(got) != 2 || got[0].Role != "system" || got[0].Content != "Be brief." {
		t.Errorf("system prompt not first: %+v", got)
	}
}

func TestMessagesStreamEventOrder(t *testing.T) {
	gen := &scriptGen{tokens: []string{"one", " two"}, failAt: -1, route: "local", gate: make(chan struct{}, 8)}
	gen.gate <- struct{}{}
	url := serve(t, gen, Options{})
	resp := post(t, url+"/v1/messages", strings.TrimSuffix(msgBody, "}")+`,"stream":true}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	evs := readAllEvents(t, resp.Body)
	var names []string
	var text strings.Builder
	for _, ev := range evs {
		names = append(names, ev.name)
		if ev.name == "content_block_delta" {
			d := decodeString[struct {
				Delta antTextDelta `json:"delta"`
			}](t, ev.data)
			text.WriteString(d.Delta.Text)
		}
		var typed struct{ Type string }
		if err := json.Unmarshal([]byte(ev.data), &typed); err != nil || typed.Type != ev.name {
			t.Errorf("event %s carries type %q", ev.name, typed.Type)
		}
	}
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(names, " "), want)
	}
	if text.String() != "one two" {
		t.Errorf("text %q", text.String())
	}
	md := decodeString[struct {
		Delta struct {
			StopReason string `json:"stop_reason"`
		} `json:"delta"`
		Usage antUsage `json:"usage"`
	}](t, evs[5].data)
	if md.Delta.StopReason != "end_turn" || md.Usage.OutputTokens != 2 || md.Usage.InputTokens != 7 {
		t.Errorf("message_delta %s", evs[5].data)
	}
}

// An empty generation still produces a well-formed stream.
func TestStreamsWithNoTokens(t *testing.T) {
	gen := &scriptGen{failAt: -1, route: "local"}
	url := serve(t, gen, Options{})
	evs := readAllEvents(t, post(t, url+"/v1/messages", strings.TrimSuffix(msgBody, "}")+`,"stream":true}`, nil).Body)
	if len(evs) != 5 || evs[0].name != "message_start" || evs[4].name != "message_stop" {
		t.Errorf("anthropic events %+v", evs)
	}
	evs = readAllEvents(t, post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, nil).Body)
	if len(evs) != 2 || evs[1].data != "[DONE]" || !strings.Contains(evs[0].data, `"role":"assistant"`) {
		t.Errorf("openai events %+v", evs)
	}
}

func TestValidation(t *testing.T) {
	gen := &scriptGen{tokens: []string{"ok"}, failAt: -1}
	url := serve(t, gen, Options{MaxOutputTokens: 100, Models: func() []Model { return []Model{{ID: "edge-small"}} }})
	chat := func(extra string) string {
		return `{"messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	msgs := func(extra string) string {
		return `{"model":"auto","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	tests := []struct {
		name, path, body string
		hdr              map[string]string
		status           int
		param            string
	}{
		{"chat ok", "/v1/chat/completions", chat(""), nil, 200, ""},
		{"chat max_tokens 0", "/v1/chat/completions", chat(`,"max_tokens":0`), nil, 400, "max_tokens"},
		{"chat max_tokens negative", "/v1/chat/completions", chat(`,"max_tokens":-5`), nil, 400, "max_tokens"},
		{"chat max_tokens over limit", "/v1/chat/completions", chat(`,"max_tokens":101`), nil, 400, "max_tokens"},
		{"chat max_completion_tokens 0", "/v1/chat/completions", chat(`,"max_completion_tokens":0`), nil, 400, "max_completion_tokens"},
		{"chat max_tokens at limit", "/v1/chat/completions", chat(`,"max_tokens":100`), nil, 200, ""},
		{"chat temperature name", "/v1/chat/completions", chat(`,"temperature":"low"`), nil, 200, ""},
		{"chat temperature bad name", "/v1/chat/completions", chat(`,"temperature":"hot"`), nil, 400, "temperature"},
		{"chat temperature too high", "/v1/chat/completions", chat(`,"temperature":2.5`), nil, 400, "temperature"},
		{"chat temperature bool", "/v1/chat/completions", chat(`,"temperature":true`), nil, 400, "temperature"},
		{"chat no messages", "/v1/chat/completions", `{"messages":[]}`, nil, 400, "messages"},
		{"chat tool role", "/v1/chat/completions", `{"messages":[{"role":"tool","content":"x"}]}`, nil, 400, "messages"},
		{"chat image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, nil, 400, "messages.content"},
		{"chat n=2", "/v1/chat/completions", chat(`,"n":2`), nil, 400, "n"},
		{"chat tools", "/v1/chat/completions", chat(`,"tools":[{"type":"function"}]`), nil, 400, "tools"},
		{"chat not json", "/v1/chat/completions", `{"messages":`, nil, 400, ""},
		{"chat listed model", "/v1/chat/completions", chat(`,"model":"edge-small"`), nil, 200, ""},
		{"chat unknown model", "/v1/chat/completions", chat(`,"model":"gpt-9"`), nil, 404, ""},
		{"chat stop too many", "/v1/chat/completions", chat(`,"stop":["a","b","c","d","e"]`), nil, 400, "stop"},
		{"route header", "/v1/chat/completions", chat(""), map[string]string{"x-phaseless-route": "cloud"}, 200, ""},
		{"route header bad", "/v1/chat/completions", chat(""), map[string]string{"x-phaseless-route": "mars"}, 400, "x-phaseless-route"},
		{"batch threshold low", "/v1/chat/completions", chat(""), map[string]string{"x-batch-threshold": "0.05"}, 400, "x-batch-threshold"},
		{"batch threshold ok", "/v1/chat/completions", chat(""), map[string]string{"x-batch-threshold": "0.5"}, 200, ""},
		{"cache ttl low", "/v1/chat/completions", chat(""), map[string]string{"x-cache-ttl": "299"}, 400, "x-cache-ttl"},
		{"cache ttl high", "/v1/chat/completions", chat(""), map[string]string{"x-cache-ttl": "3601"}, 400, "x-cache-ttl"},
		{"prefetch bad", "/v1/chat/completions", chat(""), map[string]string{"x-prefetch-hint": "max"}, 400, "x-prefetch-hint"},
		{"semantic ok", "/v1/chat/completions", chat(""), map[string]string{"x-semantic-mode": "hybrid"}, 200, ""},
		{"policy without dev", "/v1/chat/completions", chat(""), map[string]string{"x-phaseless-policy": "fifo"}, 400, "x-phaseless-policy"},
		{"messages ok", "/v1/messages", msgs(`,"max_tokens":10`), nil, 200, ""},
		{"messages max_tokens missing", "/v1/messages", msgs(""), nil, 400, "max_tokens"},
		{"messages max_tokens 0", "/v1/messages", msgs(`,"max_tokens":0`), nil, 400, "max_tokens"},
		{"messages max_tokens over", "/v1/messages", msgs(`,"max_tokens":4096`), nil, 400, "max_tokens"},
		{"messages model missing", "/v1/messages", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, nil, 400, "model"},
		{"messages system role", "/v1/messages", `{"model":"auto","messages":[{"role":"system","content":"hi"}],"max_tokens":5}`, nil, 400, "messages"},
		{"messages temperature name", "/v1/messages", msgs(`,"max_tokens":5,"temperature":"balanced"`), nil, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, url+tt.path, tt.body, tt.hdr)
			if resp.StatusCode != tt.status {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.status == 200 {
				return
			}
			if tt.path == "/v1/messages" {
				e := decode[antErrorBody](t, resp.Body)
				if e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
					t.Errorf("anthropic error shape %+v", e)
				}
				if tt.param != "" && !strings.Contains(e.Error.Message, tt.param) {
					t.Errorf("message %q does not name %s", e.Error.Message, tt.param)
				}
				return
			}
			e := decode[oaiErrorBody](t, resp.Body)
			if e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
				t.Errorf("openai error shape %+v", e)
			}
			if tt.param != "" && (e.Error.Param == nil || *e.Error.Param != tt.param) {
				t.Errorf("param %v, want %s", e.Error.Param, tt.param)
			}
		})
	}
	// The hints reach the generator decoded.
	post(t, url+"/v1/chat/completions", chat(`,"temperature":"low"`), map[string]string{"x-phaseless-route": "Local", "x-cache-ttl": "600", "x-batch-threshold": "0.3"})
	req := gen.request()
	if req.Temperature != 0.2 || req.Hints.Route != "local" || req.Hints.CacheTTL != 600*time.Second || req.Hints.BatchThreshold != 0.3 {
		t.Errorf("decoded %+v hints %+v", req, req.Hints)
	}
}

// Header blocks over 8 KiB get a 431 in the API's own shape, not net/http's
// bare-text one.
func TestHeaderBlockTooLarge(t *testing.T) {
	url := serve(t, &scriptGen{tokens: []string{"ok"}, failAt: -1}, Options{})
	big := strings.Repeat("x", 9<<10)
	resp := post(t, url+"/v1/chat/completions", chatBody, map[string]string{"x-padding": big})
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d", resp.StatusCode)
	}
	e := decode[oaiErrorBody](t, resp.Body)
	if e.Error.Code == nil || *e.Error.Code != "headers_too_large" || !strings.Contains(e.Error.Message, "8192") {
		t.Errorf("error %+v", e.Error)
	}
	resp = post(t, url+"/v1/messages", msgBody, map[string]string{"x-padding": big})
	a := decode[antErrorBody](t, resp.Body)
	if resp.StatusCode != 431 || a.Type != "error" || a.Error.Type != "invalid_request_error" {
		t.Errorf("anthropic %d %+v", resp.StatusCode, a)
	}
	// Just under the limit passes.
	resp = post(t, url+"/v1/chat/completions", chatBody, map[string]string{"x-padding": strings.Repeat("x", 7<<10)})
	if resp.StatusCode != 200 {
		t.Errorf("7 KiB header: status %d", resp.StatusCode)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err       error
		status    int
		oaiType   string
		antType   string
		budgetHdr string
	}{
		{&llm.Error{Code: llm.CodeBudget, Message: "over budget", RetryAfter: 1500 * time.Millisecond, BudgetRemaining: 12, HasBudget: true}, 429, "rate_limit_error", "rate_limit_error", "12"},
		{llm.Errorf(llm.CodeOverloaded, "queue full"), 503, "server_error", "overloaded_error", ""},
		{llm.Errorf(llm.CodeUnavailable, "no engine"), 503, "server_error", "api_error", ""},
		{llm.Errorf(llm.CodeInvalid, "prompt too long"), 400, "invalid_request_error", "invalid_request_error", ""},
		{llm.Errorf(llm.CodeContextLength, "prompt of 300 tokens does not fit the context of 256"), 400, "invalid_request_error", "invalid_request_error", ""},
		{llm.Errorf(llm.CodeTimeout, "slow"), 504, "server_error", "api_error", ""},
		{errors.New("boom"), 500, "server_error", "api_error", ""},
	}
	for _, tt := range tests {
		t.Run(string(llm.CodeOf(tt.err)), func(t *testing.T) {
			gen := &scriptGen{tokens: []string{"never"}, failAt: 0, err: tt.err, route: "cloud"}
			url := serve(t, gen, Options{})
			for _, stream := range []bool{false, true} {
				s := ""
				if stream {
					s = `,"stream":true`
				}
				resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]`+s+`}`, nil)
				if resp.StatusCode != tt.status || resp.Header.Get("x-burst-budget-remaining") != tt.budgetHdr {
					t.Errorf("openai stream=%v: status %d budget %q", stream, resp.StatusCode, resp.Header.Get("x-burst-budget-remaining"))
				}
				if e := decode[oaiErrorBody](t, resp.Body); e.Error.Type != tt.oaiType {
					t.Errorf("openai type %q", e.Error.Type)
				}
				if tt.status == 429 && resp.Header.Get("Retry-After") != "2" {
					t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
				}
				resp = post(t, url+"/v1/messages", strings.TrimSuffix(msgBody, "}")+s+`}`, nil)
				if resp.StatusCode != tt.status {
					t.Errorf("anthropic stream=%v: status %d", stream, resp.StatusCode)
				}
				if e := decode[antErrorBody](t, resp.Body); e.Type != "error" || e.Error.Type != tt.antType {
					t.Errorf("anthropic error %+v", e)
				}
			}
		})
	}
}

// A failure after tokens were streamed ends the stream with an error event;
// the success terminators ([DONE], message_stop) must not appear.
func TestErrorAfterTokens(t *testing.T) {
	gen := &scriptGen{tokens: []string{"a", "b", "c"}, failAt: 2, err: llm.Errorf(llm.CodeUnavailable, "cloud link lost")}
	reg := metrics.NewRegistry()
	url := serve(t, gen, Options{Metrics: reg})
	evs := readAllEvents(t, post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, nil).Body)
	if len(evs) != 3 {
		t.Fatalf("openai events %+v", evs)
	}
	last := decodeString[oaiErrorBody](t, evs[2].data)
	if last.Error.Message != "cloud link lost" || last.Error.Type != "server_error" {
		t.Errorf("openai error event %s", evs[2].data)
	}
	evs = readAllEvents(t, post(t, url+"/v1/messages", strings.TrimSuffix(msgBody, "}")+`,"stream":true}`, nil).Body)
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
	}
	if strings.Join(names, " ") != "message_start content_block_start content_block_delta content_block_delta error" {
		t.Fatalf("anthropic events %v", names)
	}
	if a := decodeString[antErrorBody](t, evs[4].data); a.Type != "error" || a.Error.Message != "cloud link lost" {
		t.Errorf("anthropic error event %s", evs[4].data)
	}
	var text strings.Builder
	reg.WriteText(&text)
	if !strings.Contains(text.String(), "phaseless_api_stream_errors_total 2") {
		t.Errorf("stream error metric missing:\n%s", text.String())
	}
}

// A client that goes away cancels the generator's context.
func TestClientDisconnectCancels(t *testing.T) {
	gen := &scriptGen{blockCh: make(chan struct{})}
	url := serve(t, gen, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"stream":true}`))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-gen.blockCh // the generator is running
	cancel()
	<-errc
	deadline := time.After(10 * time.Second) // hang guard only
	for {
		gen.mu.Lock()
		cause := gen.ctxCause
		gen.mu.Unlock()
		if cause != nil {
			if !errors.Is(cause, context.Canceled) {
				t.Errorf("generator ctx ended with %v", cause)
			}
			return
		}
		select {
		case <-deadline:
			t.Fatal("generator context was not cancelled after the client left")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestModelsAndRoutes(t *testing.T) {
	url := serve(t, &scriptGen{}, Options{Models: func() []Model { return []Model{{ID: "edge-small", OwnedBy: "device"}} }})
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	l := decode[struct {
		Object string
		Data   []struct{ ID, Object string }
	}](t, resp.Body)
	if l.Object != "list" || len(l.Data) != 2 || l.Data[0].ID != "auto" || l.Data[1].ID != "edge-small" || l.Data[1].Object != "model" {
		t.Errorf("openai models %+v", l)
	}
	req, _ := http.NewRequest("GET", url+"/v1/models", nil)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	a := decode[struct {
		Data []struct{ Type, ID string }
	}](t, resp2.Body)
	if len(a.Data) != 2 || a.Data[0].Type != "model" {
		t.Errorf("anthropic models %+v", a)
	}
	resp3, err := http.Get(url + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp3.Body.Close()
	if resp3.StatusCode != 405 {
		t.Errorf("GET chat: %d", resp3.StatusCode)
	}
	resp4 := post(t, url+"/v1/embeddings", "{}", nil)
	if resp4.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp4.StatusCode)
	}
}

func TestAuthenticate(t *testing.T) {
	gen := &scriptGen{tokens: []string{"ok"}, failAt: -1}
	url := serve(t, gen, Options{Authenticate: func(r *http.Request) (string, error) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key == "" {
			key = r.Header.Get("x-api-key")
		}
		if key != "sk-good" {
			return "", errors.New("unknown API key")
		}
		return "tenant-a", nil
	}})
	resp := post(t, url+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer sk-bad"})
	if e := decode[oaiErrorBody](t, resp.Body); resp.StatusCode != 401 || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" {
		t.Errorf("bad key: %d %+v", resp.StatusCode, e)
	}
	resp = post(t, url+"/v1/messages", msgBody, map[string]string{"x-api-key": "nope"})
	if e := decode[antErrorBody](t, resp.Body); resp.StatusCode != 401 || e.Error.Type != "authentication_error" {
		t.Errorf("anthropic bad key: %d %+v", resp.StatusCode, e)
	}
	resp = post(t, url+"/v1/messages", msgBody, map[string]string{"x-api-key": "sk-good"})
	if resp.StatusCode != 200 || gen.request().Tenant != "tenant-a" {
		t.Errorf("good key: %d tenant %q", resp.StatusCode, gen.request().Tenant)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{MaxOutputTokens: -1}, {MaxOutputTokens: 10, DefaultOutputTokens: 11}, {MaxHeaderBytes: ServerMaxHeaderBytes}, {MaxBodyBytes: -1}} {
		if _, err := NewHandler(&scriptGen{}, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := NewHandler(nil, Options{}); err == nil {
		t.Error("nil generator accepted")
	}
}

// TestCloudRefusesRouteLocal: the cloud cannot honour x-phaseless-route:
// local (the device's own engine), so it refuses it in each API's shape
// instead of answering a request the app meant to keep on the device.
func TestCloudRefusesRouteLocal(t *testing.T) {
	url := serve(t, &scriptGen{tokens: []string{"ok"}, failAt: -1}, Options{Cloud: true})
	local := map[string]string{"x-phaseless-route": "local"}
	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, local)
	if e := decode[oaiErrorBody](t, resp.Body); resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "x-phaseless-route" {
		t.Fatalf("openai: %d %+v", resp.StatusCode, e)
	}
	resp = post(t, url+"/v1/messages", `{"model":"auto","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, local)
	if e := decode[antErrorBody](t, resp.Body); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "x-phaseless-route") {
		t.Fatalf("anthropic: %d %+v", resp.StatusCode, e)
	}
	for _, route := range []string{"cloud", "auto"} {
		if resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, map[string]string{"x-phaseless-route": route}); resp.StatusCode != 200 {
			t.Fatalf("route %s on the cloud: %d", route, resp.StatusCode)
		}
	}
}
