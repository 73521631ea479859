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

// TestOfficialSDKToolsAgainstAgent calls the agent's built-in engine
// through the official SDKs with tools and a JSON schema. Which call the
// model picks is its own business (models/edgemodel measures that); that
// every call comes back well-formed is the grammar's: the SDKs parse each
// call's arguments, and they must name an offered tool (the one
// tool_choice named) with values the schema allows.
func TestOfficialSDKToolsAgainstAgent(t *testing.T) {
	dir := sdktest.Dir(t)
	_, url := startAgent(t, testConfig(t))
	type call struct {
		Name      string
		Arguments map[string]any
	}
	type result struct {
		Check, Finish, Stop string
		Calls               []call
		Parsed              map[string]any
	}
	res := map[string]result{}
	for _, r := range sdktest.Run[result](t, dir, "agent-tools.mjs", url) {
		res[r.Check] = r
	}
	validArgs := func(c call) bool {
		switch c.Name {
		case "set_fan_speed":
			l, ok := c.Arguments["level"].(float64)
			return ok && len(c.Arguments) == 1 && l >= 0 && l <= 5 && l == float64(int(l))
		case "set_window":
			w, a := c.Arguments["window"], c.Arguments["action"]
			return len(c.Arguments) == 2 && (w == "driver" || w == "passenger") && (a == "open" || a == "close")
		}
		return false
	}
	for _, check := range []string{"openai.tools", "openai.stream.tools", "anthropic.stream.tools"} {
		r := res[check]
		if len(r.Calls) == 0 || (r.Finish != "tool_calls" && r.Stop != "tool_use") {
			t.Errorf("%s: %+v", check, r)
		}
		for _, c := range r.Calls {
			if !validArgs(c) || check == "openai.stream.tools" && c.Name != "set_window" {
				t.Errorf("%s: call %+v", check, c)
			}
		}
	}
	if r := res["openai.parse"]; r.Finish != "stop" || !validArgs(call{Name: "set_window", Arguments: r.Parsed}) {
		t.Errorf("openai.parse %+v", r)
	}
}
