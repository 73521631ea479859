package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Pre-tokenizers of byte-level BPE vocabularies, named as llama.cpp names
// them in tokenizer.ggml.pre. Each splits text into the words BPE merges
// within. The Hugging Face regexes behind them use a lookahead (\s+(?!\S)),
// which Go's regexp lacks, so they are matched by hand here, alternative by
// alternative in the regex's order (leftmost-first, as a backtracking regex
// engine matches them).
const (
	// PreLlama3 is Llama 3's split (llama.cpp "llama-bpe"):
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
	//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PreLlama3 = "llama-bpe"
	// PreQwen2 is the same with single digits (\p{N} instead of \p{N}{1,3}):
	// Qwen 2, 2.5 and 3.
	PreQwen2 = "qwen2"
	// PreGPT2 is GPT-2's split:
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	PreGPT2 = "gpt-2"
	// PreSmolLM isolates every digit (\p{N}), then splits each piece as GPT-2.
	PreSmolLM = "smollm"
)

// The Hugging Face regexes the pre-tokenizers implement, as tokenizer.json
// spells them (HF) and as llama.cpp's convert script rewrites them.
const (
	regexLlama3   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen2    = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexGPT2     = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	regexGPT2LCPP = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
)

// preAliases maps the other names llama.cpp accepts for the same splits.
var preAliases = map[string]string{
	"llama3": PreLlama3, "llama-v3": PreLlama3, PreLlama3: PreLlama3,
	PreQwen2: PreQwen2, "deepseek-r1-qwen": PreQwen2,
	PreGPT2: PreGPT2, "gpt2": PreGPT2,
	PreSmolLM: PreSmolLM,
}

// splitter returns the pre-tokenizer a tokenizer.ggml.pre name selects.
func splitter(pre string) (func(string) []string, error) {
	switch preAliases[pre] {
	case PreLlama3:
		return func(s string) []string { return splitWords(s, llama3Style, 3) }, nil
	case PreQwen2:
		return func(s string) []string { return splitWords(s, llama3Style, 1) }, nil
	case PreGPT2:
		return func(s string) []string { return splitWords(s, gpt2Style, 0) }, nil
	case PreSmolLM:
		return func(s string) []string {
			var out []string
			for _, p := range splitDigits(s) {
				out = append(out, splitWords(p, gpt2Style, 0)...)
			}
			return out
		}, nil
	}
	return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q (supported: %s, %s, %s, %s)", pre, PreLlama3, PreQwen2, PreGPT2, PreSmolLM)
}

type splitStyle int

const (
	gpt2Style splitStyle = iota
	llama3Style
)

func isL(r rune) bool    { return unicode.IsLetter(r) }
func isN(r rune) bool    { return unicode.IsNumber(r) }
func isS(r rune) bool    { return unicode.IsSpace(r) }
func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

// splitWords cuts s into the matches of one of the two regex families;
// maxDigits bounds \p{N} runs in llama3Style (gpt2Style takes them whole).
// Every character falls under some alternative, so the matches cover s.
func splitWords(s string, style splitStyle, maxDigits int) []string {
	rs := []rune(s)
	off := make([]int, len(rs)+1)
	for i, o := 0, 0; i < len(rs); i++ {
		off[i] = o
		o += utf8.RuneLen(rs[i])
		off[i+1] = o
	}
	// Invalid UTF-8 became U+FFFD (3 bytes) above; measure the real bytes.
	if off[len(rs)] != len(s) {
		return splitInvalid(s, style, maxDigits)
	}
	n := len(rs)
	at := func(i int) rune {
		if i < n {
			return rs[i]
		}
		return -1
	}
	run := func(i int, f func(rune) bool) int {
		for i < n && f(rs[i]) {
			i++
		}
		return i
	}
	var out []string
	for i := 0; i < n; {
		j := matchAt(rs, i, style, maxDigits, at, run)
		out = append(out, s[off[i]:off[j]])
		i = j
	}
	return out
}

// matchAt returns the end of the match that starts at rune i.
func matchAt(rs []rune, i int, style splitStyle, maxDigits int, at func(int) rune, run func(int, func(rune) bool) int) int {
	n := len(rs)
	r := rs[i]
	// Contractions: 's 't 'm 'd 're 've 'll (any case in llama3Style).
	if r == '\'' && i+1 < n {
		low := func(k int) rune {
			c := at(k)
			if style == llama3Style {
				return unicode.ToLower(c)
			}
			return c
		}
		switch low(i + 1) {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if low(i+2) == 'e' {
				return i + 3
			}
		case 'l':
			if low(i+2) == 'l' {
				return i + 3
			}
		}
	}
	if style == llama3Style {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if !isCRLF(r) && !isL(r) && !isN(r) && i+1 < n && isL(rs[i+1]) {
			return run(i+1, isL)
		}
		if isL(r) {
			return run(i, isL)
		}
		// \p{N}{1,maxDigits}
		if isN(r) {
			j := i
			for j < n && j-i < maxDigits && isN(rs[j]) {
				j++
			}
			return j
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		if j := i + b2i(r == ' ' && i+1 < n && isOther(rs[i+1])); isOther(at(j)) {
			return run(run(j, isOther), isCRLF)
		}
		// \s*[\r\n]+: up to the last newline of the whitespace run.
		e := run(i, isS)
		for k := e - 1; k >= i; k-- {
			if isCRLF(rs[k]) {
				return k + 1
			}
		}
		return spaceRun(i, e, n)
	}
	// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
	for _, f := range []func(rune) bool{isL, isN, isOther} {
		if j := i + b2i(r == ' ' && i+1 < n && f(rs[i+1])); f(at(j)) {
			return run(j, f)
		}
	}
	return spaceRun(i, run(i, isS), n)
}

// spaceRun matches \s+(?!\S)|\s+ on the whitespace run [i, e): the run less
// its last character when a non-space follows it and that leaves something.
func spaceRun(i, e, n int) int {
	if e < n && e-i >= 2 {
		return e - 1
	}
	return e
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// splitInvalid handles text that is not valid UTF-8: it splits the valid
// stretches and keeps each invalid byte as its own piece, so the words still
// cover every byte (byte-level BPE encodes any bytes).
func splitInvalid(s string, style splitStyle, maxDigits int) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if start < i {
				out = append(out, splitWords(s[start:i], style, maxDigits)...)
			}
			out = append(out, s[i:i+1])
			i++
			start = i
			continue
		}
		i += size
	}
	if start < len(s) {
		out = append(out, splitWords(s[start:], style, maxDigits)...)
	}
	return out
}

// splitDigits isolates every \p{N} character (Hugging Face's Digits
// pre-tokenizer with individual_digits).
func splitDigits(s string) []string {
	var out []string
	start := 0
	for i, r := range s {
		if !isN(r) {
			continue
		}
		if start < i {
			out = append(out, s[start:i])
		}
		n := utf8.RuneLen(r)
		out = append(out, s[i:i+n])
		start = i + n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
