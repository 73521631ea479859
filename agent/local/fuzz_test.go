package local

import (
	"testing"

	"github.com/phaseless/phaseless/transport/llm"
)

// FuzzParseStreamLine feeds the local server's SSE lines, which come from
// another process and may be anything.
func FuzzParseStreamLine(f *testing.F) {
	for _, s := range []string{
		`data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}`,
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		`data: {"error":{"message":"boom","type":"server_error"}}`,
		`data: [DONE]`, `data:[DONE]`, `event: ping`, `: keep-alive`, ``, `data: {`, `data: null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, done, err := parseStreamLine(line)
		if err != nil {
			if c != nil || done || llm.CodeOf(err) != llm.CodeInternal {
				t.Fatalf("error %v with chunk %v done %v", err, c, done)
			}
			return
		}
		if done && c != nil {
			t.Fatal("both done and a chunk")
		}
	})
}
