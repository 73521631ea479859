package lm

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/gguf"
)

// spmSpec is a small SentencePiece vocabulary: control tokens, byte fallback
// for every byte, and pieces whose scores decide the merges.
func spmSpec() TokenizerSpec {
	s := TokenizerSpec{Model: TokenizerLlama, BOS: 1, EOS: 2, UNK: 0, AddBOS: true, AddSpacePrefix: true}
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
	tok, err := ByteTokenizerSpec().Build()
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
	tok, _ := ByteTokenizerSpec().Build()
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

func TestStopMatcher(t *testing.T) {
	m := &stopMatcher{stops: []string{"<|", "STOP"}}
	var out string
	for _, piece := range []string{"hi ", "<", "x", "ST", "O", "P!"} {
		o, stopped := m.push(piece)
		out += o
		if stopped {
			break
		}
	}
	if out != "hi <xST"[:len("hi <x")] {
		t.Fatalf("emitted %q before STOP, want %q", out, "hi <x")
	}
	m = &stopMatcher{stops: []string{"<|"}}
	a, _ := m.push("a<")
	if a != "a" {
		t.Fatalf("held %q: a possible stop prefix must wait", a)
	}
	if b, stopped := m.push("|user"); b != "" || !stopped {
		t.Fatalf("got %q stopped=%v", b, stopped)
	}
}

func TestUnsupportedTokenizerIsClearError(t *testing.T) {
	cfg := tinyConfig()
	w, _ := RandomWeights(cfg, 1)
	spec := ByteTokenizerSpec()
	spec.Model = "rwkv"
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, spec, w, nil, F32); err == nil || !strings.Contains(err.Error(), `unsupported tokenizer model "rwkv"`) {
		t.Fatalf("writer: %v", err)
	}
	// A file written by another tool with that tokenizer fails on load.
	good := ByteTokenizerSpec()
	buf.Reset()
	if err := WriteGGUF(&buf, cfg, good, w, nil, F32); err != nil {
		t.Fatal(err)
	}
	raw := bytes.Replace(buf.Bytes(), []byte("\x04\x00\x00\x00\x00\x00\x00\x00gpt2"), []byte("\x04\x00\x00\x00\x00\x00\x00\x00rwkv"), 1)
	_, err := Read(bytes.NewReader(raw), int64(len(raw)))
	if err == nil || !strings.Contains(err.Error(), `unsupported tokenizer model "rwkv"`) {
		t.Fatalf("load: %v", err)
	}
}

func TestLoadRejectsBadModels(t *testing.T) {
	cfg := tinyConfig()
	w, _ := RandomWeights(cfg, 1)
	for _, tc := range []struct {
		name string
		kvs  []gguf.KV
		want string
	}{
		{"arch", []gguf.KV{{Key: "general.architecture", Value: "gpt2"}}, "architecture"},
		{"no dims", []gguf.KV{{Key: "general.architecture", Value: "llama"}}, "llama.embedding_length missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := gguf.Write(&buf, tc.kvs, []gguf.Tensor{{Name: "token_embd.weight", Dims: []uint64{64, 258}, Type: F32, Data: w.TokenEmbd}}); err != nil {
				t.Fatal(err)
			}
			_, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	// A tensor of the wrong shape is named.
	w.Layers[1].Up = w.Layers[1].Up[:len(w.Layers[1].Up)-64]
	if err := WriteGGUF(new(bytes.Buffer), cfg, ByteTokenizerSpec(), w, nil, F32); err == nil || !strings.Contains(err.Error(), "blk.1.ffn_up.weight") {
		t.Fatalf("err %v", err)
	}
}

// FuzzReadModel feeds mutated model files to the whole loader.
func FuzzReadModel(f *testing.F) {
	cfg := Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, ContextLen: 16}
	w, _ := RandomWeights(cfg, 1)
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, ByteTokenizerSpec(), w, nil, Q8_0); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	// A qwen3 file with a BPE vocabulary, special tokens and a chat template.
	q := Config{Arch: ArchQwen3, Vocab: 300, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, HeadSize: 8, FFN: 32, ContextLen: 16}
	qw, _ := RandomWeights(q, 1)
	spec, _ := PaddedByteTokenizerSpec(300)
	spec.Tokens[258], spec.Types[258] = "<|im_end|>", TokenControl
	spec.Merges = []string{"h e"}
	spec.Tokens[259], spec.Types[259] = "he", TokenNormal
	spec.ChatTemplate = "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
	buf.Reset()
	if err := WriteGGUF(&buf, q, spec, qw, nil, F32); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if m.Config.Vocab*m.Config.Dim > 1<<20 {
			return // accepted but too big to run in a fuzz iteration
		}
		m.Logits([]int32{0})
		m.ChatTokens([]llm.Message{{Role: "user", Content: "hello <|im_end|>"}})
	})
}
