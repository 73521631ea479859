package agent

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/transport/httpapi/sdktest"
)

// storiesModel is the real pretrained fixture (Karpathy's stories260K; see
// its README), a base model with no chat template.
const storiesModel = "../models/lm/testdata/stories260K/stories260K.gguf"

// storiesOpening is how its authors' greedy output from BOS begins
// (llama2.c, doc/stories260K.md); models/lm checks the whole of it.
const storiesOpening = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

// TestRawCompletionOnStoriesModel: an agent serving a model without a chat
// template answers POST /v1/completions: an empty prompt at temperature 0
// is the published text, streamed and not, on the device; chat requests to
// the same model keep working.
func TestRawCompletionOnStoriesModel(t *testing.T) {
	cfg := testConfig(t)
	cfg.Model = storiesModel
	_, url := startAgent(t, cfg)
	resp := post(t, url+"/v1/completions", `{"prompt":"","max_tokens":60,"temperature":0}`)
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if c.Object != "text_completion" || len(c.Choices) != 1 || !strings.HasPrefix(c.Choices[0].Text, storiesOpening) ||
		c.Choices[0].FinishReason != "length" || c.Usage.PromptTokens != 1 || c.Usage.CompletionTokens != 60 || resp.Header.Get("x-phaseless-route") != "local" {
		t.Fatalf("completion %+v, route %q", c, resp.Header.Get("x-phaseless-route"))
	}
	text := c.Choices[0].Text

	stream := post(t, url+"/v1/completions", `{"prompt":"","max_tokens":60,"temperature":0,"stream":true}`)
	body, err := io.ReadAll(stream.Body)
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || len(ev.Choices) != 1 {
			t.Fatalf("event %q: %v", data, err)
		}
		streamed.WriteString(ev.Choices[0].Text)
	}
	if streamed.String() != text || !strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]") {
		t.Errorf("streamed %q, want %q", streamed.String(), text)
	}

	chat := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":8}`)
	var cc struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(chat.Body).Decode(&cc); err != nil || chat.StatusCode != 200 || cc.Usage.CompletionTokens < 1 {
		t.Errorf("chat on a model without a template: status %d, %+v, %v", chat.StatusCode, cc, err)
	}

	t.Run("official SDK", func(t *testing.T) {
		dir := sdktest.Dir(t)
		type result struct {
			Check, Object, Text, Finish, Route string
		}
		for _, r := range sdktest.Run[result](t, dir, "completions.mjs", url) {
			switch r.Check {
			case "create", "stream":
				if r.Text != text || r.Finish != "length" {
					t.Errorf("%s: %+v, want %q", r.Check, r, text)
				}
			}
		}
	})
}
