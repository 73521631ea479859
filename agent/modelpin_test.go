package agent

import (
	"context"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

type routeRecorder struct{ route string }

func (r *routeRecorder) Generate(_ context.Context, req *llm.Request, _ llm.Emit) (llm.Final, error) {
	r.route = req.Hints.Route
	return llm.Final{}, nil
}

// TestModelPin: naming the local model pins the local path; "auto" leaves
// the router its choice; asking for the cloud with the local model is a 400.
func TestModelPin(t *testing.T) {
	for _, c := range []struct {
		model, hint, want string
		invalid           bool
	}{
		{"phaseless-edge", "", "local", false},
		{"phaseless-edge", "auto", "local", false},
		{"phaseless-edge", "local", "local", false},
		{"auto", "", "", false},
		{"auto", "cloud", "cloud", false},
		{"phaseless-edge", "cloud", "", true},
	} {
		rec := &routeRecorder{}
		req := &llm.Request{Model: c.model, Hints: llm.Hints{Route: c.hint}}
		_, err := modelPin{next: rec, local: "phaseless-edge"}.Generate(context.Background(), req, nil)
		if c.invalid {
			if llm.CodeOf(err) != llm.CodeInvalid {
				t.Errorf("%+v: err %v, want invalid", c, err)
			}
			continue
		}
		if err != nil || rec.route != c.want {
			t.Errorf("%+v: route %q err %v, want %q", c, rec.route, err, c.want)
		}
	}
}

// TestAgentModelPinWired: the agent's API runs through the pin: its own
// model with a cloud route is refused, an unlisted model is a 404.
func TestAgentModelPinWired(t *testing.T) {
	a, url := startAgent(t, testConfig(t))
	body := `{"model":"` + a.engine.name + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	if resp := post(t, url+"/v1/chat/completions", body, "x-phaseless-route", "cloud"); resp.StatusCode != 400 {
		t.Errorf("local model with route cloud: %d, want 400", resp.StatusCode)
	}
	if resp := post(t, url+"/v1/chat/completions", body); resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" {
		t.Errorf("local model: %d route %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
	}
	if resp := post(t, url+"/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); resp.StatusCode != 404 {
		t.Errorf("unlisted model: %d, want 404", resp.StatusCode)
	}
}
