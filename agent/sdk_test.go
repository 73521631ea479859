package agent

import (
	"testing"

	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// TestOfficialSDKsAgainstAgent runs the official OpenAI and Anthropic Node
// SDKs, unchanged, against a real agent with its built-in engine: both APIs,
// streaming and not, the model list and a validation error. The stand-in
// model's text is noise, so the test checks shapes, counts and headers.
func TestOfficialSDKsAgainstAgent(t *testing.T) {
	dir := sdktest.Dir(t) // transport/httpapi's SDK test installs them (sdktest.Install)
	a, url := startAgent(t, testConfig(t))
	type usage struct {
		CompletionTokens int `json:"completion_tokens"`
		OutputTokens     int `json:"output_tokens"`
		InputTokens      int `json:"input_tokens"`
	}
	type result struct {
		Check, Text, Finish, Stop, Route, Name, Type string
		Usage                                        *usage
		Events, IDs                                  []string
		Threw                                        bool
		Status                                       int
	}
	res := map[string]result{}
	for _, r := range sdktest.Run[result](t, dir, "agent.mjs", url) {
		res[r.Check] = r
	}
	if r := res["openai.create"]; r.Route != "local" || r.Usage == nil || r.Usage.CompletionTokens < 1 || (r.Finish != "stop" && r.Finish != "length") {
		t.Errorf("openai.create %+v", r)
	}
	if r := res["openai.stream"]; r.Usage == nil || r.Usage.CompletionTokens < 1 || (r.Finish != "stop" && r.Finish != "length") {
		t.Errorf("openai.stream %+v", r)
	}
	if r := res["anthropic.create"]; r.Usage == nil || r.Usage.OutputTokens < 1 || r.Usage.InputTokens < 1 || (r.Stop != "end_turn" && r.Stop != "max_tokens") {
		t.Errorf("anthropic.create %+v", r)
	}
	r := res["anthropic.stream"]
	if r.Usage == nil || r.Usage.OutputTokens < 1 || len(r.Events) < 6 || r.Events[0] != "message_start" || r.Events[1] != "content_block_start" ||
		r.Events[len(r.Events)-3] != "content_block_stop" || r.Events[len(r.Events)-2] != "message_delta" || r.Events[len(r.Events)-1] != "message_stop" {
		t.Errorf("anthropic.stream %+v", r)
	}
	for _, e := range r.Events[2 : len(r.Events)-3] {
		if e != "content_block_delta" {
			t.Errorf("unexpected event %q between the block's start and stop", e)
		}
	}
	if r := res["openai.models"]; len(r.IDs) != 2 || r.IDs[0] != "auto" || r.IDs[1] != a.engine.name {
		t.Errorf("models %+v", r)
	}
	if r := res["anthropic.too_many_tokens"]; !r.Threw || r.Status != 400 || r.Name != "BadRequestError" || r.Type != "invalid_request_error" {
		t.Errorf("validation error %+v", r)
	}
}
