package lmtrain

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
)

// smallRun is a quick job on real chat text: a tiny model on a slice of the
// edge corpus.
func smallRun(t *testing.T, steps int) Run {
	t.Helper()
	s, err := corpus.Edge(1)
	if err != nil {
		t.Fatal(err)
	}
	return Run{
		Model: Config{Vocab: ByteVocab, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64, Context: 64}.WithDefaults(),
		Train: TrainConfig{Seed: 5, Steps: steps, Batch: 4, SeqLen: 48, LR: 1e-2, Warmup: 3, WeightDecay: 0.1, Clip: 1, EvalEvery: steps / 2, EvalWindows: 16},
		Data:  NewDataset(s.Train[:400]),
		Val:   NewDataset(s.Test[:100]),
	}
}

func TestTrainingLowersValidationLoss(t *testing.T) {
	r := smallRun(t, 60)
	var bar bytes.Buffer
	r.Progress = &bar
	res, err := Train(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	first := Evaluate(NewModel(func() *Params { p := NewParams(r.Model); p.Init(5, 0.02); return p }()), r.Val, 16, 4, 48)
	if !(res.ValLoss < first-1) {
		t.Fatalf("validation loss %.3f after training, %.3f at init: did not learn", res.ValLoss, first)
	}
	if math.Abs(first-math.Log(ByteVocab)) > 0.3 {
		t.Errorf("initial loss %.3f, want about ln(%d) = %.3f", first, ByteVocab, math.Log(ByteVocab))
	}
	if len(res.History) != 2 || res.Steps != 60 || res.Tokens != 60*4*48 {
		t.Errorf("history %v, steps %d, tokens %d", res.History, res.Steps, res.Tokens)
	}
	if !strings.Contains(bar.String(), "tok/s") || !strings.Contains(bar.String(), "60/60") {
		t.Errorf("progress bar %q lacks tok/s or the final step", bar.String())
	}
}

func TestSameSeedSameWeights(t *testing.T) {
	a, err := Train(context.Background(), smallRun(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Train(context.Background(), smallRun(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Params.Flat, b.Params.Flat) {
		t.Fatal("two runs with the same seed gave different weights")
	}
	r := smallRun(t, 8)
	r.Train.Seed = 6
	c, _ := Train(context.Background(), r)
	if slices.Equal(a.Params.Flat, c.Params.Flat) {
		t.Fatal("a different seed gave the same weights")
	}
}

// TestResumeIsIdentical: N steps in one go equal N/2, checkpoint, resume, N/2.
func TestResumeIsIdentical(t *testing.T) {
	const n = 12
	whole, err := Train(context.Background(), smallRun(t, n))
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(t.TempDir(), "run.ckpt")
	r := smallRun(t, n)
	r.Checkpoint, r.StopAt = ck, n/2
	half, err := Train(context.Background(), r)
	if err != nil || half.Steps != n/2 {
		t.Fatalf("first half: steps %v, err %v", half.Steps, err)
	}
	r.StopAt = 0
	rest, err := Train(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if rest.ResumedAt != n/2 || rest.Steps != n {
		t.Fatalf("resumed at %d, ended at %d", rest.ResumedAt, rest.Steps)
	}
	if !slices.Equal(whole.Params.Flat, rest.Params.Flat) {
		t.Fatal("resumed run's weights differ from the uninterrupted run's")
	}
	// A checkpoint of another configuration is refused, not silently used.
	r.Train.LR = 5e-3
	if _, err := Train(context.Background(), r); !errors.Is(err, ErrMismatch) {
		t.Fatalf("resume with another lr: %v, want ErrMismatch", err)
	}
}

func TestCancelCheckpoints(t *testing.T) {
	r := smallRun(t, 10)
	r.Checkpoint = filepath.Join(t.TempDir(), "c.ckpt")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Train(ctx, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	ck, err := LoadCheckpoint(r.Checkpoint)
	if err != nil || ck.Step != 0 {
		t.Fatalf("checkpoint after cancel: %+v %v", ck, err)
	}
}

func TestConfigValidateNamesField(t *testing.T) {
	base := EdgePreset()
	cases := map[string]func(*Config, *TrainConfig){
		"heads":    func(c *Config, _ *TrainConfig) { c.Heads = 3 },
		"kv-heads": func(c *Config, _ *TrainConfig) { c.KVHeads = 3 },
		"seq-len":  func(_ *Config, t *TrainConfig) { t.SeqLen = 1000 },
		"lr":       func(_ *Config, t *TrainConfig) { t.LR = -1 },
		"warmup":   func(_ *Config, t *TrainConfig) { t.Warmup = t.Steps + 1 },
	}
	for field, mut := range cases {
		c, tc := base.Model, base.Train
		mut(&c, &tc)
		err := c.Validate()
		if err == nil {
			err = tc.Validate(c)
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	if err := base.Model.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := base.Train.Validate(base.Model); err != nil {
		t.Fatal(err)
	}
}

func TestScheduleWarmupAndCosine(t *testing.T) {
	tc := TrainConfig{Steps: 100, Warmup: 10, LR: 1, MinLR: 0.1}
	if got := LR(tc, 0); math.Abs(float64(got)-0.1) > 1e-6 {
		t.Errorf("step 0: %g", got)
	}
	if got := LR(tc, 9); got != 1 {
		t.Errorf("end of warmup: %g", got)
	}
	if got := LR(tc, 99); math.Abs(float64(got)-0.1) > 1e-6 {
		t.Errorf("last step: %g", got)
	}
	for s := 10; s < 99; s++ {
		if LR(tc, s+1) > LR(tc, s) {
			t.Fatalf("lr rises after warmup at %d", s)
		}
	}
}

// TestEngineAgreesWithTrainer is issue 9's agreement test: trained weights
// written to GGUF give the same logits in the engine as in the trainer.
func TestEngineAgreesWithTrainer(t *testing.T) {
	res, err := Train(context.Background(), smallRun(t, 20))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	var buf bytes.Buffer
	if err := ExportGGUF(&buf, res.Params, Provenance{Name: "test", Train: smallRun(t, 20).Train, Sources: corpus.EdgeSources, Result: res}, lm.F32); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := lm.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := eng.Tokenizer()
	prompt := append([]int32{int32(tok.BOS())}, tok.Encode("<|user|>\nwhat's the weather in Paris, 天气?\n<|assistant|>\n")...)
	mine := NewModel(res.Params).Logits(prompt)
	for _, n := range []int{1, 7, len(prompt)} {
		got := eng.Logits(prompt[:n])
		want := mine[n-1]
		var num, den float64
		for i := range want {
			d := float64(got[i] - want[i])
			num += d * d
			den += float64(want[i]) * float64(want[i])
		}
		if rel := math.Sqrt(num / den); rel > 1e-4 {
			t.Errorf("prefix %d: engine vs trainer logits relative error %.2e", n, rel)
		}
	}
	// The metadata carries the training config and sources.
	if !bytes.Contains(buf.Bytes(), []byte("phaseless.train.config")) || !bytes.Contains(buf.Bytes(), []byte("CLINC150")) {
		t.Error("GGUF lacks training config or data sources")
	}
}
