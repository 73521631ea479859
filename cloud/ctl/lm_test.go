package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

func TestLMInitLogitsGenerateBench(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	out, err := runCtl(t, "lm", "init", "--out", path, "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
		"--ffn", "96", "--vocab", "300", "--ctx", "128", "--dtype", "q8_0", "--seed", "5")
	if err != nil || !strings.Contains(out, "q8_0") {
		t.Fatalf("init: %v\n%s", err, out)
	}
	m, err := lm.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.Layers != 2 || c.Dim != 64 || c.KVHeads != 2 || c.FFN != 96 || c.Vocab != 300 || c.ContextLen != 128 || m.DType != lm.Q8_0 {
		t.Fatalf("loaded %+v %v", c, m.DType)
	}

	out, err = runCtl(t, "lm", "logits", "--model", path, "--tokens", "256, 104,105")
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("logits output is not a JSON array: %v\n%.200s", err, out)
	}
	want := m.Logits([]int32{256, 104, 105})
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d: printed %v, computed %v (JSON must round-trip float32 exactly)", i, got[i], want[i])
		}
	}
	if _, err := runCtl(t, "lm", "logits", "--model", path, "--tokens", "1,300"); err == nil || !strings.Contains(err.Error(), "tokens") {
		t.Fatalf("out-of-vocabulary token: %v", err)
	}

	out, err = runCtl(t, "lm", "generate", "--model", path, "--prompt", "hi", "--max-tokens", "5", "--seed", "3", "--temperature", "1")
	if err != nil || !strings.Contains(out, "generated tokens") {
		t.Fatalf("generate: %v\n%s", err, out)
	}

	out, err = runCtl(t, "lm", "bench", "--model", path, "--batch", "1,2", "--tokens", "8", "--prompt-len", "64", "--copy-mb", "8")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, s := range []string{"decode batch   1", "decode batch   2", "prefill:", "TTFT uncached", "of a memory copy"} {
		if !strings.Contains(out, s) {
			t.Errorf("bench output lacks %q:\n%s", s, out)
		}
	}
	if _, err := runCtl(t, "lm", "init", "--out", path, "--dim", "60", "--heads", "7"); err == nil {
		t.Fatal("init accepted dim 60 with 7 heads")
	}
}

