package tokenizer

import (
	"slices"
	"testing"
	"unicode/utf8"
)

// spmSpec is a small SentencePiece vocabulary: control tokens, byte fallback
// for every byte, and pieces whose scores decide the merges.
func spmSpec() Spec {
	s := Spec{Model: ModelLlama, BOS: 1, EOS: 2, UNK: 0, AddBOS: true, AddSpacePrefix: true}
	add := func(tok string, score float32, typ int32) {
		s.Tokens = append(s.Tokens, tok)
		s.Scores = append(s.Scores, score)
		s.Types = append(s.Types, typ)
	}
	add("<unk>", 0, TokenUnknown)
	add("<s>", 0, TokenControl)
	add("</s>", 0, TokenControl)
	for b := 0; b < 256; b++ {
		add(string([]byte{'<', '0', 'x', "0123456789ABCDEF"[b>>4], "0123456789ABCDEF"[b&15], '>'}), 0, TokenByte)
	}
	for _, p := range []struct {
		s     string
		score float32
	}{
		{"▁", -1}, {"h", -2}, {"e", -2}, {"l", -2}, {"o", -2}, {"w", -2}, {"r", -2}, {"d", -2},
		{"he", -3}, {"ll", -3}, {"llo", -4}, {"hello", -5}, {"▁hello", -6}, {"wor", -7}, {"▁w", -8},
		{"é", -2},
	} {
		add(p.s, p.score, TokenNormal)
	}
	return s
}

func TestSentencePieceEncode(t *testing.T) {
	tok, err := spmSpec().Build()
	if err != nil {
		t.Fatal(err)
	}
	piece := func(ids []int32) []string {
		var out []string
		for _, id := range ids {
			out = append(out, spmSpec().Tokens[id])
		}
		return out
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"hello", []string{"▁hello"}},
		{"hello world", []string{"▁hello", "▁w", "o", "r", "l", "d"}},
		{"hé", []string{"▁", "h", "é"}},
		// "ß" is not a piece: byte fallback gives its two UTF-8 bytes.
		{"ß", []string{"▁", "<0xC3>", "<0x9F>"}},
	} {
		ids := tok.Encode(tc.in)
		if got := piece(ids); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := tok.Decode(ids); got != tc.in {
			t.Errorf("Decode(Encode(%q)) = %q", tc.in, got)
		}
	}
	if got := tok.Decode([]int32{1, tok.Encode("hello")[0], 2}); got != "hello" {
		t.Errorf("control tokens rendered: %q", got)
	}
}

func TestByteTokenizerRoundTrip(t *testing.T) {
	tok, err := ByteSpec().Build()
	if err != nil {
		t.Fatal(err)
	}
	in := "héllo, 世界 🙂\x00"
	ids := tok.Encode(in)
	if len(ids) != len(in) || ids[1] != int32(in[1]) {
		t.Fatalf("ids %v", ids)
	}
	if got := tok.Decode(append([]int32{tok.BOS()}, append(ids, tok.EOS())...)); got != in {
		t.Fatalf("Decode = %q", got)
	}
	if tok.VocabSize() != 258 || tok.BOS() != 256 || tok.EOS() != 257 || !tok.AddBOS() {
		t.Fatal("byte vocabulary specials")
	}
}

func TestStreamDecoderNeverSplitsCharacters(t *testing.T) {
	tok, _ := ByteSpec().Build()
	in := "a世🙂é"
	d := NewStreamDecoder(tok)
	var outs []string
	for _, id := range tok.Encode(in) {
		outs = append(outs, d.Push(id))
	}
	outs = append(outs, d.Flush())
	want := []string{"a", "", "", "世", "", "", "", "🙂", "", "é", ""}
	if !slices.Equal(outs, want) {
		t.Fatalf("pieces %q, want %q", outs, want)
	}
	// Invalid bytes come out as U+FFFD, never as broken UTF-8, and an
	// incomplete character at the end is flushed as U+FFFD.
	d = NewStreamDecoder(tok)
	got := d.Push(0xff) + d.Push('x') + d.Push(0xe4) + d.Push(0xb8) + d.Flush()
	if got != "\uFFFDx\uFFFD" || !utf8.ValidString(got) {
		t.Fatalf("got %q", got)
	}
}
