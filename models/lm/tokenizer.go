package lm

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// Tokenizer turns text into token ids and back. Encode never adds BOS; the
// engine prepends it when the model asks for it (AddBOS).
type Tokenizer interface {
	Encode(text string) []int32
	// Decode renders ids as text, dropping control tokens. Bytes that do not
	// form valid UTF-8 become U+FFFD.
	Decode(ids []int32) string
	// Piece is the raw bytes token id contributes to the output (empty for
	// control tokens). Pieces of byte-level tokens can end mid-character;
	// StreamDecoder reassembles them.
	Piece(id int32) []byte
	BOS() int32
	EOS() int32
	AddBOS() bool
	VocabSize() int
}

// Token types as GGUF's tokenizer.ggml.token_type stores them (llama.cpp).
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// Tokenizer models this engine understands.
const (
	// TokenizerLlama is SentencePiece as llama.cpp runs it: pieces with scores,
	// "▁" for spaces, and byte fallback through <0xXX> tokens.
	TokenizerLlama = "llama"
	// TokenizerByte is a plain byte vocabulary: every byte is one <0xXX> token,
	// plus control tokens. What the project's own small models are trained with.
	TokenizerByte = "byte"
)

// TokenizerSpec is a vocabulary as stored in GGUF metadata.
type TokenizerSpec struct {
	Model          string    // TokenizerLlama or TokenizerByte
	Tokens         []string  // piece text; byte tokens are "<0xXX>"
	Scores         []float32 // merge priority (llama); nil = all zero
	Types          []int32   // Token* types; nil = all normal
	BOS, EOS       int32
	UNK            int32 // -1 = none
	AddBOS         bool
	AddSpacePrefix bool // llama: prepend a space before encoding, as SentencePiece does
}

// ByteTokenizerSpec is the byte-level vocabulary: ids 0–255 are the bytes
// themselves, 256 is BOS "<s>", 257 is EOS "</s>" (258 tokens).
func ByteTokenizerSpec() TokenizerSpec {
	s := TokenizerSpec{Model: TokenizerByte, BOS: 256, EOS: 257, UNK: -1, AddBOS: true}
	for b := 0; b < 256; b++ {
		s.Tokens = append(s.Tokens, fmt.Sprintf("<0x%02X>", b))
		s.Types = append(s.Types, TokenByte)
	}
	s.Tokens = append(s.Tokens, "<s>", "</s>")
	s.Types = append(s.Types, TokenControl, TokenControl)
	return s
}

// PaddedByteTokenizerSpec is ByteTokenizerSpec padded with unused tokens to
// vocab entries, for models whose embedding table is larger than 258 rows.
func PaddedByteTokenizerSpec(vocab int) (TokenizerSpec, error) {
	s := ByteTokenizerSpec()
	if vocab < len(s.Tokens) {
		return s, fmt.Errorf("tokenizer: a byte vocabulary needs at least %d tokens, got %d", len(s.Tokens), vocab)
	}
	for i := len(s.Tokens); i < vocab; i++ {
		s.Tokens = append(s.Tokens, fmt.Sprintf("<unused%d>", i))
		s.Types = append(s.Types, TokenUnused)
	}
	return s, nil
}

// Validate checks the spec against a model's vocabulary size.
func (s TokenizerSpec) Validate(vocab int) error {
	switch s.Model {
	case TokenizerLlama, TokenizerByte:
	default:
		return fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: %s, %s)", s.Model, TokenizerLlama, TokenizerByte)
	}
	if len(s.Tokens) != vocab {
		return fmt.Errorf("tokenizer: %d tokens for a vocabulary of %d", len(s.Tokens), vocab)
	}
	if s.Scores != nil && len(s.Scores) != len(s.Tokens) {
		return fmt.Errorf("tokenizer: %d scores for %d tokens", len(s.Scores), len(s.Tokens))
	}
	if s.Types != nil && len(s.Types) != len(s.Tokens) {
		return fmt.Errorf("tokenizer: %d token types for %d tokens", len(s.Types), len(s.Tokens))
	}
	in := func(id int32) bool { return id >= 0 && int(id) < len(s.Tokens) }
	if !in(s.BOS) || !in(s.EOS) {
		return fmt.Errorf("tokenizer: BOS %d / EOS %d outside the vocabulary of %d", s.BOS, s.EOS, len(s.Tokens))
	}
	if s.UNK != -1 && !in(s.UNK) {
		return fmt.Errorf("tokenizer: UNK %d outside the vocabulary", s.UNK)
	}
	_, err := s.Build()
	return err
}

func (s TokenizerSpec) kvs() []gguf.KV {
	kv := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: s.Model},
		{Key: "tokenizer.ggml.tokens", Value: s.Tokens},
	}
	if s.Scores != nil {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.scores", Value: s.Scores})
	}
	if s.Types != nil {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.token_type", Value: s.Types})
	}
	kv = append(kv,
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: uint32(s.BOS)},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(s.EOS)},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: s.AddBOS},
	)
	if s.UNK >= 0 {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(s.UNK)})
	}
	if s.Model == TokenizerLlama {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: s.AddSpacePrefix})
	}
	return kv
}