func TestLMQuantizeAndCompareBench(t *testing.T) {
	dir := t.TempDir()
	f32, q := filepath.Join(dir, "f32.gguf"), filepath.Join(dir, "q4km.gguf")
	if out, err := runCtl(t, "lm", "init", "--out", f32, "--layers", "2", "--dim", "256", "--heads", "4",
		"--ffn", "512", "--vocab", "300", "--ctx", "128"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	out, err := runCtl(t, "lm", "quantize", "--in", f32, "--out", q, "--type", "q4_k_m")
	if err != nil || !strings.Contains(out, "q4_k_m") || !strings.Contains(out, "q6_K×") {
		t.Fatalf("quantize: %v\n%s", err, out)
	}
	m, err := lm.Load(q)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.TensorTypes(); got != "q4_K×13 q6_K×3" {
		t.Errorf("tensor types %s", got)
	}
	if _, err := runCtl(t, "lm", "quantize", "--in", f32, "--out", q, "--type", "iq2_xxs"); err == nil {
		t.Error("iq2_xxs accepted")
	}
	out, err = runCtl(t, "lm", "bench", "--model", f32+","+q, "--batch", "1", "--tokens", "4", "--prompt-len", "32",
		"--copy-mb", "4", "--repeats", "1")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, s := range []string{"memory-mapped true", "once a forward pass touched every matrix", "model (ratios: to the first)", "q4km.gguf"} {
		if !strings.Contains(out, s) {
			t.Errorf("bench output lacks %q:\n%s", s, out)
		}
	}
}

// TestLMInitWithHFTokenizerAndTokenize: lm init carries a Hugging Face
// vocabulary (tokens, merges, special tokens, chat template) into the file,
// with each architecture; lm tokenize prints ids per JSON line.
func TestLMInitWithHFTokenizerAndTokenize(t *testing.T) {
	dir := t.TempDir()
	tj := filepath.Join("..", "..", "models", "lm", "tokenizer", "testdata", "tiny-tokenizer.json")
	cj := filepath.Join("..", "..", "models", "lm", "tokenizer", "testdata", "tiny-tokenizer_config.json")
	for _, arch := range []struct{ name, extra string }{{"llama", "--rope-scaling-factor=8"}, {"qwen2", "--tied"}, {"qwen3", "--head-dim=24"}} {
		path := filepath.Join(dir, arch.name+".gguf")
		out, err := runCtl(t, "lm", "init", "--out", path, "--arch", arch.name, arch.extra, "--layers", "1", "--dim", "32", "--heads", "2",
			"--ffn", "64", "--ctx", "64", "--tokenizer", tj, "--tokenizer-config", cj)
		if err != nil || !strings.Contains(out, "vocab 267 (gpt2)") || !strings.Contains(out, arch.name) {
			t.Fatalf("init %s: %v\n%s", arch.name, err, out)
		}
		m, err := lm.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		spec := m.TokenizerSpec()
		if m.Config.Arch != map[string]string{"llama": ""}[arch.name] && m.Config.Arch != arch.name || spec.Pre != tokenizer.PreQwen2 || len(spec.Merges) != 7 ||
			!m.HasChatTemplate() || spec.EOS != 265 || spec.AddBOS {
			t.Fatalf("%s: loaded %+v, pre %q, %d merges, template %v, EOS %d, add BOS %v", arch.name, m.Config, spec.Pre, len(spec.Merges), m.HasChatTemplate(), spec.EOS, spec.AddBOS)
		}
	}
	if _, err := runCtl(t, "lm", "init", "--out", filepath.Join(dir, "x.gguf"), "--vocab", "300", "--tokenizer", tj); err == nil || !strings.Contains(err.Error(), "267 tokens") {
		t.Fatalf("--vocab contradicting the tokenizer: %v", err)
	}
	path := filepath.Join(dir, "qwen2.gguf")
	in := `"hello world"` + "\n" + `"<|im_start|>hi<think>"` + "\n" + `""` + "\n"
	tokenize := func(args ...string) (string, error) {
		var out bytes.Buffer
		cio := cli.IO{Stdin: strings.NewReader(in), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		err := Root().Dispatch(context.Background(), cio, append([]string{"lm", "tokenize", "--model", path}, args...))
		return out.String(), err
	}
	// "hello" merges whole (259); " world" merges to "Ġwor" (262) then the
	// bytes l and d; <think> is user-defined, so split either way.
	out, err := tokenize()
	if want := "259 262 108 100\n60 124 105 109 95 115 116 97 114 116 124 62 104 105 266\n\n"; err != nil || out != want {
		t.Fatalf("tokenize: %v\n got %q\nwant %q", err, out, want)
	}
	out, err = tokenize("--special")
	if want := "259 262 108 100\n264 104 105 266\n\n"; err != nil || out != want {
		t.Fatalf("tokenize --special: %v\n got %q\nwant %q", err, out, want)
	}
	in = "not json\n"
	if _, err := tokenize(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad line: %v", err)
	}
}

// TestLMToolPrior: lm toolprior writes the model back with a prior that
// loads, over the same file when --out is --in, keeping the weights; bad
// flags are refused and leave the file as it was.
func TestLMToolPrior(t *testing.T) {
	if raceEnabled {
		t.Skip("trains or evaluates models: make test runs it without -race, which adds minutes and nothing else here")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "m.gguf")
	if out, err := runCtl(t, "lm", "init", "--out", f, "--layers", "1", "--dim", "64", "--heads", "2",
		"--ffn", "128", "--vocab", "258", "--ctx", "64"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	before, err := lm.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if before.ToolPrior() != nil {
		t.Fatal("a random model carries a prior")
	}
	if _, err := runCtl(t, "lm", "toolprior", "--in", f, "--out", f, "--buckets", "0"); err == nil {
		t.Error("0 buckets accepted")
	}
	if _, err := runCtl(t, "lm", "toolprior", "--in", f, "--out", f, "--weight", "-1"); err == nil {
		t.Error("a negative weight accepted")
	}
	out, err := runCtl(t, "lm", "toolprior", "--in", f, "--out", f, "--buckets", "256", "--weight", "0.3")
	if err != nil || !strings.Contains(out, "27 labels × 256 buckets") {
		t.Fatalf("toolprior: %v\n%s", err, out)
	}
	after, err := lm.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	p := after.ToolPrior()
	if p == nil || p.Buckets != 256 || float32(p.Weight) != 0.3 {
		t.Fatalf("prior read back: %+v", p)
	}
	if before.Fingerprint() != after.Fingerprint() {
		t.Error("the model's weights changed")
	}
	if st, _ := os.Stat(f); st.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v", st.Mode())
	}
}

// TestLMGenerateRawStories: `lm generate --raw` with an empty prompt on the
// real pretrained fixture prints its authors' published greedy story from
// BOS (llama2.c doc/stories260K.md), with no leading space.
func TestLMGenerateRawStories(t *testing.T) {
	out, err := runCtl(t, "lm", "generate", "--model", "../../models/lm/testdata/stories260K/stories260K.gguf",
		"--raw", "--prompt", "", "--max-tokens", "60", "--temperature", "0")
	const published = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high"
	if err != nil || !strings.HasPrefix(out, published) || !strings.Contains(out, "1 prompt + 60 generated tokens") {
		t.Fatalf("%v\n%s", err, out)
	}
}
