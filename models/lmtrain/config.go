package lmtrain

import (
	"errors"
	"fmt"
)

// Config is the shape of a llama-architecture model: the same
// hyper-parameters the engine reads from GGUF metadata.
type Config struct {
	Vocab     int     `json:"vocab"`      // token ids are 0..Vocab-1
	Dim       int     `json:"dim"`        // embedding width
	Layers    int     `json:"layers"`     // transformer blocks
	Heads     int     `json:"heads"`      // query heads
	KVHeads   int     `json:"kv_heads"`   // key/value heads (grouped-query attention); divides Heads
	FFN       int     `json:"ffn"`        // SwiGLU hidden width
	Context   int     `json:"context"`    // longest sequence the model is trained and run at
	NormEps   float32 `json:"norm_eps"`   // RMSNorm epsilon
	RopeTheta float32 `json:"rope_theta"` // RoPE frequency base
}

// FieldError names the configuration field that is wrong.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %v", e.Field, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// WithDefaults fills zero fields with the llama defaults.
func (c Config) WithDefaults() Config {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	return c
}

// HeadDim is the width of one attention head.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Validate reports the first field that cannot make a model.
func (c Config) Validate() error {
	switch {
	case c.Vocab < 2:
		return fieldErr("vocab", "%d is below 2", c.Vocab)
	case c.Dim < 2:
		return fieldErr("dim", "%d is below 2", c.Dim)
	case c.Layers < 1:
		return fieldErr("layers", "%d is below 1", c.Layers)
	case c.Heads < 1 || c.Dim%c.Heads != 0:
		return fieldErr("heads", "%d does not divide dim %d", c.Heads, c.Dim)
	case c.HeadDim()%2 != 0:
		return fieldErr("heads", "head width %d is odd; rotary embeddings rotate pairs", c.HeadDim())
	case c.KVHeads < 1 || c.Heads%c.KVHeads != 0:
		return fieldErr("kv-heads", "%d does not divide heads %d", c.KVHeads, c.Heads)
	case c.FFN < 1:
		return fieldErr("ffn", "%d is below 1", c.FFN)
	case c.Context < 2:
		return fieldErr("context", "%d is below 2", c.Context)
	case !(c.NormEps > 0):
		return fieldErr("norm-eps", "%g is not positive", c.NormEps)
	case !(c.RopeTheta > 1):
		return fieldErr("rope-theta", "%g is not above 1", c.RopeTheta)
	}
	return nil
}

// TrainConfig is how a model is trained.
type TrainConfig struct {
	Seed            uint64  `json:"seed"`             // weights and batch order; same seed, same data → same weights
	Steps           int     `json:"steps"`            // optimizer steps in the whole run
	Batch           int     `json:"batch"`            // sequences per step
	SeqLen          int     `json:"seq_len"`          // tokens per sequence (≤ model context)
	LR              float32 `json:"lr"`               // peak learning rate
	MinLR           float32 `json:"min_lr"`           // learning rate at the end of the cosine
	Warmup          int     `json:"warmup"`           // linear warmup steps
	WeightDecay     float32 `json:"weight_decay"`     // AdamW decoupled decay, matrices only
	Beta1           float32 `json:"beta1"`            // AdamW
	Beta2           float32 `json:"beta2"`            // AdamW
	AdamEps         float32 `json:"adam_eps"`         // AdamW
	Clip            float32 `json:"clip"`             // global gradient-norm limit; 0 = off
	EvalEvery       int     `json:"eval_every"`       // steps between validation passes; 0 = only at the end
	EvalWindows     int     `json:"eval_windows"`     // validation windows per pass
	InitStd         float32 `json:"init_std"`         // normal init std of weight matrices
	CheckpointEvery int     `json:"checkpoint_every"` // steps between checkpoints; 0 = only at the end
}

// WithDefaults fills zero fields with values that trained the shipped models.
func (t TrainConfig) WithDefaults() TrainConfig {
	if t.Seed == 0 {
		t.Seed = 1
	}
	if t.Batch == 0 {
		t.Batch = 16
	}
	if t.LR == 0 {
		t.LR = 3e-3
	}
	if t.MinLR == 0 {
		t.MinLR = t.LR / 10
	}
	if t.Beta1 == 0 {
		t.Beta1 = 0.9
	}
	if t.Beta2 == 0 {
		t.Beta2 = 0.95
	}
	if t.AdamEps == 0 {
		t.AdamEps = 1e-8
	}
	if t.EvalWindows == 0 {
		t.EvalWindows = 64
	}
	if t.InitStd == 0 {
		t.InitStd = 0.02
	}
	return t
}

// Validate reports the first field that cannot train, checked against the
// model it trains.
func (t TrainConfig) Validate(m Config) error {
	switch {
	case t.Steps < 1:
		return fieldErr("steps", "%d is below 1", t.Steps)
	case t.Batch < 1:
		return fieldErr("batch", "%d is below 1", t.Batch)
	case t.SeqLen < 2 || t.SeqLen > m.Context:
		return fieldErr("seq-len", "%d is outside 2..context %d", t.SeqLen, m.Context)
	case !(t.LR > 0) || t.LR > 1:
		return fieldErr("lr", "%g is outside (0, 1]", t.LR)
	case t.MinLR < 0 || t.MinLR > t.LR:
		return fieldErr("min-lr", "%g is outside [0, lr]", t.MinLR)
	case t.Warmup < 0 || t.Warmup > t.Steps:
		return fieldErr("warmup", "%d is outside 0..steps", t.Warmup)
	case t.WeightDecay < 0 || t.WeightDecay >= 1:
		return fieldErr("weight-decay", "%g is outside [0, 1)", t.WeightDecay)
	case t.Beta1 < 0 || t.Beta1 >= 1:
		return fieldErr("beta1", "%g is outside [0, 1)", t.Beta1)
	case t.Beta2 < 0 || t.Beta2 >= 1:
		return fieldErr("beta2", "%g is outside [0, 1)", t.Beta2)
	case !(t.AdamEps > 0):
		return fieldErr("adam-eps", "%g is not positive", t.AdamEps)
	case t.Clip < 0:
		return fieldErr("clip", "%g is negative", t.Clip)
	case t.EvalEvery < 0:
		return fieldErr("eval-every", "%d is negative", t.EvalEvery)
	case t.EvalWindows < 1:
		return fieldErr("eval-windows", "%d is below 1", t.EvalWindows)
	case !(t.InitStd > 0):
		return fieldErr("init-std", "%g is not positive", t.InitStd)
	case t.CheckpointEvery < 0:
		return fieldErr("checkpoint-every", "%d is negative", t.CheckpointEvery)
	}
	return nil
}

// ErrMismatch is returned when a checkpoint does not belong to the run that
// tries to resume from it.
var ErrMismatch = errors.New("checkpoint does not match this run")
