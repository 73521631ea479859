package toolprior

import (
	"fmt"
	"io"
	"slices"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// The prior's place in a GGUF file. Readers that do not know it (llama.cpp,
// gguf-py) skip an unknown tensor and unknown keys.
const (
	KeyLabels   = "phaseless.tool_prior.labels"   // string array; proseLabel for Prose
	KeyBuckets  = "phaseless.tool_prior.buckets"  // uint32
	KeyWeight   = "phaseless.tool_prior.weight"   // float32
	KeyFeatures = "phaseless.tool_prior.features" // string: the feature recipe, FeatureRecipe
	TensorW     = "tool_prior.weight"             // dims [Buckets, len(Labels)]
	TensorBias  = "tool_prior.bias"               // dims [len(Labels)]
	// The call against prose (float32 each; absent reads 0).
	KeyCallWeight = "phaseless.tool_prior.call_weight"
	KeyCallBias   = "phaseless.tool_prior.call_bias"
	// The span head, when there is one (span.go).
	KeySpanWeight = "phaseless.tool_prior.span_weight" // float32
	TensorSpan    = "tool_prior.span"                  // dims [span buckets]
)

// FeatureRecipe names features' hashing; a file with another recipe is
// refused rather than read with buckets that mean something else.
const FeatureRecipe = "v1 fnv64a words(digits as 0) pairs char3-4"

// proseLabel stands for Prose in a file: GGUF strings may be empty, but a
// word reads better in a dump.
const proseLabel = "<prose>"

// FromGGUF reads the prior f carries, or nil when it carries none.
func FromGGUF(f *gguf.File) (*Prior, error) {
	v, ok := f.Get(KeyLabels)
	if !ok {
		return nil, nil
	}
	labels, ok := v.([]string)
	if !ok {
		return nil, fmt.Errorf("toolprior: %s is %T, want a string array", KeyLabels, v)
	}
	p := &Prior{Labels: slices.Clone(labels)}
	for i, l := range p.Labels {
		if l == proseLabel {
			p.Labels[i] = Prose
		}
	}
	if rec, _ := f.Get(KeyFeatures); rec != FeatureRecipe {
		return nil, fmt.Errorf("toolprior: feature recipe %q, this build reads %q", rec, FeatureRecipe)
	}
	b, ok := f.Get(KeyBuckets)
	if n, isU32 := b.(uint32); !ok || !isU32 || n < 1 || n > MaxBuckets {
		return nil, fmt.Errorf("toolprior: %s is %v, want a uint32 in 1..%d", KeyBuckets, b, MaxBuckets)
	} else {
		p.Buckets = int(n)
	}
	w, ok := f.Get(KeyWeight)
	if x, isF32 := w.(float32); !ok || !isF32 {
		return nil, fmt.Errorf("toolprior: %s is %v, want a float32", KeyWeight, w)
	} else {
		p.Weight = float64(x)
	}
	// The label count is checked before the tensors are read, so their
	// expected sizes cannot overflow.
	if len(p.Labels) < 2 || len(p.Labels) > MaxLabels {
		return nil, fmt.Errorf("toolprior: %d labels, want 2 to %d", len(p.Labels), MaxLabels)
	}
	var err error
	if p.W, err = tensor(f, TensorW, uint64(p.Buckets), uint64(len(p.Labels))); err != nil {
		return nil, err
	}
	if p.Bias, err = tensor(f, TensorBias, uint64(len(p.Labels))); err != nil {
		return nil, err
	}
	for key, dst := range map[string]*float64{KeyCallWeight: &p.CallWeight, KeyCallBias: &p.CallBias} {
		if v, ok := f.Get(key); ok {
			x, isF32 := v.(float32)
			if !isF32 {
				return nil, fmt.Errorf("toolprior: %s is %v, want a float32", key, v)
			}
			*dst = float64(x)
		}
	}
	if ti, ok := f.Tensor(TensorSpan); ok {
		if len(ti.Dims) != 1 || ti.Dims[0] < 1 || ti.Dims[0] > MaxBuckets {
			return nil, fmt.Errorf("toolprior: tensor %s has dims %v, want one of 1..%d", TensorSpan, ti.Dims, MaxBuckets)
		}
		if p.SpanW, err = tensor(f, TensorSpan, ti.Dims[0]); err != nil {
			return nil, err
		}
		sw, ok := f.Get(KeySpanWeight)
		x, isF32 := sw.(float32)
		if !ok || !isF32 {
			return nil, fmt.Errorf("toolprior: %s is %v, want a float32", KeySpanWeight, sw)
		}
		p.SpanWeight = float64(x)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func tensor(f *gguf.File, name string, dims ...uint64) ([]float32, error) {
	ti, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("toolprior: tensor %s missing", name)
	}
	if !slices.Equal(ti.Dims, dims) {
		return nil, fmt.Errorf("toolprior: tensor %s has dims %v, want %v", name, ti.Dims, dims)
	}
	v, err := f.Float32s(ti)
	if err != nil {
		return nil, fmt.Errorf("toolprior: tensor %s: %w", name, err)
	}
	return v, nil
}

// Write writes src with p in it, in place of any prior src carries: every
// other key and tensor as they are, bit for bit.
func Write(w io.Writer, src *gguf.File, p *Prior) error {
	if err := p.Validate(); err != nil {
		return err
	}
	ours := func(name string) bool {
		return slices.Contains([]string{KeyLabels, KeyBuckets, KeyWeight, KeyFeatures, TensorW, TensorBias, KeySpanWeight, TensorSpan, KeyCallWeight, KeyCallBias}, name)
	}
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		if !ours(kv.Key) {
			kvs = append(kvs, kv)
		}
	}
	labels := slices.Clone(p.Labels)
	for i, l := range labels {
		if l == Prose {
			labels[i] = proseLabel
		}
	}
	kvs = append(kvs,
		gguf.KV{Key: KeyLabels, Value: labels},
		gguf.KV{Key: KeyBuckets, Value: uint32(p.Buckets)},
		gguf.KV{Key: KeyWeight, Value: float32(p.Weight)},
		gguf.KV{Key: KeyFeatures, Value: FeatureRecipe},
		gguf.KV{Key: KeyCallWeight, Value: float32(p.CallWeight)},
		gguf.KV{Key: KeyCallBias, Value: float32(p.CallBias)})
	var tensors []gguf.Tensor
	for i := range src.Tensors {
		ti := &src.Tensors[i]
		if ours(ti.Name) {
			continue
		}
		raw, err := src.TensorData(ti)
		if err != nil {
			return fmt.Errorf("toolprior: %w", err)
		}
		tensors = append(tensors, gguf.Tensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Raw: raw})
	}
	tensors = append(tensors,
		gguf.Tensor{Name: TensorW, Dims: []uint64{uint64(p.Buckets), uint64(len(p.Labels))}, Type: weightType(p.Buckets), Data: p.W},
		gguf.Tensor{Name: TensorBias, Dims: []uint64{uint64(len(p.Labels))}, Type: gguf.F32, Data: p.Bias})
	if len(p.SpanW) > 0 {
		kvs = append(kvs, gguf.KV{Key: KeySpanWeight, Value: float32(p.SpanWeight)})
		tensors = append(tensors, gguf.Tensor{Name: TensorSpan, Dims: []uint64{uint64(len(p.SpanW))}, Type: gguf.F16, Data: p.SpanW})
	}
	return gguf.Write(w, kvs, tensors)
}

// weightType is how the prior's weights are stored. The prior is the part of
// the edge model a fleet retrains most often, and an update fetches the
// whole tensor (its trained values share no bytes with the old ones), so its
// size is that update's size: Q8_0 (34 bytes per 32 weights) is 53% of F16
// and 27% of F32. Each label's row is one run of Buckets weights, so Q8_0's
// 32-weight blocks never straddle two labels; a bucket count that is no
// multiple of 32 stays F16. A rounding of at most 1/254 of a block's largest
// weight moves no decision (TestWriteRoundTrip, and the tool-accuracy tests
// run on the shipped model, written this way).
func weightType(buckets int) gguf.DType {
	if buckets%gguf.Q8BlockSize == 0 {
		return gguf.Q8_0
	}
	return gguf.F16
}
