package grammartest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// CitySchema is the json_schema of issue 28's first engine bug, which the
// cloud model answered with {"city":"ia.C and finish_reason "stop".
const CitySchema = `{"type":"object","properties":{"city":{"type":"string"},"temp":{"type":"number"}},"required":["city"]}`

// ConstrainedPrompts are requests that led the shipped models to write
// their end-of-turn marker inside a JSON string.
var ConstrainedPrompts = []string{"What is the weather in Paris? Answer in JSON.", "Which city should I visit?"}

// CheckConstrainedReplies posts json_schema and json_object requests to the
// OpenAI chat endpoint at url (headers set on each, e.g. a route), streamed
// and not, at temperature 0 and 1.0 (two seeds), and fails t unless
// every reply either ends with finish_reason "length" or parses (and, for
// json_schema, validates against CitySchema). It returns how many replies
// finished, so a caller can see the check was not all cut replies. A
// route pinned in header (x-phaseless-route) must be where each ran.
func CheckConstrainedReplies(t *testing.T, url string, header http.Header) (finished, total int) {
	t.Helper()
	v := Validator(t, CitySchema)
	formats := map[string]string{
		"json_schema": `{"type":"json_schema","json_schema":{"name":"w","schema":` + CitySchema + `}}`,
		"json_object": `{"type":"json_object"}`,
	}
	for name, rf := range formats {
		for _, temp := range []string{"0", "1.0"} {
			for _, stream := range []bool{false, true} {
				for seed := 1; seed <= 2; seed++ {
					if temp == "0" && seed > 1 {
						break // greedy: one seed is all of them
					}
					for _, prompt := range ConstrainedPrompts {
						body := fmt.Sprintf(`{"model":"auto","max_tokens":32,"temperature":%s,"seed":%d,"stream":%v,"messages":[{"role":"user","content":%q}],"response_format":%s}`,
							temp, seed, stream, prompt, rf)
						text, reason := postChat(t, url, header, body, stream)
						total++
						what := fmt.Sprintf("%s T=%s stream=%v seed %d %q: %q finish %q", name, temp, stream, seed, prompt, text, reason)
						switch reason {
						case "length":
							continue
						case "stop":
						default:
							t.Fatalf("%s: unexpected finish reason", what)
						}
						finished++
						inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
						if err != nil {
							t.Fatalf("%s: stopped on a document that does not parse: %v", what, err)
						}
						if _, ok := inst.(map[string]any); !ok {
							t.Fatalf("%s: not an object", what)
						}
						if name == "json_schema" {
							if err := v.Validate(inst); err != nil {
								t.Fatalf("%s: does not validate: %v", what, err)
							}
						}
					}
				}
			}
		}
	}
	return finished, total
}

// Validator compiles schema with an independent JSON Schema implementation
// (santhosh-tekuri/jsonschema), which the tests check the grammar's output
// against.
func Validator(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// postChat posts an OpenAI chat request and returns the reply text and its
// finish_reason, from the SSE stream or the JSON answer.
func postChat(t *testing.T, url string, header http.Header, body string, stream bool) (text, reason string) {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %.300s", resp.StatusCode, b)
	}
	if want := header.Get("x-phaseless-route"); want != "" && !strings.HasPrefix(resp.Header.Get("x-phaseless-route"), want) {
		t.Fatalf("pinned to %s, ran on %q (%s)", want, resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-fallback-reason"))
	}
	type choice struct {
		Message      struct{ Content string } `json:"message"`
		Delta        struct{ Content string } `json:"delta"`
		FinishReason *string                  `json:"finish_reason"`
	}
	var out struct{ Choices []choice }
	if !stream {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("answer: %v %+v", err, out)
		}
		c := out.Choices[0]
		if c.FinishReason == nil {
			t.Fatal("no finish_reason")
		}
		return c.Message.Content, *c.FinishReason
	}
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok || string(data) == "[DONE]" {
			continue
		}
		out.Choices = nil
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		for _, c := range out.Choices {
			sb.WriteString(c.Delta.Content)
			if c.FinishReason != nil {
				reason = *c.FinishReason
			}
		}
	}
	return sb.String(), reason
}
