package quic

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

func sampleFrames() []*Frame {
	return []*Frame{
		{Type: FrameRequest, Request: &llm.Request{
			ID: "req-1", Model: "auto",
			Messages:  []llm.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "héllo, 世界 👋"}},
			MaxTokens: 4096, Temperature: 0.7, TopP: 0.9, TopK: 40, Seed: math.MaxUint64, Stop: []string{"<|", "\n\n"},
			IdempotencyKey: "k-1",
			Hints:          llm.Hints{Route: "cloud", Prefetch: "high", BatchThreshold: 0.3, CacheTTL: 600 * time.Second, SemanticMode: "hybrid", Policy: "fifo"},
		}},
		{Type: FrameRequest, Request: &llm.Request{Messages: []llm.Message{}}},
		{Type: FrameMeta, Meta: llm.Meta{Route: llm.RouteCloud, Pool: "decode-heavy", Worker: "w1", SchedulerHint: "ABCD", BudgetRemaining: -5, HasBudget: true,
			Fallback: llm.Fallback{Cause: llm.FallbackPoolOverloaded, From: "w0", Code: llm.CodeOverloaded, Detail: "overloaded on w0"}, EngineTTFT: 42 * time.Millisecond}},
		{Type: FrameMeta, Meta: llm.Meta{Route: llm.RouteLocal, Fallback: llm.Fallback{Cause: llm.FallbackNoCloud}}},
		{Type: FrameToken, Token: llm.Token{Text: "wörld", ID: -7, EngineLatency: 1234 * time.Microsecond}},
		{Type: FrameToken, Token: llm.Token{}},
		{Type: FrameFinal, Final: llm.Final{PromptTokens: 12, CompletionTokens: 300, FinishReason: "length", TTFT: 5 * time.Millisecond, Total: time.Second, PrefixHitTokens: 8}},
		{Type: FrameError, Err: &llm.Error{Code: llm.CodeOverloaded, Message: "pool full", Retryable: true, RetryAfter: 2 * time.Second}},
		{Type: FrameError, Err: &llm.Error{Code: llm.CodeBudget, Message: "over", RetryAfter: time.Second, BudgetRemaining: 12, HasBudget: true}},
		{Type: FrameCancel},
		{Type: FrameHeartbeat},
		{Type: FrameRequest, Request: &llm.Request{ID: "hb", Model: "auto"}, Heartbeat: 250 * time.Millisecond},
		{Type: FrameResume, Resume: Resume{Key: ResumeKeyPrefix + "K", Offset: 1234}, Heartbeat: 200 * time.Millisecond},
		{Type: FrameResume, Resume: Resume{Key: "app-key", Cancel: true}},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	for _, f := range sampleFrames() {
		b, err := AppendFrame(nil, f)
		if err != nil {
			t.Fatalf("%v: %v", f.Type, err)
		}
		got, n, err := DecodeFrame(b)
		if err != nil || n != len(b) {
			t.Fatalf("%v: decode n=%d/%d err=%v", f.Type, n, len(b), err)
		}
		if f.Type == FrameRequest && len(f.Request.Messages) == 0 {
			f.Request.Messages = nil // empty and nil lists are the same on the wire
		}
		if !reflect.DeepEqual(&got, f) {
			t.Errorf("%v: round trip\n got %+v\nwant %+v", f.Type, got, *f)
		}
		stream = append(stream, b...)
	}
	// The same frames back to back through the stream reader.
	fr := newFrameReader(bytes.NewReader(stream))
	for i, want := range sampleFrames() {
		got, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Type != want.Type {
			t.Fatalf("frame %d: type %v want %v", i, got.Type, want.Type)
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

func TestFrameRejects(t *testing.T) {
	tok, _ := AppendFrame(nil, &Frame{Type: FrameToken, Token: llm.Token{Text: "hi"}})
	header := func(v, typ byte, n uint32) []byte {
		return binary.BigEndian.AppendUint32([]byte{v, typ}, n)
	}
	cases := []struct {
		name string
		in   []byte
		want string // substring of a *ProtocolError, or "" for io.ErrUnexpectedEOF
	}{
		{"future version", append(header(2, 3, 0), nil...), "unsupported version 2"},
		{"unknown type", header(1, 99, 0), "unknown frame type 99"},
		{"type zero", header(1, 0, 0), "unknown frame type 0"},
		{"oversized", header(1, 3, MaxFrameSize+1), "over the"},
		{"short header", []byte{1, 3}, ""},
		{"short payload", tok[:len(tok)-1], ""},
		{"string past end", append(header(1, 3, 2), 5, 'a'), "string of 5 bytes"},
		{"bad bool", append(header(1, 2, 6), 0, 0, 0, 7, 0, 0), "bool byte 7"},
		{"huge list", append(header(1, 1, 5), 0, 0, 0xff, 0xff, 0x7f), "list of"},
		{"error without code", append(header(1, 5, 4), 0, 0, 0, 0), "without a code"},
		{"token id overflow", append(header(1, 3, 7), 0, 0x80, 0x80, 0x80, 0x80, 0x20, 0), "token id"},
		{"resume without key", append(header(1, 8, 4), 0, 5, 0, 0), "without a key"},
		{"resume offset overflow", append(header(1, 8, 9), 1, 'k', 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0), "resume offset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := DecodeFrame(c.in)
			if c.want == "" {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("err %v, want io.ErrUnexpectedEOF", err)
				}
				return
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || !bytes.Contains([]byte(pe.Reason), []byte(c.want)) {
				t.Fatalf("err %v, want protocol error containing %q", err, c.want)
			}
			// The stream reader says the same, or that the stream ended mid-frame.
			if _, err := newFrameReader(bytes.NewReader(c.in)).next(); !errors.As(err, &pe) {
				t.Fatalf("frameReader: %v, want a protocol error", err)
			}
		})
	}
}

func TestFrameTrailingFieldsIgnored(t *testing.T) {
	// A later revision may append sections (ext.go): a decoder skips the
	// ones it does not know and keeps what it knows.
	b, _ := AppendFrame(nil, &Frame{Type: FrameToken, Token: llm.Token{Text: "x", ID: 3}})
	b = append(b, 0x7f, 0, 0, 0, 2, 0xAA, 0xBB)
	binary.BigEndian.PutUint32(b[2:], binary.BigEndian.Uint32(b[2:])+7)
	f, n, err := DecodeFrame(b)
	if err != nil || n != len(b) || f.Token.Text != "x" || f.Token.ID != 3 {
		t.Fatalf("got %+v n=%d err=%v", f, n, err)
	}
}

func TestAppendFrameLimits(t *testing.T) {
	big := &Frame{Type: FrameToken, Token: llm.Token{Text: string(make([]byte, MaxFrameSize))}}
	b, err := AppendFrame([]byte("keep"), big)
	if err == nil || string(b) != "keep" {
		t.Fatalf("oversized frame: err %v, buffer %q", err, b[:min(len(b), 8)])
	}
	if _, err := AppendFrame(nil, &Frame{Type: 42}); err == nil {
		t.Fatal("unknown type encoded")
	}
	if _, err := AppendFrame(nil, &Frame{Type: FrameRequest}); err == nil {
		t.Fatal("request frame without a request encoded")
	}
}

// FuzzDecodeFrame checks the decoder never panics or over-allocates on
// hostile input, and that whatever it accepts re-encodes to a frame that
// decodes to the same bytes again.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		b, _ := AppendFrame(nil, fr)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, n, err := DecodeFrame(in)
		if err != nil {
			return
		}
		if n < HeaderLen || n > len(in) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		b1, err := AppendFrame(nil, &fr)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		fr2, _, err := DecodeFrame(b1)
		if err != nil {
			t.Fatalf("decode re-encoded: %v", err)
		}
		b2, _ := AppendFrame(nil, &fr2)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("not stable:\n%x\n%x", b1, b2)
		}
	})
}

