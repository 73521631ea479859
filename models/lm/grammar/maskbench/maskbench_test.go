package maskbench

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// sample is the committed sample of MaskBench: 100 files drawn (seed 29)
// from its Kubernetes and JSON Schema Store schemas under 4 KB, whose
// schemas are Apache-2.0 (testdata/README.md).
const sample = "testdata/sample"

func byteTokenizer(t *testing.T) tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.ByteSpec().Build()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// llama3 is the Llama 3 tokenizer when the tokenizer package's test
// vocabularies are installed (npm ci in models/lm/tokenizer/testdata/hf).
func llama3(t *testing.T) tokenizer.Tokenizer {
	t.Helper()
	dir := filepath.Join("..", "..", "tokenizer", "testdata", "hf", "node_modules", "@lenml", "tokenizer-llama3", "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Skipf("Llama 3 vocabulary not installed (npm ci in models/lm/tokenizer/testdata/hf): %v", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := tokenizer.ReadHF(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// checkSound fails on a panic or an invalid instance accepted: whatever
// the grammar refuses to compile, what it compiles must not let an invalid
// document through.
func checkSound(t *testing.T, r *Report, limit int) {
	t.Helper()
	for _, f := range r.Failures {
		if strings.Contains(f, "panic") || strings.Contains(f, "invalid instance accepted") {
			t.Errorf("%s", f)
		}
	}
	if r.Files != cmp.Or(limit, 100) || r.Compiled == 0 || r.Tokens == 0 || len(r.Mask) != r.Tokens {
		t.Errorf("report: %d files, %d compiled, %d tokens, %d timings", r.Files, r.Compiled, r.Tokens, len(r.Mask))
	}
	var sum Tally
	for _, s := range r.Sources {
		sum.Files, sum.Compiled, sum.Passing = sum.Files+s.Files, sum.Compiled+s.Compiled, sum.Passing+s.Passing
	}
	if sum != (Tally{r.Files, r.Compiled, r.Passing}) || r.Sources["Kubernetes"] == nil {
		t.Errorf("sources add up to %+v of %d files, %d compiled, %d passing: %v", sum, r.Files, r.Compiled, r.Passing, r.Sources)
	}
}

// TestSampleByteVocab runs the sample over the byte vocabulary twice, with
// the Masker and with the trie walk it replaced: the verdicts must agree
// token for token (the counts, and every failure, are the same).
func TestSampleByteVocab(t *testing.T) {
	tok := byteTokenizer(t)
	limit := 0
	if raceEnabled {
		limit = 15
	}
	fast, err := Run(context.Background(), Config{Dir: sample, Tokenizer: tok, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	checkSound(t, fast, limit)
	ref, err := Run(context.Background(), Config{Dir: sample, Tokenizer: tok, Limit: limit, Reference: true})
	if err != nil {
		t.Fatal(err)
	}
	if fast.Passing != ref.Passing || fast.Tokens != ref.Tokens || fast.ValidAccepted != ref.ValidAccepted ||
		fast.InvalidRejected != ref.InvalidRejected || strings.Join(fast.Failures, "\n") != strings.Join(ref.Failures, "\n") {
		t.Errorf("Masker and trie walk disagree: passing %d/%d, tokens %d/%d, failures\n%v\n%v",
			fast.Passing, ref.Passing, fast.Tokens, ref.Tokens, fast.Failures, ref.Failures)
	}
}

// TestSampleLlama3 runs the sample as the published table is run, at the
// Llama 3 vocabulary.
func TestSampleLlama3(t *testing.T) {
	if raceEnabled {
		t.Skip("slow under the race detector; make test runs it without")
	}
	r, err := Run(context.Background(), Config{Dir: sample, Tokenizer: llama3(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkSound(t, r, 0)
	var b strings.Builder
	r.Table(&b)
	t.Logf("\n%s", b.String())
}

// TestLimitDraws: --limit runs that many files, the same ones for a seed.
func TestLimitDraws(t *testing.T) {
	tok := byteTokenizer(t)
	var names [2]string
	for i := range names {
		var progress strings.Builder
		r, err := Run(context.Background(), Config{Dir: sample, Tokenizer: tok, Limit: 7, Seed: 3, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		if r.Files != 7 || strings.Count(progress.String(), "\n") != 7 {
			t.Fatalf("limit 7 ran %d files:\n%s", r.Files, progress.String())
		}
		for line := range strings.Lines(progress.String()) {
			names[i] += strings.Fields(line)[0] + "\n" // the file, not its timing
		}
	}
	if names[0] != names[1] {
		t.Errorf("one seed drew different files:\n%s\n%s", names[0], names[1])
	}
}

// TestFileTimeout: a file that runs out of time is counted as timed out,
// not passing.
func TestFileTimeout(t *testing.T) {
	r, err := Run(context.Background(), Config{Dir: sample, Tokenizer: byteTokenizer(t), Limit: 5, Seed: 1, FileTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeouts == 0 || r.Passing > r.Compiled-r.Timeouts {
		t.Errorf("%d compiled, %d timed out, %d passing", r.Compiled, r.Timeouts, r.Passing)
	}
}
