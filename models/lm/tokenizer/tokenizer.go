// Package tokenizer turns text into a model's token ids and back: the
// vocabularies GGUF files carry (SentencePiece as llama.cpp runs it,
// byte-level BPE with the GPT-2, Llama 3, Qwen2 and SmolLM pre-tokenizers,
// and the project's byte vocabulary), read from GGUF metadata
// (SpecFromGGUF) or a Hugging Face tokenizer.json (ReadHF), and a
// StreamDecoder that hands out only complete UTF-8.
//
// It links no engine: a coordinator that counts and hashes prompt tokens
// needs this package, not models/lm.
package tokenizer

import (
	"bytes"
	"container/heap"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// Tokenizer turns text into token ids and back. Encode never adds BOS; the
// engine prepends it when the model asks for it (AddBOS).
type Tokenizer interface {
	// Encode is Tokenize(text, false).
	Encode(text string) []int32
	// Tokenize encodes text. User-defined tokens (added tokens that are not
	// special) are always matched in the text, as llama.cpp and Hugging
	// Face do; control tokens (<|eot_id|>, <s>) only when special is set,
	// otherwise their text is encoded like any other.
	Tokenize(text string, special bool) []int32
	// Decode renders ids as text, dropping control tokens. Bytes that do not
	// form valid UTF-8 become U+FFFD.
	Decode(ids []int32) string
	// Piece is the raw bytes token id contributes to the output (empty for
	// control tokens). Pieces of byte-level tokens can end mid-character;
	// StreamDecoder reassembles them.
	Piece(id int32) []byte
	BOS() int32
	EOS() int32
	// IsEOG reports whether id ends a generation: EOS, the end-of-turn token
	// (tokenizer.ggml.eot_token_id), and the control tokens llama.cpp treats
	// as turn ends by their text (<|eot_id|>, <|im_end|>, <|endoftext|>, …).
	IsEOG(id int32) bool
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
	// ModelLlama is SentencePiece as llama.cpp runs it: pieces with scores,
	// "▁" for spaces, and byte fallback through <0xXX> tokens.
	ModelLlama = "llama"
	// ModelGPT2 is byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM): a
	// pre-tokenizer (Spec.Pre) splits the text into words, whose
	// bytes are merged by rank (Spec.Merges).
	ModelGPT2 = "gpt2"
	// ModelByte is the project's first byte vocabulary: every byte is one
	// <0xXX> token, plus control tokens. Files written before byte
	// vocabularies became standard GGUF (ByteSpec) carry it; they
	// still load, with the same ids.
	ModelByte = "byte"
)

// Spec is a vocabulary as stored in GGUF metadata.
type Spec struct {
	Model          string    // ModelLlama, ModelGPT2 or ModelByte
	Tokens         []string  // piece text; byte tokens are "<0xXX>"; gpt2 tokens in byte-level spelling
	Scores         []float32 // merge priority (llama); nil = all zero
	Types          []int32   // Token* types; nil = all normal
	Merges         []string  // gpt2: "left right" token pairs, highest priority first
	Pre            string    // gpt2: pre-tokenizer (PreLlama3, PreQwen2, PreGPT2, PreSmolLM)
	BOS, EOS       int32
	EOT            int32 // end of turn (<|eot_id|>, <|im_end|>); 0 or -1 = none
	UNK            int32 // -1 = none
	AddBOS         bool
	AddSpacePrefix bool   // llama: prepend a space before encoding, as SentencePiece does
	ChatTemplate   string // tokenizer.chat_template (Jinja); "" = the engine's own template
}

// ByteSpec is the byte-level vocabulary: ids 0–255 are the bytes
// themselves, 256 is BOS "<s>", 257 is EOS "</s>" (258 tokens). It is written
// as a standard byte-level BPE vocabulary without merges (tokenizer.ggml.model
// "gpt2", bytes in GPT-2's byte-level spelling), which llama.cpp encodes to
// the same ids, whatever the pre-tokenizer splits, since every byte is a token.
func ByteSpec() Spec {
	s := Spec{Model: ModelGPT2, Pre: PreGPT2, BOS: 256, EOS: 257, UNK: -1, AddBOS: true, Merges: []string{}}
	for b := 0; b < 256; b++ {
		s.Tokens = append(s.Tokens, string(byteToRune[b]))
		s.Types = append(s.Types, TokenNormal)
	}
	s.Tokens = append(s.Tokens, "<s>", "</s>")
	s.Types = append(s.Types, TokenControl, TokenControl)
	return s
}

// IsByteVocab reports whether the spec is a byte vocabulary: ids 0–255 are
// the bytes (ByteSpec, padded or not, or the older "byte" model).
func (s Spec) IsByteVocab() bool {
	switch {
	case s.Model == ModelByte:
		return true
	case s.Model != ModelGPT2 || len(s.Merges) > 0 || len(s.Tokens) < 256:
		return false
	}
	for b := 0; b < 256; b++ {
		if s.Tokens[b] != string(byteToRune[b]) {
			return false
		}
	}
	return true
}

// PaddedByteSpec is ByteSpec padded with unused tokens to
// vocab entries, for models whose embedding table is larger than 258 rows.
func PaddedByteSpec(vocab int) (Spec, error) {
	s := ByteSpec()
	if vocab < len(s.Tokens) {
		return s, fmt.Errorf("tokenizer: a byte vocabulary needs at least %d tokens, got %d", len(s.Tokens), vocab)
	}
	for i := len(s.Tokens); i < vocab; i++ {
		s.Tokens = append(s.Tokens, fmt.Sprintf("<unused%d>", i))
		s.Types = append(s.Types, TokenUnused)
	}
	return s, nil
}

func unsupportedModel(m string) error {
	return fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: %s, %s, %s)", m, ModelLlama, ModelGPT2, ModelByte)
}

