package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestOmittedSamplingMarked: each API marks the sampling fields a request
// leaves out (the engine fills them from its model) and only those; a
// field the request sets is passed as set.
func TestOmittedSamplingMarked(t *testing.T) {
	g := &scriptGen{tokens: []string{"ok"}, failAt: -1}
	url := serve(t, g, Options{})
	all := llm.FieldTemperature | llm.FieldTopP | llm.FieldTopK
	for _, tc := range []struct {
		name, path, body string
		omitted          llm.SamplingFields
		temp, topP       float64
		topK             int
	}{
		{"openai none", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, all, llm.DefaultTemperature, 0, 0},
		{"openai temperature 0", "/v1/chat/completions", `{"temperature":0,"messages":[{"role":"user","content":"hi"}]}`, llm.FieldTopP | llm.FieldTopK, 0, 0, 0},
		{"openai top_p", "/v1/chat/completions", `{"temperature":"low","top_p":0.5,"messages":[{"role":"user","content":"hi"}]}`, llm.FieldTopK, 0.2, 0.5, 0},
		{"anthropic none", "/v1/messages", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, all, llm.DefaultTemperature, 0, 0},
		{"anthropic top_k 0", "/v1/messages", `{"model":"auto","max_tokens":8,"temperature":1,"top_k":0,"messages":[{"role":"user","content":"hi"}]}`, llm.FieldTopP, 1, 0, 0},
		{"anthropic all", "/v1/messages", `{"model":"auto","max_tokens":8,"temperature":0.3,"top_p":0.8,"top_k":7,"messages":[{"role":"user","content":"hi"}]}`, 0, 0.3, 0.8, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, url+tc.path, tc.body, nil)
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			r := g.request()
			if r.Omitted != tc.omitted || r.Temperature != tc.temp || r.TopP != tc.topP || r.TopK != tc.topK {
				t.Errorf("omitted %03b temperature %g top_p %g top_k %d, want %03b %g %g %d",
					r.Omitted, r.Temperature, r.TopP, r.TopK, tc.omitted, tc.temp, tc.topP, tc.topK)
			}
		})
	}
}

// TestModelsListSampling: /v1/models shows a model's declared sampling in
// both APIs' shapes, and nothing for a model that declares none.
func TestModelsListSampling(t *testing.T) {
	temp, k := 0.5, 40
	url := serve(t, &scriptGen{}, Options{Models: func() []Model {
		return []Model{{ID: "declared", Sampling: llm.Sampling{Temperature: &temp, TopK: &k}}, {ID: "plain"}}
	}})
	for _, anthropic := range []bool{false, true} {
		req, _ := http.NewRequest("GET", url+"/v1/models", nil)
		if anthropic {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Data []struct {
				ID       string
				Sampling json.RawMessage
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil || len(l.Data) != 3 {
			t.Fatalf("anthropic=%v: %v %+v", anthropic, err, l)
		}
		if got := string(l.Data[1].Sampling); got != `{"temperature":0.5,"top_k":40}` {
			t.Errorf("anthropic=%v: declared model lists sampling %s", anthropic, got)
		}
		if l.Data[0].Sampling != nil || l.Data[2].Sampling != nil || strings.Contains(string(l.Data[2].Sampling), "null") {
			t.Errorf("anthropic=%v: auto or the plain model lists sampling: %+v", anthropic, l.Data)
		}
	}
}
