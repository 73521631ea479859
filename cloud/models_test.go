package cloud

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lmtrain"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// echoModel is an OpenAI-compatible server of another make that serves
// one model and says which model it was asked for.
type echoModel struct{}

func (echoModel) Generate(_ context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if err := emit(llm.Token{Text: "served " + req.Model}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{PromptTokens: 3, CompletionTokens: 1, FinishReason: "stop"}, nil
}

// TestCloudModels: /v1/models lists the workers' models; a request naming
// one runs only on a worker serving it; an unlisted name is a 404, as on
// the agent.
func TestCloudModels(t *testing.T) {
	h, err := httpapi.NewHandler(echoModel{}, httpapi.Options{Models: func() []httpapi.Model { return []httpapi.Model{{ID: "echo-7b"}} }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	upstream := httptest.NewServer(mux)
	defer upstream.Close()
	c := startCloud(t, func(cfg *Config) {
		cfg.BuiltinWorkers = 1
		if err := cfg.Workers.Set(upstream.URL + "#model=echo-7b"); err != nil {
			t.Fatal(err)
		}
	})
	base := "http://" + c.HTTPAddr()
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID       string
			Sampling json.RawMessage
		}
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if got := strings.Join(ids, ","); got != "auto,"+cloudmodel.Name+",echo-7b" {
		t.Fatalf("models %s", got)
	}
	// The built-in model lists the sampling its file declares; the remote
	// worker's model is its server's to describe.
	if want, _ := json.Marshal(lmtrain.ShippedSampling()); string(list.Data[1].Sampling) != string(want) || list.Data[2].Sampling != nil {
		t.Fatalf("sampling listed: %s and %s, want %s for the built-in model only", list.Data[1].Sampling, list.Data[2].Sampling, want)
	}
	ask := func(model string) (int, string, string) {
		body := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("x-phaseless-route"), string(b)
	}
	for range 3 { // every time, whatever the policy prefers
		if status, route, body := ask("echo-7b"); status != 200 || !strings.Contains(route, "/remote-0-") || !strings.Contains(body, "served echo-7b") {
			t.Fatalf("echo-7b: %d %s %s", status, route, body)
		}
		if status, route, body := ask(cloudmodel.Name); status != 200 || !strings.Contains(route, "/builtin-0") {
			t.Fatalf("%s: %d %s %s", cloudmodel.Name, status, route, body)
		}
	}
	if status, _, body := ask("gpt-9"); status != 404 || !strings.Contains(body, "not_found") {
		t.Fatalf("unknown model: %d %s", status, body)
	}
}
