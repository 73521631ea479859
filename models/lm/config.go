package lm

import (
	"errors"
	"fmt"
)

// Config holds a model's hyper-parameters.
type Config struct {
	Arch       string  // ArchLlama (also ""), ArchQwen2 or ArchQwen3
	Vocab      int     // tokens in the vocabulary
	Dim        int     // embedding width (d_model)
	Layers     int     // transformer blocks
	Heads      int     // query heads
	KVHeads    int     // key/value heads (grouped-query attention); divides Heads
	FFN        int     // hidden width of the SwiGLU MLP
	ContextLen int     // longest sequence (prompt + output) the model runs
	RopeTheta  float64 // RoPE base; 0 means 10000
	NormEps    float64 // RMSNorm epsilon; 0 means 1e-5
	// HeadSize is the width of one attention head when it is not Dim/Heads
	// (Qwen3 models: {arch}.attention.key_length); 0 means Dim/Heads.
	HeadSize int
}

// HeadDim is HeadSize, or Dim/Heads when that is 0.
func (c Config) HeadDim() int {
	if c.HeadSize > 0 {
		return c.HeadSize
	}
	return c.Dim / c.Heads
}

// WithDefaults fills RopeTheta and NormEps when zero.
func (c Config) WithDefaults() Config {
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	return c
}

// Validate names the first field that cannot describe a runnable model.
func (c Config) Validate() error {
	pos := func(name string, v int) error {
		if v <= 0 {
			return fmt.Errorf("model config: %s must be positive, got %d", name, v)
		}
		return nil
	}
	if err := errors.Join(pos("Vocab", c.Vocab), pos("Dim", c.Dim), pos("Layers", c.Layers),
		pos("Heads", c.Heads), pos("KVHeads", c.KVHeads), pos("FFN", c.FFN), pos("ContextLen", c.ContextLen)); err != nil {
		return err
	}
	switch c.arch() {
	case ArchLlama, ArchQwen2, ArchQwen3:
	default:
		return fmt.Errorf("model config: %w", unsupportedArch(c.Arch))
	}
	switch {
	case c.HeadSize < 0:
		return fmt.Errorf("model config: HeadSize must not be negative, got %d", c.HeadSize)
	case c.HeadSize == 0 && c.Dim%c.Heads != 0:
		return fmt.Errorf("model config: Dim %d is not a multiple of Heads %d", c.Dim, c.Heads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model config: head dimension %d (Dim/Heads) must be even for RoPE", c.HeadDim())
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: Heads %d is not a multiple of KVHeads %d", c.Heads, c.KVHeads)
	case c.RopeTheta < 0:
		return fmt.Errorf("model config: RopeTheta must not be negative, got %v", c.RopeTheta)
	case c.NormEps < 0:
		return fmt.Errorf("model config: NormEps must not be negative, got %v", c.NormEps)
	case c.Vocab > 1<<31-1:
		return fmt.Errorf("model config: Vocab %d does not fit an int32 token id", c.Vocab)
	}
	// Guard against absurd shapes from a hostile file before allocating.
	const maxParams = 1 << 36
	qDim := int64(c.Heads) * int64(c.HeadDim())
	params := int64(c.Vocab)*int64(c.Dim)*2 + int64(c.Layers)*(int64(c.Dim)*qDim*4+int64(c.Dim)*int64(c.FFN)*3)
	if params > maxParams || params < 0 {
		return fmt.Errorf("model config: %d parameters is beyond what this engine runs", params)
	}
	return nil
}
