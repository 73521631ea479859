package cloud

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

// TestSchemaLimitsOnCloud: the coordinator's built-in workers compile
// schemas too; one over a limit is refused with a 400 naming the limit in
// the caller's API shape, and a $ref cycle with no way out is refused
// naming the definition (issue 27 items 3 and 6).
func TestSchemaLimitsOnCloud(t *testing.T) {
	c := startCloud(t, nil)
	url := "http://" + c.HTTPAddr()
	huge := grammartest.HugeEnumSchema()
	if len(huge) < 3_500_000 {
		t.Fatalf("schema is %d bytes, want ~3.7 MB", len(huge))
	}
	oai := func(schema string) string {
		return `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"pick one"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":` + schema + `}}}`
	}
	for _, tc := range []struct{ name, path, body, want string }{
		{"openai response_format", "/v1/chat/completions", oai(huge), "MaxEnumValues"},
		{"anthropic tool input_schema", "/v1/messages", `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"pick one"}],"tool_choice":{"type":"any"},"tools":[{"name":"pick","input_schema":` + huge + `}]}`, "MaxEnumValues"},
		{"top-level $ref cycle", "/v1/chat/completions", oai(`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"}`), `"#/$defs/a" allows no finite value`},
		{"nested $ref cycle", "/v1/messages", `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"go"}],"tool_choice":{"type":"any"},"tools":[{"name":"walk","input_schema":{"type":"object","properties":{"x":{"$ref":"#/$defs/node"}},"required":["x"],"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}},"required":["next"]}}}}]}`, `"#/$defs/node" allows no finite value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(url+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, body)
			}
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%v: %.300s", err, body)
			}
			if e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.want) {
				t.Fatalf("error %s, want invalid_request_error naming %q", body, tc.want)
			}
			if strings.HasPrefix(tc.path, "/v1/messages") && e.Type != "error" {
				t.Fatalf("Anthropic error shape wants type error: %s", body)
			}
		})
	}
}

// TestSchemaLimitsBeforeBilling: the coordinator refuses a schema over a
// static limit before admission, so it is neither billed nor queued. With
// a budget of one token, a request that reached admission would be
// answered 429; this one is answered 400 naming the limit.
func TestSchemaLimitsBeforeBilling(t *testing.T) {
	c := startCloud(t, func(cfg *Config) { cfg.Budget = 1 })
	body := `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"pick one"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":` + grammartest.HugeEnumSchema() + `}}}`
	resp, err := http.Post("http://"+c.HTTPAddr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "MaxEnumValues") {
		t.Fatalf("status %d %.300s, want 400 naming MaxEnumValues before admission", resp.StatusCode, b)
	}
	// The same budget refuses an ordinary request: admission is where the
	// schema would otherwise have been stopped.
	ok := `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"pick one"}]}`
	resp2, err := http.Post("http://"+c.HTTPAddr()+"/v1/chat/completions", "application/json", strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("ordinary request on a 1-token budget: %d, want 429", resp2.StatusCode)
	}
}
