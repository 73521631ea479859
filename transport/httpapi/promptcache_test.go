package httpapi

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// cacheGen records the request and reports cache writes for its breakpoints.
type cacheGen struct {
	mu  sync.Mutex // guards got
	got *llm.Request
}

func (g *cacheGen) Generate(_ context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	g.mu.Lock()
	g.got = req
	g.mu.Unlock()
	if err := emit(llm.Token{Text: "ok"}); err != nil {
		return llm.Final{}, err
	}
	fin := llm.Final{PromptTokens: 40, CompletionTokens: 1, FinishReason: "stop"}
	if len(req.CacheBreakpoints) > 0 {
		fin.CacheWriteTokens = 32
	}
	return fin, nil
}

func (g *cacheGen) breakpoints() []llm.CacheBreakpoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got.CacheBreakpoints
}

func TestPromptCacheBreakpoints(t *testing.T) {
	gen := &cacheGen{}
	url := serve(t, gen, Options{})
	bp := func(m, c int, ttl time.Duration) llm.CacheBreakpoint {
		return llm.CacheBreakpoint{Message: m, Chars: c, TTL: ttl}
	}
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
		want             []llm.CacheBreakpoint
	}{
		{"anthropic system block", "/v1/messages",
			`{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
			nil, []llm.CacheBreakpoint{bp(0, 9, 5*time.Minute)}},
		{"anthropic 1h on a message block", "/v1/messages",
			`{"model":"auto","max_tokens":4,"system":"S","messages":[{"role":"user","content":[{"type":"text","text":"ab","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"cd"}]}]}`,
			nil, []llm.CacheBreakpoint{bp(1, 2, time.Hour)}},
		{"x-cache-ttl is the default lifetime", "/v1/messages",
			`{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
			map[string]string{"x-cache-ttl": "900"}, []llm.CacheBreakpoint{bp(0, 9, 15*time.Minute)}},
		{"x-cache-ttl alone pins the whole prompt (anthropic)", "/v1/messages",
			`{"model":"auto","max_tokens":4,"system":"S","messages":[{"role":"user","content":"hello"}]}`,
			map[string]string{"x-cache-ttl": "600"}, []llm.CacheBreakpoint{bp(1, 5, 10*time.Minute)}},
		{"x-cache-ttl alone pins the whole prompt (openai)", "/v1/chat/completions",
			`{"model":"auto","max_tokens":4,"messages":[{"role":"system","content":"S"},{"role":"user","content":"hello"}]}`,
			map[string]string{"x-cache-ttl": "3600"}, []llm.CacheBreakpoint{bp(1, 5, time.Hour)}},
		{"anthropic tools, then the system prompt", "/v1/messages",
			`{"model":"auto","max_tokens":4,"tools":[{"name":"a","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"1h"}}],` +
				`"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
			nil, []llm.CacheBreakpoint{{Tools: 2, TTL: time.Hour}, bp(0, 9, 5*time.Minute)}},
		{"anthropic breakpoint after the first tool", "/v1/messages",
			`{"model":"auto","max_tokens":4,"tools":[{"name":"a","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}},{"name":"b","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`,
			map[string]string{"x-cache-ttl": "600"}, []llm.CacheBreakpoint{{Tools: 1, TTL: 10 * time.Minute}}},
		{"openai function tool", "/v1/chat/completions",
			`{"model":"auto","max_tokens":4,"tools":[{"type":"function","function":{"name":"a"},"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
			nil, []llm.CacheBreakpoint{{Tools: 1, TTL: 5 * time.Minute}}},
		{"anthropic parallel tool results, then text", "/v1/messages",
			`{"model":"auto","max_tokens":4,"tools":[{"name":"a","input_schema":{"type":"object"}}],"messages":[` +
				`{"role":"user","content":"turn both on"},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}},{"type":"tool_use","id":"t2","name":"a","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok-a","cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"t2","content":"ok-b"},{"type":"text","text":"and then?","cache_control":{"type":"ephemeral"}}]},` +
				`{"role":"assistant","content":"done"},{"role":"user","content":[{"type":"text","text":"thanks","cache_control":{"type":"ephemeral"}}]}]}`,
			// turns: 0 user, 1 assistant calls, 2-3 tool results, 4 user text, 5 assistant, 6 user
			nil, []llm.CacheBreakpoint{bp(2, 4, 5*time.Minute), bp(4, 9, 5*time.Minute), bp(6, 6, 5*time.Minute)}},
		{"nothing asked, nothing pinned", "/v1/chat/completions",
			`{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, url+tc.path, tc.body, tc.hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := gen.breakpoints(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("breakpoints %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPromptCacheUsage(t *testing.T) {
	url := serve(t, &cacheGen{}, Options{})
	body := `{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`
	m := decode[antMessage](t, post(t, url+"/v1/messages", body, nil).Body)
	if m.Usage.CacheCreationInputTokens != 32 || m.Usage.InputTokens != 8 {
		t.Fatalf("usage %+v, want 32 written and 8 uncached input", m.Usage)
	}
	stream := post(t, url+"/v1/messages", strings.Replace(body, `"max_tokens":4`, `"max_tokens":4,"stream":true`, 1), nil)
	var delta string
	for _, ev := range readAllEvents(t, stream.Body) {
		if ev.name == "message_delta" {
			delta = ev.data
		}
	}
	if !strings.Contains(delta, `"cache_creation_input_tokens":32`) {
		t.Fatalf("message_delta %s lacks the cache writes", delta)
	}
}

func TestPromptCacheRejects(t *testing.T) {
	url := serve(t, &cacheGen{}, Options{})
	mark := func(cc string) string {
		return `{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"S","cache_control":` + cc + `}],"messages":[{"role":"user","content":"hi"}]}`
	}
	five := `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":[` +
		strings.Repeat(`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},`, 4) +
		`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}]}`
	for _, tc := range []struct{ name, body, param string }{
		{"type", mark(`{"type":"persistent"}`), "system.cache_control"},
		{"ttl", mark(`{"type":"ephemeral","ttl":"2h"}`), "system.cache_control"},
		{"five breakpoints", five, "cache_control"},
		{"tools not rendered", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"none"},"tools":[{"name":"x","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]}`, "tools.0.cache_control"},
		{"tool ttl", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"x","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"1d"}}]}`, "tools.0.cache_control"},
		{"empty system", `{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`, "system.cache_control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, url+"/v1/messages", tc.body, nil)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			e := decode[struct {
				Error struct{ Message string } `json:"error"`
			}](t, resp.Body)
			if !strings.Contains(e.Error.Message, tc.param) && !strings.Contains(e.Error.Message, "cache_control") {
				t.Fatalf("error %q does not name %s", e.Error.Message, tc.param)
			}
		})
	}
}

// FuzzPromptCache: on any body either decoder accepts, the cache
// breakpoints are refused with a 400 or fit the decoded prompt.
func FuzzPromptCache(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"ab","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"cd"}]}]}`,
		`{"model":"auto","max_tokens":4,"system":[{"type":"text","text":"","cache_control":{"type":"x"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","max_tokens":4,"tools":[{"name":"a","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","max_tokens":4,"tools":[{"type":"function","function":{"name":"a"},"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`,
	} {
		f.Add([]byte(s), false, 0)
		f.Add([]byte(s), true, 300)
	}
	lim := limits{maxTokens: DefaultMaxOutputTokens, defaultTokens: DefaultOutputTokens}
	f.Fuzz(func(t *testing.T, body []byte, anthropic bool, ttlSeconds int) {
		var req *llm.Request
		var e *apiError
		a := apiOpenAI
		if anthropic {
			a = apiAnthropic
			req, _, e = decodeMessages(body, lim)
		} else {
			req, _, e = decodeChat(body, lim)
		}
		if e != nil {
			return
		}
		if ttlSeconds >= 300 && ttlSeconds <= 3600 {
			req.Hints.CacheTTL = time.Duration(ttlSeconds) * time.Second
		}
		if e := promptCache(a, body, req); e != nil {
			if e.status != 400 || e.message == "" {
				t.Fatalf("bad rejection %+v", e)
			}
			return
		}
		if err := req.CheckCache(); err != nil {
			t.Fatalf("accepted breakpoints that do not fit: %v", err)
		}
	})
}
