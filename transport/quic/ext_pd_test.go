package quic

import (
	"bytes"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestMetaSplitSection: the begin event of a split request names the decode
// worker over QUIC; one that was not split is byte-identical to before, and a
// peer without the section reads the fixed fields.
func TestMetaSplitSection(t *testing.T) {
	m := llm.Meta{Route: llm.RouteCloud, Pool: "prefill-heavy", Worker: "builtin-1"}
	plain := encode(t, &Frame{Type: FrameMeta, Meta: m})
	old := metaExts
	metaExts = nil
	if got := encode(t, &Frame{Type: FrameMeta, Meta: m}); !bytes.Equal(got, plain) {
		t.Fatal("an unsplit begin event changed its bytes")
	}
	metaExts = old
	m.Split = llm.Split{DecodePool: "decode-heavy", DecodeWorker: "builtin-0", KVBytes: 12345}
	b := encode(t, &Frame{Type: FrameMeta, Meta: m})
	f, _, err := DecodeFrame(b)
	if err != nil || f.Meta.Split != m.Split || f.Meta.Worker != "builtin-1" {
		t.Fatalf("decoded %+v, %v", f.Meta, err)
	}
	metaExts = nil
	defer func() { metaExts = old }()
	if f, _, err = DecodeFrame(b); err != nil || f.Meta.Split.IsSet() || f.Meta.Pool != "prefill-heavy" {
		t.Fatalf("a peer without the section: %+v, %v", f.Meta, err)
	}
}
