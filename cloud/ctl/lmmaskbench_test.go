package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLMMaskBench runs `lm maskbench` as an operator would, on the
// committed MaskBench sample at the Llama 3 vocabulary: the table, the
// table by source and the refusals come out, and the flags are checked.
func TestLMMaskBench(t *testing.T) {
	tok := filepath.Join("..", "..", "models", "lm", "tokenizer", "testdata", "hf", "node_modules", "@lenml", "tokenizer-llama3", "models")
	if _, err := os.Stat(filepath.Join(tok, "tokenizer.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Llama 3 vocabulary missing under CI (npm ci in models/lm/tokenizer/testdata/hf): %v", err)
		}
		t.Skipf("Llama 3 vocabulary not installed: %v", err)
	}
	sample := filepath.Join("..", "..", "models", "lm", "grammar", "maskbench", "testdata", "sample")
	limit := "6"
	if raceEnabled {
		limit = "2" // the masks at 128k tokens are slow under the race detector
	}
	out, err := runCtl(t, "lm", "maskbench", "--tokenizer", filepath.Join(tok, "tokenizer.json"),
		"--tokenizer-config", filepath.Join(tok, "tokenizer_config.json"), "--limit", limit, "--seed", "2", "--refusals", "3", sample)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"| schemas | " + limit + " |", "| passing (compile", "mask per token (thread CPU): average", "| source | files | compiled | passing |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCtl(t, "lm", "maskbench", sample); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Errorf("without --tokenizer: %v", err)
	}
	if _, err := runCtl(t, "lm", "maskbench", "--tokenizer", filepath.Join(tok, "tokenizer.json"), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.json") {
		t.Errorf("an empty directory: %v", err)
	}
}