// TestMetaFrameRevision1: a meta frame from a peer that writes only the
// first layout's fields (route text, hint, fallback text, budget) still
// decodes, with the route as it was written; a final frame still carries the
// three empty strings that layout expects.
func TestMetaFrameRevision1(t *testing.T) {
	p := appendString(nil, "cloud/stream/w2")
	p = appendString(p, "HINT")
	p = appendString(p, "overloaded on w1")
	p = appendBool(p, true)
	p = binary.AppendVarint(p, 99)
	b := append([]byte{ProtocolVersion, byte(FrameMeta)}, binary.BigEndian.AppendUint32(nil, uint32(len(p)))...)
	f, _, err := DecodeFrame(append(b, p...))
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Meta{Route: "cloud/stream/w2", SchedulerHint: "HINT", Fallback: llm.Fallback{Detail: "overloaded on w1"}, BudgetRemaining: 99, HasBudget: true}
	if f.Meta != want {
		t.Fatalf("got %+v\nwant %+v", f.Meta, want)
	}
	fin, _ := AppendFrame(nil, &Frame{Type: FrameFinal, Final: llm.Final{FinishReason: "stop"}})
	if !bytes.HasSuffix(fin, []byte{0, 0, 0}) {
		t.Fatalf("final frame %x lacks revision 1's three empty strings", fin)
	}
	// The new layout writes revision 1's route text for older agents.
	m, _ := AppendFrame(nil, &Frame{Type: FrameMeta, Meta: llm.Meta{Route: llm.RouteCloud, Pool: "stream", Worker: "w2"}})
	d := decoder{b: m[HeaderLen:]}
	if r := d.string(); r != "cloud/stream/w2" {
		t.Fatalf("revision 1 route slot %q", r)
	}
}
