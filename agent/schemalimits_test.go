package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

// schemaError is an error answer in either API's shape.
type schemaError struct {
	Type  string
	Error struct{ Type, Message string }
}

func readSchemaError(t *testing.T, resp *http.Response, want string) {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, body)
	}
	var e schemaError
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%v: %.300s", err, body)
	}
	if e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, want) {
		t.Fatalf("error %+v, want invalid_request_error naming %q", e, want)
	}
}

// TestSchemaLimitsOnAgent: a schema over a limit is refused with a 400
// naming the limit, in the caller's API shape, before any generation; a
// $ref cycle with no way out is refused naming the definition rather than
// answered with "" and finish_reason stop (issue 27 items 3 and 6); two
// recursive schemas merged under allOf are refused by the depth limit.
func TestSchemaLimitsOnAgent(t *testing.T) {
	_, url := startAgent(t, testConfig(t))
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
		{"openai tool parameters", "/v1/chat/completions", `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"pick one"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"pick","parameters":` + huge + `}}]}`, "MaxEnumValues"},
		{"top-level $ref cycle", "/v1/chat/completions", oai(`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"}`), `"#/$defs/a" allows no finite value`},
		// Two self-referring schemas under allOf: before the merge's depth
		// bound, these 200 bytes took all of the machine's memory.
		{"allOf of two recursive schemas", "/v1/chat/completions", oai(`{"allOf":[{"$ref":"#/$defs/x"},{"$ref":"#/$defs/y"}],"$defs":{"x":{"additionalProperties":{"$ref":"#/$defs/x"}},"y":{"additionalProperties":{"$ref":"#/$defs/y"}}}}`), "maxCompileDepth"},
		{"nested $ref cycle", "/v1/chat/completions", oai(`{"type":"object","properties":{"x":{"$ref":"#/$defs/node"}},"required":["x"],"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}},"required":["next"]}}}`), `"#/$defs/node" allows no finite value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, url+tc.path, tc.body, "x-phaseless-route", "local")
			readSchemaError(t, resp, tc.want)
		})
	}
	// The agent still answers: an ordinary schema request succeeds.
	resp := post(t, url+"/v1/chat/completions", oai(`{"type":"object","properties":{"city":{"type":"string","enum":["Oslo","Bergen"]}},"required":["city"]}`), "x-phaseless-route", "local")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("ordinary schema: %d %s", resp.StatusCode, b)
	}
}
