package worker

import (
	"testing"

	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// TestOfficialSDKPromptCache: the official SDKs' prompt caching against a
// built-in engine behind the compatible API. Anthropic cache_control on a
// tool pins the tools prefix: the first request writes it, the second
// (same tool, another system prompt and question) reads it and writes
// nothing, and reads less than its whole prompt (the pin ends at the
// tools). OpenAI's x-cache-ttl pins the whole prompt; the repeat reads it
// as prompt_tokens_details.cached_tokens.
func TestOfficialSDKPromptCache(t *testing.T) {
	dir := sdktest.Dir(t) // transport/httpapi's SDK test installs them (sdktest.Install)
	srv, _ := phaselessServer(t)
	type usage struct {
		Input         float64 `json:"input_tokens"`
		CacheCreation float64 `json:"cache_creation_input_tokens"`
		CacheRead     float64 `json:"cache_read_input_tokens"`
		Prompt        float64 `json:"prompt_tokens"`
		Details       struct {
			Cached float64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	got := map[string]usage{}
	for _, r := range sdktest.Run[struct {
		Check string `json:"check"`
		Usage usage  `json:"usage"`
	}](t, dir, "cache.mjs", srv.URL) {
		got[r.Check] = r.Usage
	}
	a0, a1 := got["anthropic.tools.0"], got["anthropic.tools.1"]
	switch {
	case a0.CacheCreation == 0:
		t.Errorf("first Anthropic request wrote nothing to the cache: %+v", a0)
	case a1.CacheCreation != 0 || a1.CacheRead < a0.CacheCreation:
		t.Errorf("second Anthropic request wrote %v and read %v, want 0 and at least the %v pinned", a1.CacheCreation, a1.CacheRead, a0.CacheCreation)
	case a1.Input == 0:
		t.Errorf("second Anthropic request read its whole prompt from a tools-only pin: %+v", a1)
	}
	o0, o1 := got["openai.ttl.0"], got["openai.ttl.1"]
	if o1.Details.Cached == 0 || o1.Details.Cached > o1.Prompt || o0.Prompt != o1.Prompt {
		t.Errorf("OpenAI repeat under x-cache-ttl: %+v after %+v, want cached tokens", o1, o0)
	}
}
