package agent

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/transport/httpapi"
	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// TestAgentStreamStatsWithSDKs runs the official SDKs against a real agent
// whose streams carry the stats field (checked in the raw bytes first): the
// SDKs read text, events and the cached-token usage fields of each API, and
// the two APIs agree on the prompt's size.
func TestAgentStreamStatsWithSDKs(t *testing.T) {
	dir := sdktest.Dir(t)
	_, url := startAgent(t, testConfig(t))
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(raw); !strings.Contains(s, httpapi.StatsField+`: {"gen_us":`) || !strings.Contains(s, `"prefix_cache_efficiency":`) {
		t.Fatalf("agent stream lacks the stats field:\n%s", s)
	}

	res := map[string]map[string]any{}
	for _, r := range sdktest.Run[map[string]any](t, dir, "stats.mjs", url) {
		res[r["check"].(string)] = r
	}
	num := func(check string, path ...string) float64 {
		var v any = res[check]
		for _, k := range path {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		f, ok := v.(float64)
		if !ok {
			t.Errorf("%s %s: %v is not a number", check, strings.Join(path, "."), v)
		}
		return f
	}
	for _, c := range []string{"openai.stream", "openai.create", "anthropic.stream", "anthropic.create"} {
		if s, _ := res[c]["text"].(string); s == "" {
			t.Errorf("%s: no text: %v", c, res[c])
		}
	}
	prompt := num("openai.stream", "usage", "prompt_tokens")
	for _, c := range []string{"openai.stream", "openai.create"} {
		if cached := num(c, "usage", "prompt_tokens_details", "cached_tokens"); cached < 0 || cached > prompt {
			t.Errorf("%s: cached_tokens %v of %v", c, cached, prompt)
		}
	}
	// The raw request above sent the same prompt first, so the engine's
	// prefix cache must have served part of it.
	if num("openai.create", "usage", "prompt_tokens_details", "cached_tokens") == 0 {
		t.Errorf("a repeated prompt reported no cached tokens: %v", res["openai.create"])
	}
	for _, c := range []string{"anthropic.stream", "anthropic.create"} {
		if in, hit := num(c, "usage", "input_tokens"), num(c, "usage", "cache_read_input_tokens"); in+hit != prompt {
			t.Errorf("%s: input_tokens %v + cache_read_input_tokens %v, want the prompt's %v", c, in, hit, prompt)
		}
	}
}