// Validate checks the spec against a model's vocabulary size.
func (s Spec) Validate(vocab int) error {
	if err := s.checkFields(vocab); err != nil {
		return err
	}
	_, err := s.Build()
	return err
}

// checkFields is Validate less building the tokenizer.
func (s Spec) checkFields(vocab int) error {
	switch s.Model {
	case ModelLlama, ModelGPT2, ModelByte:
	default:
		return unsupportedModel(s.Model)
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
	if s.EOT > 0 && !in(s.EOT) {
		return fmt.Errorf("tokenizer: EOT %d outside the vocabulary", s.EOT)
	}
	return nil
}

func (s Spec) typeOf(i int) int32 {
	if s.Types == nil {
		return TokenNormal
	}
	return s.Types[i]
}

// GGUF metadata keys of the tokenizer, as llama.cpp names them.
const (
	keyTokModel        = "tokenizer.ggml.model"
	keyTokPre          = "tokenizer.ggml.pre"
	keyTokTokens       = "tokenizer.ggml.tokens"
	keyTokScores       = "tokenizer.ggml.scores"
	keyTokTypes        = "tokenizer.ggml.token_type"
	keyTokMerges       = "tokenizer.ggml.merges"
	keyTokBOS          = "tokenizer.ggml.bos_token_id"
	keyTokEOS          = "tokenizer.ggml.eos_token_id"
	keyTokEOT          = "tokenizer.ggml.eot_token_id"
	keyTokUNK          = "tokenizer.ggml.unknown_token_id"
	keyTokAddBOS       = "tokenizer.ggml.add_bos_token"
	keyTokSpacePrefix  = "tokenizer.ggml.add_space_prefix"
	keyTokChatTemplate = "tokenizer.chat_template"
)

// GGUFMetadata is the spec as tokenizer.ggml.* metadata, which SpecFromGGUF
// reads back (and llama.cpp reads too).
func (s Spec) GGUFMetadata() []gguf.KV {
	kv := []gguf.KV{{Key: keyTokModel, Value: s.Model}}
	if s.Model == ModelGPT2 {
		kv = append(kv, gguf.KV{Key: keyTokPre, Value: s.Pre})
	}
	kv = append(kv, gguf.KV{Key: keyTokTokens, Value: s.Tokens})
	if s.Scores != nil {
		kv = append(kv, gguf.KV{Key: keyTokScores, Value: s.Scores})
	}
	if s.Types != nil {
		kv = append(kv, gguf.KV{Key: keyTokTypes, Value: s.Types})
	}
	if s.Model == ModelGPT2 {
		// llama.cpp requires the key for gpt2 vocabularies, even empty.
		kv = append(kv, gguf.KV{Key: keyTokMerges, Value: append([]string{}, s.Merges...)})
	}
	kv = append(kv,
		gguf.KV{Key: keyTokBOS, Value: uint32(s.BOS)},
		gguf.KV{Key: keyTokEOS, Value: uint32(s.EOS)},
		gguf.KV{Key: keyTokAddBOS, Value: s.AddBOS},
	)
	if s.EOT > 0 {
		kv = append(kv, gguf.KV{Key: keyTokEOT, Value: uint32(s.EOT)})
	}
	if s.UNK >= 0 {
		kv = append(kv, gguf.KV{Key: keyTokUNK, Value: uint32(s.UNK)})
	}
	if s.Model == ModelLlama {
		kv = append(kv, gguf.KV{Key: keyTokSpacePrefix, Value: s.AddSpacePrefix})
	}
	if s.ChatTemplate != "" {
		kv = append(kv, gguf.KV{Key: keyTokChatTemplate, Value: s.ChatTemplate})
	}
	return kv
}

// SpecFromGGUF reads tokenizer.ggml.* metadata.
func SpecFromGGUF(f *gguf.File) (Spec, error) {
	var s Spec
	m, ok := f.Get(keyTokModel)
	if !ok {
		return s, fmt.Errorf("tokenizer: %s missing", keyTokModel)
	}
	if s.Model, ok = m.(string); !ok {
		return s, fmt.Errorf("tokenizer: %s is %T, want string", keyTokModel, m)
	}
	switch s.Model {
	case ModelLlama, ModelGPT2, ModelByte:
	default:
		return s, unsupportedModel(s.Model)
	}
	toks, _ := f.Get(keyTokTokens)
	if s.Tokens, ok = toks.([]string); !ok {
		return s, fmt.Errorf("tokenizer: %s is %T, want a string array", keyTokTokens, toks)
	}
	if v, ok := f.Get(keyTokScores); ok {
		if s.Scores, ok = v.([]float32); !ok {
			return s, fmt.Errorf("tokenizer: %s is %T, want a float32 array", keyTokScores, v)
		}
	}
	if v, ok := f.Get(keyTokTypes); ok {
		if s.Types, ok = v.([]int32); !ok {
			return s, fmt.Errorf("tokenizer: %s is %T, want an int32 array", keyTokTypes, v)
		}
	}
	if s.Model == ModelGPT2 {
		v, ok := f.Get(keyTokMerges)
		if !ok {
			return s, fmt.Errorf("tokenizer: %s missing (a gpt2 vocabulary needs it)", keyTokMerges)
		}
		if s.Merges, ok = v.([]string); !ok {
			return s, fmt.Errorf("tokenizer: %s is %T, want a string array", keyTokMerges, v)
		}
		if v, ok := f.Get(keyTokPre); ok {
			if s.Pre, ok = v.(string); !ok {
				return s, fmt.Errorf("tokenizer: %s is %T, want a string", keyTokPre, v)
			}
		}
	}
	if v, ok := f.Get(keyTokChatTemplate); ok {
		if s.ChatTemplate, ok = v.(string); !ok {
			return s, fmt.Errorf("tokenizer: %s is %T, want a string", keyTokChatTemplate, v)
		}
	}
	id := func(key string, def int32) (int32, error) {
		v, ok := f.Get(key)
		if !ok {
			return def, nil
		}
		n, err := gguf.IntValue(v)
		if err != nil {
			return 0, fmt.Errorf("tokenizer: %s: %w", key, err)
		}
		if n > 1<<31-1 {
			return 0, fmt.Errorf("tokenizer: %s: %d is not a token id", key, n)
		}
		return int32(n), nil
	}
	var err error
	if s.BOS, err = id(keyTokBOS, 1); err != nil {
		return s, err
	}
	if s.EOS, err = id(keyTokEOS, 2); err != nil {
		return s, err
	}
	if s.EOT, err = id(keyTokEOT, -1); err != nil {
		return s, err
	}
	if s.UNK, err = id(keyTokUNK, -1); err != nil {
		return s, err
	}
	s.AddBOS = true
	if v, ok := f.Get(keyTokAddBOS); ok {
		s.AddBOS, _ = v.(bool)
	}
	s.AddSpacePrefix = s.Model == ModelLlama
	if v, ok := f.Get(keyTokSpacePrefix); ok {
		s.AddSpacePrefix, _ = v.(bool)
	}
	return s, nil
}

// BuildFor checks the spec against a model's vocabulary size, then builds it:
// what every model constructor needs before it can hold a tokenizer (Validate
// would build it twice).
func (s Spec) BuildFor(vocab int) (Tokenizer, error) {
	if err := s.checkFields(vocab); err != nil {
		return nil, err
	}
	return s.Build()
}

// eogTexts are the control tokens llama.cpp also ends a generation at, by
// their text, whatever the metadata's EOS says (a base model's EOS is
// <|end_of_text|> while its chat template ends turns with <|eot_id|>).
var eogTexts = map[string]bool{
	"<|eot_id|>": true, "<|im_end|>": true, "<|end|>": true, "<end_of_turn>": true,
	"<|endoftext|>": true, "<|end_of_text|>": true, "<|eom_id|>": true, "<EOT>": true, "_<EOT>": true,
}

// Build makes the tokenizer a spec describes.
func (s Spec) Build() (Tokenizer, error) {
	v := &vocab{spec: s, pieces: make([][]byte, len(s.Tokens)), eog: map[int32]bool{s.EOS: true}, special: map[byte][]specialToken{}}
	if s.EOT > 0 {
		v.eog[s.EOT] = true
	}
	for b := range v.byteID {
		v.byteID[b] = -1
	}
	for i, t := range s.Tokens {
		typ := s.typeOf(i)
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
		case TokenUserDefined:
			v.pieces[i] = []byte(t)
		default:
			if s.Model == ModelGPT2 {
				v.pieces[i] = unByteLevel(t)
			} else {
				v.pieces[i] = []byte(strings.ReplaceAll(t, "▁", " "))
			}
		}
		if (typ == TokenControl || typ == TokenUserDefined || typ == TokenUnknown) && t != "" {
			v.special[t[0]] = append(v.special[t[0]], specialToken{text: t, id: int32(i), always: typ == TokenUserDefined})
			if typ == TokenControl && eogTexts[t] {
				v.eog[int32(i)] = true
			}
		}
	}
	for _, l := range v.special {
		// Longest first, so the first match at a position is the longest.
		slices.SortStableFunc(l, func(a, b specialToken) int { return len(b.text) - len(a.text) })
	}
	switch s.Model {
	case ModelByte:
		for b, id := range v.byteID {
			if id < 0 {
				return nil, fmt.Errorf("tokenizer: byte vocabulary lacks a token for byte %#02x", b)
			}
		}
		v.frag = &byteTokenizer{v}
	case ModelLlama:
		t := &spmTokenizer{vocab: v, ids: make(map[string]int32, len(s.Tokens))}
		for i, tok := range s.Tokens {
			typ := s.typeOf(i)
			if typ == TokenNormal || typ == TokenUserDefined || typ == TokenUnknown {
				if _, dup := t.ids[tok]; !dup {
					t.ids[tok] = int32(i)
				}
			}
		}
		v.frag = t
	case ModelGPT2:
		t, err := newBPE(v, s)
		if err != nil {
			return nil, err
		}
		v.frag = t
	default:
		return nil, unsupportedModel(s.Model)
	}
	return v, nil
}

