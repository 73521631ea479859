package quic

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// withRequestExt registers a test section on Request.IdempotencyKey's copy
// in Tenant (a field the fixed layout never sends) for the test's duration.
func withRequestExt(t *testing.T, tag uint64) {
	t.Helper()
	old := requestExts
	requestExts = append(append([]ext[llm.Request](nil), old...), ext[llm.Request]{
		tag: tag, name: "test-tenant",
		append: func(b []byte, r *llm.Request) []byte {
			if r.Tenant == "" {
				return b
			}
			return appendString(b, r.Tenant)
		},
		decode: func(d *decoder, r *llm.Request) { r.Tenant = d.string() },
	})
	t.Cleanup(func() { requestExts = old })
}

func encode(t *testing.T, f *Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExtensionRoundTrip(t *testing.T) {
	req := &llm.Request{ID: "r1", Model: "auto", MaxTokens: 4}
	plain := encode(t, &Frame{Type: FrameRequest, Request: req})

	withRequestExt(t, 900)
	if got := encode(t, &Frame{Type: FrameRequest, Request: req}); !bytes.Equal(got, plain) {
		t.Fatalf("a request without the section's field changed its bytes:\n%x\n%x", got, plain)
	}
	withTenant := *req
	withTenant.Tenant = "acme"
	b := encode(t, &Frame{Type: FrameRequest, Request: &withTenant})
	f, n, err := DecodeFrame(b)
	if err != nil || n != len(b) {
		t.Fatalf("decode: %v (%d of %d bytes)", err, n, len(b))
	}
	if f.Request.Tenant != "acme" || f.Heartbeat != 0 {
		t.Fatalf("decoded tenant %q heartbeat %v", f.Request.Tenant, f.Heartbeat)
	}

	// A peer that does not know the section reads the rest unchanged.
	requestExts = nil
	f, _, err = DecodeFrame(b)
	if err != nil || f.Request.Tenant != "" || f.Request.ID != "r1" {
		t.Fatalf("unknown section: %v, %+v", err, f.Request)
	}
}

func TestExtensionAfterHeartbeat(t *testing.T) {
	withRequestExt(t, 901)
	req := &llm.Request{ID: "r2", Tenant: "t"}
	b := encode(t, &Frame{Type: FrameRequest, Request: req, Heartbeat: 250})
	f, _, err := DecodeFrame(b)
	if err != nil || f.Heartbeat != 250 || f.Request.Tenant != "t" {
		t.Fatalf("got %v, heartbeat %v, tenant %q", err, f.Heartbeat, f.Request.Tenant)
	}
}

func TestExtensionMalformed(t *testing.T) {
	withRequestExt(t, 902)
	good := encode(t, &Frame{Type: FrameRequest, Request: &llm.Request{ID: "r3", Tenant: "abc"}})
	section := []byte{0x86, 0x07, 0, 0, 0, 4, 3, 'a', 'b', 'c'} // tag 902, 4 bytes: "abc"
	if !bytes.HasSuffix(good, section) {
		t.Fatalf("unexpected layout %x", good)
	}
	cases := map[string][]byte{
		"twice":     append(append([]byte(nil), good...), section...),
		"truncated": good[:len(good)-2],
		"bad body":  append(append([]byte(nil), good[:len(good)-len(section)]...), 0x86, 0x07, 0, 0, 0, 1, 9),
	}
	for name, b := range cases {
		// Fix the header's length to the new payload size.
		p := b[HeaderLen:]
		b[2], b[3], b[4], b[5] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		if _, _, err := DecodeFrame(b); err == nil || !strings.Contains(err.Error(), "extension") {
			t.Errorf("%s: got %v, want an extension error", name, err)
		}
	}
}

// TestToolSectionsRoundTrip carries a request with tools, a response
// format and a tool-calling history, and a tool-call token, across the
// frame codec.
func TestToolSectionsRoundTrip(t *testing.T) {
	req := &llm.Request{ID: "r1", Model: "auto", MaxTokens: 4, Messages: []llm.Message{
		{Role: "user", Content: "fan 2"},
		{Role: "assistant", ToolTurn: llm.ToolTurn{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "set_fan_speed", Arguments: `{"level":2}`}}}},
		{Role: "tool", Content: "ok", ToolTurn: llm.ToolTurn{ToolCallID: "c1", ToolError: true}},
		{Role: "user", Content: "thanks"},
	}, ToolRequest: llm.ToolRequest{
		Tools:          []llm.Tool{{Name: "set_fan_speed", Description: "fan", Parameters: []byte(`{"type":"object"}`), Strict: true}, {Name: "any"}},
		ToolChoice:     llm.ToolChoice{Mode: llm.ToolNamed, Name: "set_fan_speed", Single: true},
		ResponseFormat: llm.ResponseFormat{Type: llm.FormatJSONSchema, Name: "w", Schema: []byte(`{}`), Strict: true},
	}}
	f, _, err := DecodeFrame(encode(t, &Frame{Type: FrameRequest, Request: req}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Request, req) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", f.Request, req)
	}
	tok := llm.Token{ID: 7, Tool: &llm.ToolDelta{Index: 1, ID: "c2", Name: "n", Arguments: `{"a"`}}
	f, _, err = DecodeFrame(encode(t, &Frame{Type: FrameToken, Token: tok}))
	if err != nil || !reflect.DeepEqual(f.Token, tok) {
		t.Fatalf("token %+v, %v", f.Token, err)
	}
	// A plain request and token carry no section.
	plain := &llm.Request{ID: "r1", Model: "auto", MaxTokens: 4, Messages: []llm.Message{{Role: "user", Content: "x"}}}
	saved := requestExts
	b := encode(t, &Frame{Type: FrameRequest, Request: plain})
	requestExts = nil
	defer func() { requestExts = saved }()
	if !bytes.Equal(b, encode(t, &Frame{Type: FrameRequest, Request: plain})) {
		t.Fatal("a request without tools has extension bytes")
	}
}
