package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: byte-level BPE vocabularies spell
// every byte as a printable character, so that token text is valid UTF-8
// and has no spaces. Printable Latin-1 bytes stand for themselves; the other
// 68 map to U+0100 upwards in byte order (space is "Ġ", newline "Ċ").
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			b2r[b] = rune(b)
		} else {
			b2r[b] = next
			next++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// byteLevel spells raw bytes as byte-level token text.
func byteLevel(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}

// unByteLevel turns byte-level token text back into the bytes it spells;
// characters outside the mapping (never in a well-formed vocabulary) keep
// their UTF-8 bytes.
func unByteLevel(t string) []byte {
	out := make([]byte, 0, len(t))
	for _, r := range t {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// bpeTokenizer is byte-level BPE as llama.cpp's llm_tokenizer_bpe and
// Hugging Face's tokenizers run it: split the text into words with the
// pre-tokenizer, spell each word's bytes as byte-level characters, then
// repeatedly merge the adjacent pair with the lowest merge rank (leftmost on
// ties) until no listed merge applies.
type bpeTokenizer struct {
	*vocab
	ids   map[string]int32
	ranks map[[2]string]int
	split func(string) []string
	// ignoreMerges takes a word that is itself a token whole, before any
	// merging, as Llama 3's tokenizer does (llama.cpp sets it for llama-bpe).
	ignoreMerges bool
}

func newBPE(v *vocab, s Spec) (*bpeTokenizer, error) {
	pre := s.Pre
	if pre == "" {
		pre = PreGPT2 // llama.cpp's fallback for a missing pre-tokenizer is its own default split; gpt-2 is the nearest
	}
	split, err := splitter(pre)
	if err != nil {
		return nil, err
	}
	t := &bpeTokenizer{vocab: v, ids: make(map[string]int32, len(s.Tokens)), ranks: make(map[[2]string]int, len(s.Merges)),
		split: split, ignoreMerges: preAliases[pre] == PreLlama3}
	for i, tok := range s.Tokens {
		if s.typeOf(i) == TokenControl {
			continue
		}
		if _, dup := t.ids[tok]; !dup {
			t.ids[tok] = int32(i)
		}
	}
	for i, m := range s.Merges {
		a, b, ok := parseMerge(m)
		if !ok {
			return nil, fmt.Errorf("tokenizer: merge %d is %q, want two tokens separated by one space", i, m)
		}
		if _, dup := t.ranks[[2]string{a, b}]; !dup {
			t.ranks[[2]string{a, b}] = i
		}
	}
	return t, nil
}

// parseMerge splits a tokenizer.ggml.merges entry "left right". Byte-level
// token text never contains a space (space is spelt "Ġ"), so the one space
// is the separator.
func parseMerge(m string) (string, string, bool) {
	i := strings.IndexByte(m, ' ')
	if i <= 0 || i == len(m)-1 || strings.IndexByte(m[i+1:], ' ') >= 0 {
		return "", "", false
	}
	return m[:i], m[i+1:], true
}

func (t *bpeTokenizer) encodeFragment(text string, _ bool, out []int32) []int32 {
	for _, w := range t.split(text) {
		out = t.word(byteLevel(w), out)
	}
	return out
}

// word encodes one pre-tokenized word given in byte-level spelling.
func (t *bpeTokenizer) word(w string, out []int32) []int32 {
	if w == "" {
		return out
	}
	if t.ignoreMerges {
		if id, ok := t.ids[w]; ok {
			return append(out, id)
		}
	}
	var syms []string
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		syms = append(syms, w[i:i+n])
		i += n
	}
	// rank[i] is the merge rank of (syms[i], syms[i+1]), -1 when none.
	rank := make([]int, len(syms))
	pair := func(i int) int {
		if i+1 >= len(syms) {
			return -1
		}
		if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok {
			return r
		}
		return -1
	}
	for i := range syms {
		rank[i] = pair(i)
	}
	for {
		best := -1
		for i, r := range rank {
			if r >= 0 && (best < 0 || r < rank[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		syms[best] += syms[best+1]
		syms = append(syms[:best+1], syms[best+2:]...)
		rank = append(rank[:best+1], rank[best+2:]...)
		rank[best] = pair(best)
		if best > 0 {
			rank[best-1] = pair(best - 1)
		}
	}
	for _, s := range syms {
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		// A merge result the vocabulary lacks (a malformed file): fall back
		// to its characters, each one byte.
		for _, r := range s {
			if id, ok := t.ids[string(r)]; ok {
				out = append(out, id)
			} else if t.spec.UNK >= 0 {
				out = append(out, t.spec.UNK)
			}
		}
	}
	return out
}