func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	n, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(n), err == nil
}

// vocab is what every tokenizer shares: pieces for decoding, special ids,
// and the split of text at special and user-defined tokens; frag encodes
// the plain text between them.
type vocab struct {
	spec    Spec
	pieces  [][]byte
	byteID  [256]int32
	eog     map[int32]bool
	special map[byte][]specialToken // by first byte, longest first
	frag    fragmentEncoder
}

// fragmentEncoder encodes text that holds no special token. afterSpecial is
// true at the start of the text and right after a special token (where
// SentencePiece adds its space prefix).
type fragmentEncoder interface {
	encodeFragment(text string, afterSpecial bool, out []int32) []int32
}

type specialToken struct {
	text   string
	id     int32
	always bool // user-defined: matched even without special parsing
}

func (v *vocab) BOS() int32          { return v.spec.BOS }
func (v *vocab) EOS() int32          { return v.spec.EOS }
func (v *vocab) IsEOG(id int32) bool { return v.eog[id] }
func (v *vocab) AddBOS() bool        { return v.spec.AddBOS }
func (v *vocab) VocabSize() int      { return len(v.pieces) }

func (v *vocab) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(v.pieces) {
		return nil
	}
	return v.pieces[id]
}

// addsSpacePrefix: Encode puts a space before the text, which decoding the
// start of a text drops again.
func (v *vocab) addsSpacePrefix() bool { return v.spec.Model == ModelLlama && v.spec.AddSpacePrefix }

