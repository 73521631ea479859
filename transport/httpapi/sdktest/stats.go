package sdktest

import "testing"

// CheckStats checks the lines stats.mjs printed for an answer of
// text whose prompt had prompt tokens, cached of them from the prefix
// cache. transport/httpapi and the agent share it.
func CheckStats(t testing.TB, results map[string]map[string]any, text string, prompt, cached float64) {
	t.Helper()
	get := func(check string, path ...string) any {
		var v any = results[check]
		for _, k := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		}
		return v
	}
	for _, w := range []struct {
		got  any
		want any
		what string
	}{
		{get("openai.stream", "text"), text, "openai stream text"},
		{get("openai.stream", "finish"), "stop", "openai stream finish"},
		{get("openai.stream", "usage", "prompt_tokens"), prompt, "openai stream prompt tokens"},
		{get("openai.stream", "usage", "prompt_tokens_details", "cached_tokens"), cached, "openai stream cached tokens"},
		{get("openai.create", "text"), text, "openai create text"},
		{get("openai.create", "usage", "prompt_tokens_details", "cached_tokens"), cached, "openai create cached tokens"},
		{get("anthropic.stream", "text"), text, "anthropic stream text"},
		{get("anthropic.stream", "usage", "input_tokens"), prompt - cached, "anthropic stream input tokens"},
		{get("anthropic.stream", "usage", "cache_read_input_tokens"), cached, "anthropic stream cache reads"},
		{get("anthropic.create", "usage", "cache_read_input_tokens"), cached, "anthropic create cache reads"},
	} {
		if w.got != w.want {
			t.Errorf("%s = %v, want %v", w.what, w.got, w.want)
		}
	}
	if e, _ := get("openai.create", "efficiency").(string); e == "" {
		t.Errorf("openai create: no %s header", "x-phaseless-prefix-cache-efficiency")
	}
	events, _ := get("anthropic.stream", "events").([]any)
	if len(events) == 0 || events[0] != "message_start" || events[len(events)-1] != "message_stop" {
		t.Errorf("anthropic stream events: %v", events)
	}
}
