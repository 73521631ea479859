package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// answer is a generator that says one thing with a known cache hit.
type answer struct{}

func (answer) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	st := llm.NewStream(emit)
	st.Meta.Route = llm.RouteLocal
	for _, t := range []string{"Fan", " speed", " set", " to", " 2."} {
		if err := st.Emit(llm.Token{Text: t}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: 12, PrefixHitTokens: 6, CompletionTokens: 5, FinishReason: "stop"}, nil
}

// TestRun builds and runs the example against the real API handler, in
// both request shapes.
func TestRun(t *testing.T) {
	h, err := httpapi.NewHandler(answer{}, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, api := range []string{"openai", "anthropic"} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), []string{"--url", srv.URL, "--api", api, "--metrics", "set", "the", "fan", "to", "2"}, &out, &errs); err != nil {
			t.Fatalf("%s: %v\n%s", api, err, errs.String())
		}
		for _, want := range []string{"Fan speed set to 2.\n", "route local, 12 prompt tokens (6 cached), 5 completion tokens", "prefix-cache efficiency 0.50", `phaseless_client_requests_total{outcome="ok"} 1`} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", api, want, out.String())
			}
		}
	}
	if err := run(context.Background(), []string{"--url", srv.URL}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("no question accepted")
	}
}
