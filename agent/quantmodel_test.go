package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/phaseless/phaseless/models/lm"
)

// TestQ4KMModelFromFlag: the agent serves a Q4_K_M model given with
// --model (K-quant tensors run by the integer kernels, memory-mapped).
func TestQ4KMModelFromFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q4km.gguf")
	if err := writeTestQ4KM(path); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Model = path
	_, url := startAgent(t, cfg)
	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"turn on the air conditioning"}],"max_tokens":6,"temperature":0}`)
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" {
		t.Fatalf("status %d route %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
	}
	if c := readJSON[chatResp](t, resp.Body); len(c.Choices) != 1 || c.Usage.CompletionTokens < 1 {
		t.Fatalf("completion %+v", c)
	}
}

// writeTestQ4KM writes a small random-weight byte-vocabulary model in the
// Q4_K_M mix, wide enough (256) that its matrices are Q4_K and Q6_K.
func writeTestQ4KM(path string) error {
	cfg := lm.Config{Vocab: 300, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, ContextLen: 512}
	r, err := lm.ParseRecipe("q4_k_m")
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := lm.WriteRandom(f, cfg, 1, nil, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
