package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

func newClient(t *testing.T, cfg ClientConfig) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestClientAgainstHandler: the client and this package's own server agree
// on the whole stream: tokens one by one, usage, finish reason, the model
// mapping and the sampling fields.
func TestClientAgainstHandler(t *testing.T) {
	gen := &scriptGen{tokens: []string{"Turn", "ing", " on"}, failAt: -1}
	base := serve(t, gen, Options{Models: func() []Model { return []Model{{ID: "tiny"}} }})
	for _, u := range []string{base, base + "/", base + "/v1", base + "/v1/"} {
		c := newClient(t, ClientConfig{URL: u, Model: func(string) string { return "tiny" }})
		if got := c.V1("/models"); got != base+"/v1/models" {
			t.Fatalf("%s: V1 = %s", u, got)
		}
		var toks []string
		req := &llm.Request{ID: "r1", Model: "auto", MaxTokens: 3, Temperature: 0.5, TopP: 0.9, Stop: []string{"\n"},
			Messages: []llm.Message{{Role: "user", Content: "hi"}}}
		fin, err := c.Generate(context.Background(), req, func(tk llm.Token) error {
			if tk.ID != -1 {
				t.Errorf("token id %d; an upstream's ids are unknown (-1)", tk.ID)
			}
			toks = append(toks, tk.Text)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if strings.Join(toks, "|") != "Turn|ing| on" || fin.PromptTokens != 7 || fin.CompletionTokens != 3 ||
			fin.FinishReason != "length" || fin.TTFT <= 0 || fin.TTFT > fin.Total {
			t.Fatalf("%s: tokens %q final %+v", u, toks, fin)
		}
		got := gen.request()
		if got.Model != "tiny" || got.MaxTokens != 3 || got.Temperature != 0.5 || got.TopP != 0.9 || len(got.Stop) != 1 {
			t.Fatalf("%s: server saw %+v", u, got)
		}
		// A temperature the app left out is left out upstream, so the
		// server's model's own default applies there.
		req.Omitted = llm.FieldTemperature
		if _, err := c.Generate(context.Background(), req, func(llm.Token) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := gen.request(); got.Omitted&llm.FieldTemperature == 0 || got.Temperature != llm.DefaultTemperature {
			t.Fatalf("%s: an omitted temperature reached the server as %g, omitted %03b", u, got.Temperature, got.Omitted)
		}
	}
}

// TestClientEmitsBeforeStreamEnds: a token reaches emit while the server is
// still holding the next one back: nothing is buffered.
func TestClientEmitsBeforeStreamEnds(t *testing.T) {
	gen := &scriptGen{tokens: []string{"a", "b"}, failAt: -1, gate: make(chan struct{})}
	c := newClient(t, ClientConfig{URL: serve(t, gen, Options{})})
	var toks []string
	_, err := c.Generate(context.Background(), &llm.Request{MaxTokens: 4, Messages: []llm.Message{{Role: "user", Content: "x"}}},
		func(tk llm.Token) error {
			toks = append(toks, tk.Text)
			if len(toks) == 1 {
				gen.gate <- struct{}{} // the server sends "b" only after "a" arrived here
			}
			return nil
		})
	if err != nil || strings.Join(toks, "") != "ab" {
		t.Fatalf("tokens %q err %v", toks, err)
	}
}

func TestClientErrors(t *testing.T) {
	stall := make(chan struct{})
	mux := http.NewServeMux()
	route := func(name string, h http.HandlerFunc) { mux.HandleFunc("/"+name+"/v1/chat/completions", h) }
	status := func(code int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(code)
			fmt.Fprint(w, body)
		}
	}
	route("ratelimit", status(http.StatusTooManyRequests, `{"error":{"message":"slow down","type":"rate_limit_error"}}`))
	route("unavailable", status(http.StatusServiceUnavailable, `{"error":{"message":"busy","type":"server_error"}}`))
	route("bad", status(http.StatusBadRequest, `{"error":{"message":"max_tokens too large"}}`))
	route("context", status(http.StatusBadRequest, `{"error":{"message":"prompt too long for this model","type":"invalid_request_error","code":"context_length_exceeded"}}`))
	route("toolarge", status(http.StatusRequestEntityTooLarge, `too large`))
	route("unprocessable", status(http.StatusUnprocessableEntity, `{"detail":"x"}`))
	route("gwtimeout", status(http.StatusGatewayTimeout, ``))
	route("broken", status(http.StatusInternalServerError, `boom`))
	route("stall", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})
	route("midfail", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine overloaded\",\"type\":\"overloaded_error\"}}\n\n")
	})
	route("nodone", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
	})
	route("garbage", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "data: {\"choices\":\n\n") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(stall)
	cases := []struct {
		path  string
		want  llm.Code
		text  string
		retry time.Duration
	}{
		{"ratelimit", llm.CodeOverloaded, "slow down", 3 * time.Second},
		{"unavailable", llm.CodeOverloaded, "busy", 3 * time.Second},
		{"bad", llm.CodeInvalid, "max_tokens too large", 3 * time.Second},
		{"context", llm.CodeContextLength, "prompt too long", 3 * time.Second},
		{"toolarge", llm.CodeInvalid, "too large", 3 * time.Second},
		{"unprocessable", llm.CodeInvalid, `{"detail":"x"}`, 3 * time.Second},
		{"gwtimeout", llm.CodeTimeout, "504", 3 * time.Second},
		{"broken", llm.CodeInternal, "boom", 3 * time.Second},
		{"stall", llm.CodeTimeout, "no stream event", 0},
		{"midfail", llm.CodeOverloaded, "engine overloaded", 0},
		{"nodone", llm.CodeUnavailable, "without [DONE]", 0},
		{"garbage", llm.CodeInternal, "bad stream event", 0},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			cl := newClient(t, ClientConfig{URL: srv.URL + "/" + c.path, Name: "test server", TokenTimeout: 100 * time.Millisecond})
			_, err := cl.Generate(context.Background(), &llm.Request{MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: "x"}}},
				func(llm.Token) error { return nil })
			var le *llm.Error
			if !errors.As(err, &le) || le.Code != c.want || !strings.Contains(err.Error(), c.text) ||
				!strings.Contains(err.Error(), "test server") || le.RetryAfter != c.retry {
				t.Fatalf("err %v (%+v), want code %s with %q and Retry-After %v", err, le, c.want, c.text, c.retry)
			}
			if c.want == llm.CodeOverloaded && !le.Retryable {
				t.Fatal("overload not retryable")
			}
		})
	}

	// Nothing listening: unavailable.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cl := newClient(t, ClientConfig{URL: dead, ConnectTimeout: time.Second})
	if _, err := cl.Generate(context.Background(), &llm.Request{MaxTokens: 1}, func(llm.Token) error { return nil }); llm.CodeOf(err) != llm.CodeUnavailable {
		t.Fatalf("closed port: %v", err)
	}

	for _, bad := range []ClientConfig{{URL: ""}, {URL: "ftp://x"}, {URL: "127.0.0.1:8080"}, {URL: "http://"},
		{URL: dead, TokenTimeout: -1}, {URL: dead, MaxIdleConnsPerHost: -1}} {
		if _, err := NewClient(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestClientCancel: the caller leaving ends the generation on the server,
// and an error from emit comes back as it is.
func TestClientCancel(t *testing.T) {
	gen := &scriptGen{tokens: []string{"a", "b", "c"}, failAt: -1, gate: make(chan struct{})}
	c := newClient(t, ClientConfig{URL: serve(t, gen, Options{})})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Generate(ctx, &llm.Request{MaxTokens: 4, Messages: []llm.Message{{Role: "user", Content: "x"}}},
		func(llm.Token) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	gone := errors.New("client went away")
	gen2 := &scriptGen{tokens: []string{"a", "b"}, failAt: -1}
	c2 := newClient(t, ClientConfig{URL: serve(t, gen2, Options{})})
	_, err = c2.Generate(context.Background(), &llm.Request{MaxTokens: 4, Messages: []llm.Message{{Role: "user", Content: "x"}}},
		func(llm.Token) error { return gone })
	if err != gone {
		t.Fatalf("emit's error came back as %v", err)
	}
}

// FuzzParseStreamLine feeds single SSE lines, which come from another
// process and may be anything.
func FuzzParseStreamLine(f *testing.F) {
	for _, s := range []string{
		`data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}`,
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		`data: {"error":{"message":"boom","type":"server_error"}}`,
		`data: [DONE]`, `data:[DONE]`, `event: ping`, `: keep-alive`, ``, `data: {`, `data: null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, done, err := parseStreamLine(line, "fuzz")
		if err != nil {
			switch llm.CodeOf(err) {
			case llm.CodeInternal, llm.CodeOverloaded, llm.CodeInvalid:
			default:
				t.Fatalf("error %v not classified", err)
			}
			if c != nil || done {
				t.Fatalf("error %v with chunk %v done %v", err, c, done)
			}
			return
		}
		if done && c != nil {
			t.Fatal("both done and a chunk")
		}
	})
}

// FuzzDecodeStream feeds whole response bodies.
func FuzzDecodeStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"x\",\"type\":\"overloaded_error\"}}\n"))
	f.Add([]byte(": keep-alive\n\ndata: {\"choices\":[{\"delta\":{}}]}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		n := 0
		fin, err := decodeStream(context.Background(), strings.NewReader(string(body)), time.Now(), "fuzz", func() {}, func(tk llm.Token) error {
			if tk.Text == "" {
				t.Fatal("empty token emitted")
			}
			n++
			return nil
		})
		if err == nil && fin.FinishReason != "stop" && fin.FinishReason != "length" {
			t.Fatalf("finish reason %q", fin.FinishReason)
		}
		var le *llm.Error
		if err != nil && !errors.As(err, &le) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}
