package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadHFTokenizer: any tokenizer.json / tokenizer_config.json pair is
// an error or a vocabulary that builds and encodes to ids inside it.
func FuzzReadHFTokenizer(f *testing.F) {
	tj, err := os.ReadFile(filepath.Join("testdata", "tiny-tokenizer.json"))
	if err != nil {
		f.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join("testdata", "tiny-tokenizer_config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tj, cj)
	// Small seeds mutate faster than the 5 KB file above.
	f.Add([]byte(`{"added_tokens":[{"id":5,"content":"<|im_end|>","special":true},{"id":6,"content":"<think>"}],`+
		`"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"model":{"type":"BPE","vocab":{"h":0,"e":1,"he":2,"Ġ":3,"Ġhe":4},"merges":["h e",["Ġ","he"]]}}`),
		[]byte(`{"eos_token":{"content":"<|im_end|>"},"bos_token":null,"chat_template":[{"name":"default","template":"{{ messages }}"}]}`))
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		spec, err := ReadHF(tj, cj)
		if err != nil {
			return
		}
		tok, err := spec.Build()
		if err != nil {
			t.Fatalf("ReadHF accepted a spec that does not build: %v", err)
		}
		for _, special := range []bool{false, true} {
			for _, id := range tok.Tokenize("hello world <|im_start|> 123 你好\n\n", special) {
				if id < 0 || int(id) >= len(spec.Tokens) {
					t.Fatalf("id %d outside %d tokens", id, len(spec.Tokens))
				}
			}
		}
	})
}

// FuzzBPE: with every byte a token, any merge list and any text encode to
// ids that decode back to the text (invalid UTF-8 as U+FFFD), and special
// parsing only ever adds control tokens.
func FuzzBPE(f *testing.F) {
	f.Add("h e\nl l\nhe ll\nhell o\nĠ w", "hello world", "gpt-2")
	f.Add("Ġ Ġ\nĠĠ ĠĠ\n1 2", "    12 12\t\n\n  x", "llama-bpe")
	f.Add("a a\naa aa\n", "aaaaaaa 'S 'll", "qwen2")
	f.Add("ä ½\n", "你好 123 4567", "smollm")
	f.Fuzz(func(t *testing.T, merges, text, pre string) {
		spec := ByteSpec()
		if _, err := splitter(pre); err != nil {
			return
		}
		spec.Pre = pre
		seen := map[string]bool{}
		for _, m := range strings.Split(merges, "\n") {
			a, b, ok := parseMerge(m)
			if !ok || len(spec.Merges) >= 64 {
				continue
			}
			spec.Merges = append(spec.Merges, m)
			if !seen[a+b] {
				seen[a+b] = true
				spec.Tokens = append(spec.Tokens, a+b)
				spec.Types = append(spec.Types, TokenNormal)
			}
		}
		spec.Tokens = append(spec.Tokens, "<|im_end|>")
		spec.Types = append(spec.Types, TokenControl)
		tok, err := spec.Build()
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Encode(text)
		if got, want := tok.Decode(ids), strings.ToValidUTF8(text, "\uFFFD"); got != want && utf8.ValidString(text) {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
		var raw []byte
		for _, id := range ids {
			raw = append(raw, tok.Piece(id)...)
		}
		if !bytes.Equal(raw, []byte(text)) {
			t.Fatalf("pieces of Encode(%q) are %q", text, raw)
		}
		sp := tok.Tokenize(text, true)
		if strings.Contains(text, "<|im_end|>") != slices.Contains(sp, int32(len(spec.Tokens)-1)) {
			t.Fatalf("special parsing of %q gave %v", text, sp)
		}
	})
}

// FuzzPreTokenize: every pre-tokenizer cuts any text into non-empty words
// that put back together are the text.
func FuzzPreTokenize(f *testing.F) {
	for _, s := range []string{"Hello, world! It's 2026.", "  a\n\n\tb   ", "你好世界123", "x\xff\xfey", "'LL 'Re don't"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, pre := range []string{PreLlama3, PreQwen2, PreGPT2, PreSmolLM} {
			split, err := splitter(pre)
			if err != nil {
				t.Fatal(err)
			}
			words := split(text)
			if strings.Join(words, "") != text {
				t.Fatalf("%s: %q split into %q", pre, text, words)
			}
			if slices.Contains(words, "") {
				t.Fatalf("%s: empty word in %q", pre, words)
			}
		}
	})
}