// tokenizerSpecFrom reads tokenizer.ggml.* metadata.
func tokenizerSpecFrom(f *gguf.File) (TokenizerSpec, error) {
	var s TokenizerSpec
	m, ok := f.Get("tokenizer.ggml.model")
	if !ok {
		return s, errors.New("tokenizer: tokenizer.ggml.model missing")
	}
	if s.Model, ok = m.(string); !ok {
		return s, fmt.Errorf("tokenizer: tokenizer.ggml.model is %T, want string", m)
	}
	if s.Model != TokenizerLlama && s.Model != TokenizerByte {
		return s, fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: %s, %s)", s.Model, TokenizerLlama, TokenizerByte)
	}
	toks, _ := f.Get("tokenizer.ggml.tokens")
	if s.Tokens, ok = toks.([]string); !ok {
		return s, fmt.Errorf("tokenizer: tokenizer.ggml.tokens is %T, want a string array", toks)
	}
	if v, ok := f.Get("tokenizer.ggml.scores"); ok {
		if s.Scores, ok = v.([]float32); !ok {
			return s, fmt.Errorf("tokenizer: tokenizer.ggml.scores is %T, want a float32 array", v)
		}
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		if s.Types, ok = v.([]int32); !ok {
			return s, fmt.Errorf("tokenizer: tokenizer.ggml.token_type is %T, want an int32 array", v)
		}
	}
	id := func(key string, def int32) (int32, error) {
		v, ok := f.Get(key)
		if !ok {
			return def, nil
		}
		n, err := metaInt(v)
		if err != nil {
			return 0, fmt.Errorf("tokenizer: %s: %w", key, err)
		}
		return int32(n), nil
	}
	var err error
	if s.BOS, err = id("tokenizer.ggml.bos_token_id", 1); err != nil {
		return s, err
	}
	if s.EOS, err = id("tokenizer.ggml.eos_token_id", 2); err != nil {
		return s, err
	}
	if s.UNK, err = id("tokenizer.ggml.unknown_token_id", -1); err != nil {
		return s, err
	}
	s.AddBOS = true
	if v, ok := f.Get("tokenizer.ggml.add_bos_token"); ok {
		s.AddBOS, _ = v.(bool)
	}
	s.AddSpacePrefix = s.Model == TokenizerLlama
	if v, ok := f.Get("tokenizer.ggml.add_space_prefix"); ok {
		s.AddSpacePrefix, _ = v.(bool)
	}
	return s, nil
}

// buildFor checks the spec against a model's vocabulary size, then builds it:
// what every model constructor needs before it can hold a tokenizer.
func (s TokenizerSpec) buildFor(vocab int) (Tokenizer, error) {
	if err := s.Validate(vocab); err != nil {
		return nil, err
	}
	return s.Build()
}

// Build makes the tokenizer a spec describes.
func (s TokenizerSpec) Build() (Tokenizer, error) {
	v := &vocab{spec: s, pieces: make([][]byte, len(s.Tokens))}
	for b := range v.byteID {
		v.byteID[b] = -1
	}
	for i, t := range s.Tokens {
		typ := TokenNormal
		if s.Types != nil {
			typ = s.Types[i]
		}
		switch typ {
		case TokenByte:
			b, ok := parseByteToken(t)
			if !ok {
				return nil, fmt.Errorf("tokenizer: byte token %d is %q, want <0xXX>", i, t)
			}
			if v.byteID[b] < 0 {
				v.byteID[b] = int32(i)
			}
			v.pieces[i] = []byte{b}
		case TokenControl, TokenUnused:
			// Control tokens render as nothing: <s> must not appear in output.
		default:
			v.pieces[i] = []byte(strings.ReplaceAll(t, "▁", " "))
		}
	}
	switch s.Model {
	case TokenizerByte:
		for b, id := range v.byteID {
			if id < 0 {
				return nil, fmt.Errorf("tokenizer: byte vocabulary lacks a token for byte %#02x", b)
			}
		}
		return &byteTokenizer{v}, nil
	case TokenizerLlama:
		t := &spmTokenizer{vocab: v, ids: make(map[string]int32, len(s.Tokens))}
		for i, tok := range s.Tokens {
			typ := TokenNormal
			if s.Types != nil {
				typ = s.Types[i]
			}
			if typ == TokenNormal || typ == TokenUserDefined || typ == TokenUnknown {
				if _, dup := t.ids[tok]; !dup {
					t.ids[tok] = int32(i)
				}
			}
		}
		return t, nil
	}
	return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: %s, %s)", s.Model, TokenizerLlama, TokenizerByte)
}

func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	n, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(n), err == nil
}

