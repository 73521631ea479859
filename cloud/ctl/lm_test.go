package ctl

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm"
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