func (v *vocab) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		b = append(b, v.Piece(id)...)
	}
	if v.addsSpacePrefix() && len(b) > 0 && b[0] == ' ' {
		b = b[1:] // the space Encode added
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (v *vocab) Encode(text string) []int32 { return v.Tokenize(text, false) }

// Tokenize splits text at special tokens (leftmost, longest first) and
// encodes the text between them, as llama.cpp's tokenizer_st_partition does.
func (v *vocab) Tokenize(text string, special bool) []int32 {
	var out []int32
	after, start := true, 0
	for i := 0; i < len(text); i++ {
		for _, st := range v.special[text[i]] {
			if (special || st.always) && strings.HasPrefix(text[i:], st.text) {
				if start < i {
					out = v.frag.encodeFragment(text[start:i], after, out)
				}
				out = append(out, st.id)
				after, start = true, i+len(st.text)
				i = start - 1
				break
			}
		}
	}
	if start < len(text) {
		out = v.frag.encodeFragment(text[start:], after, out)
	}
	return out
}

type byteTokenizer struct{ *vocab }

func (t *byteTokenizer) encodeFragment(text string, _ bool, out []int32) []int32 {
	for i := 0; i < len(text); i++ {
		out = append(out, t.byteID[text[i]])
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

func (t *spmTokenizer) encodeFragment(text string, afterSpecial bool, out []int32) []int32 {
	if text == "" {
		return out
	}
	if t.spec.AddSpacePrefix && afterSpecial {
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
	// dropPrefix: the next piece starts the text, and its leading space is
	// SentencePiece's dummy prefix (StartText).
	dropPrefix bool
}

// NewStreamDecoder starts decoding a fresh stream of tokens.
func NewStreamDecoder(t Tokenizer) *StreamDecoder { return &StreamDecoder{tok: t} }

// StartText says the tokens pushed next start the text (a completion of an
// empty prompt): with a SentencePiece vocabulary that adds a space prefix,
// the first piece's leading space is that prefix and is dropped, as Decode
// drops it. Other vocabularies are unaffected.
func (d *StreamDecoder) StartText() {
	v, ok := d.tok.(interface{ addsSpacePrefix() bool })
	d.dropPrefix = ok && v.addsSpacePrefix()
}

// Push adds one token and returns the text that is now complete.
func (d *StreamDecoder) Push(id int32) string {
	p := d.tok.Piece(id)
	if d.dropPrefix && len(p) > 0 {
		d.dropPrefix = false
		p = bytes.TrimPrefix(p, []byte(" "))
	}
	d.pending = append(d.pending, p...)
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