// vocab is what both tokenizers share: pieces for decoding and special ids.
type vocab struct {
	spec   TokenizerSpec
	pieces [][]byte
	byteID [256]int32
}

func (v *vocab) BOS() int32     { return v.spec.BOS }
func (v *vocab) EOS() int32     { return v.spec.EOS }
func (v *vocab) AddBOS() bool   { return v.spec.AddBOS }
func (v *vocab) VocabSize() int { return len(v.pieces) }

func (v *vocab) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(v.pieces) {
		return nil
	}
	return v.pieces[id]
}

func (v *vocab) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		b = append(b, v.Piece(id)...)
	}
	if v.spec.Model == TokenizerLlama && v.spec.AddSpacePrefix && len(b) > 0 && b[0] == ' ' {
		b = b[1:] // the space Encode added
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

type byteTokenizer struct{ *vocab }

func (t *byteTokenizer) Encode(text string) []int32 {
	out := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		out[i] = t.byteID[text[i]]
	}
	return out
}

// spmTokenizer is SentencePiece's BPE-by-score encoding as llama.cpp's
// llm_tokenizer_spm runs it: start from UTF-8 characters, repeatedly merge the
// adjacent pair whose concatenation is a piece with the highest score (leftmost
// on ties), then fall back to byte tokens for anything left unknown.
type spmTokenizer struct {
	*vocab
	ids map[string]int32
}

type spmSymbol struct {
	prev, next int
	text       string
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

type bigramQueue []spmBigram

func (q bigramQueue) Len() int { return len(q) }
func (q bigramQueue) Less(i, j int) bool {
	if q[i].score != q[j].score {
		return q[i].score > q[j].score
	}
	return q[i].left < q[j].left
}
func (q bigramQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bigramQueue) Push(x any)   { *q = append(*q, x.(spmBigram)) }
func (q *bigramQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func (t *spmTokenizer) Encode(text string) []int32 {
	if text == "" {
		return nil
	}
	if t.spec.AddSpacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", "▁")
	var syms []spmSymbol
	for i := 0; i < len(text); {
		_, n := utf8.DecodeRuneInString(text[i:])
		syms = append(syms, spmSymbol{prev: len(syms) - 1, next: len(syms) + 1, text: text[i : i+n]})
		i += n
	}
	syms[len(syms)-1].next = -1
	q := &bigramQueue{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := syms[l].text + syms[r].text
		if id, ok := t.ids[s]; ok {
			heap.Push(q, spmBigram{left: l, right: r, score: t.score(id), size: len(s)})
		}
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(spmBigram)
		l, r := &syms[b.left], &syms[b.right]
		if l.text == "" || r.text == "" || len(l.text)+len(r.text) != b.size {
			continue // one side was merged since this pair was queued
		}
		l.text += r.text
		r.text = ""
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	var out []int32
	for i := 0; i >= 0; i = syms[i].next {
		s := syms[i].text
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			switch {
			case t.byteID[s[j]] >= 0:
				out = append(out, t.byteID[s[j]])
			case t.spec.UNK >= 0:
				out = append(out, t.spec.UNK)
			}
		}
	}
	return out
}

func (t *spmTokenizer) score(id int32) float32 {
	if t.spec.Scores == nil {
		return 0
	}
	return t.spec.Scores[id]
}

// StreamDecoder turns sampled token ids into text one token at a time, holding
// back only the bytes of a character that is not complete yet (byte-level
// tokens can end mid-character), so every string it returns is valid UTF-8 and
// nothing is delayed longer than the character needs.
type StreamDecoder struct {
	tok     Tokenizer
	pending []byte
}

// NewStreamDecoder starts decoding a fresh stream of tokens.
func NewStreamDecoder(t Tokenizer) *StreamDecoder { return &StreamDecoder{tok: t} }

// Push adds one token and returns the text that is now complete.
func (d *StreamDecoder) Push(id int32) string {
	d.pending = append(d.pending, d.tok.Piece(id)...)
	cut := completePrefix(d.pending)
	out := strings.ToValidUTF8(string(d.pending[:cut]), "\uFFFD")
	d.pending = slices.Delete(d.pending, 0, cut)
	return out
}

// Flush returns whatever is held back (an incomplete character becomes U+FFFD).
func (d *StreamDecoder) Flush() string {
	out := strings.ToValidUTF8(string(d.pending), "\uFFFD")
	d.pending = d.pending[:0]
	return out
}

// completePrefix is the length of b without a trailing incomplete UTF-8
// sequence.
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}

// metaInt reads an integer metadata value of any integer type.
func metaInt(v any) (int64, error) {
	switch x := v.(type) {
	case uint8:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint64:
		if x > 1<<62 {
			return 0, fmt.Errorf("%d is too large", x)
		}
		return int64(x), nil
	case int64:
		return x, nil
	}
	return 0, fmt.Errorf("%T is not an integer", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
