package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestKVHandoffHeader: x-phaseless-kv-handoff reaches the generator only
// where the handler allows it (a cloud serving as a decode worker), and is
// refused, not ignored, elsewhere.
func TestKVHandoffHeader(t *testing.T) {
	body := `{"model":"auto","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	post := func(base string) *http.Response {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(KVHandoffHeader, "0123abcd")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	gen := &scriptGen{tokens: []string{"a"}, failAt: -1}
	if resp := post(serve(t, gen, Options{})); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("without AllowKVHandoff: status %d", resp.StatusCode)
	}
	if gen.request() != nil {
		t.Fatal("a refused request reached the generator")
	}
	if resp := post(serve(t, gen, Options{AllowKVHandoff: true})); resp.StatusCode != http.StatusOK {
		t.Fatalf("with AllowKVHandoff: status %d", resp.StatusCode)
	}
	if got := gen.request().KVHandoff; got != "0123abcd" {
		t.Fatalf("generator saw handoff %q", got)
	}
}
