package lm

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/gguf"
)

// The sampling a model file recommends, under the keys llama.cpp reads
// (llama-arch.cpp LLM_KV_GENERAL_SAMPLING_*; its common_params fill a
// sampler setting the user did not give from them): a request that omits
// a field runs with the file's value (llm.Request.SamplingFor).
const (
	KeySamplingTemp = "general.sampling.temp"  // float32, 0 = greedy
	KeySamplingTopK = "general.sampling.top_k" // int32, 0 = off
	KeySamplingTopP = "general.sampling.top_p" // float32, 1 = off
)

// readSampling reads the sampling keys of meta. A key with a value the
// APIs would refuse in a request (a temperature outside 0..2, a top_p
// outside (0, 1], a negative top_k, not a number) fails the load, naming
// the key, rather than running every request with it.
func readSampling(meta map[string]any) (llm.Sampling, error) {
	var s llm.Sampling
	num := func(key string) (float64, bool, error) {
		v, ok := meta[key]
		if !ok {
			return 0, false, nil
		}
		var x float64
		switch n := v.(type) {
		case float32:
			// The shortest decimal that reads back as n: 0.9, not
			// 0.8999999761581421, is what /v1/models shows.
			x, _ = strconv.ParseFloat(strconv.FormatFloat(float64(n), 'g', -1, 32), 64)
		case float64:
			x = n
		case int32:
			x = float64(n)
		case uint32:
			x = float64(n)
		case int64:
			x = float64(n)
		case uint64:
			x = float64(n)
		default:
			return 0, false, fmt.Errorf("%s is %T, want a number", key, v)
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, false, fmt.Errorf("%s is %v, want a finite number", key, x)
		}
		return x, true, nil
	}
	t, ok, err := num(KeySamplingTemp)
	if err != nil {
		return s, err
	}
	if ok {
		if t < 0 || t > 2 {
			return s, fmt.Errorf("%s is %g, want 0 to 2", KeySamplingTemp, t)
		}
		s.Temperature = &t
	}
	p, ok, err := num(KeySamplingTopP)
	if err != nil {
		return s, err
	}
	if ok {
		if p <= 0 || p > 1 {
			return s, fmt.Errorf("%s is %g, want (0, 1]", KeySamplingTopP, p)
		}
		s.TopP = &p
	}
	k, ok, err := num(KeySamplingTopK)
	if err != nil {
		return s, err
	}
	if ok {
		if k < 0 || k != math.Trunc(k) || k > math.MaxInt32 {
			return s, fmt.Errorf("%s is %g, want a whole number ≥ 0", KeySamplingTopK, k)
		}
		n := int(k)
		s.TopK = &n
	}
	return s, nil
}

// SamplingMeta is s as the GGUF metadata WriteGGUF takes (the types
// llama.cpp's gguf writer gives these keys).
func SamplingMeta(s llm.Sampling) map[string]any {
	meta := map[string]any{}
	if s.Temperature != nil {
		meta[KeySamplingTemp] = float32(*s.Temperature)
	}
	if s.TopP != nil {
		meta[KeySamplingTopP] = float32(*s.TopP)
	}
	if s.TopK != nil {
		meta[KeySamplingTopK] = int32(*s.TopK)
	}
	return meta
}

// WriteSampling writes src again with s as its declared sampling, in place
// of any it had, every other key and tensor as they were: how the shipped
// models were given theirs without retraining (`phaselessctl lm sampling`).
func WriteSampling(w io.Writer, src *gguf.File, s llm.Sampling) error {
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		switch kv.Key {
		case KeySamplingTemp, KeySamplingTopK, KeySamplingTopP:
			continue
		}
		kvs = append(kvs, kv)
	}
	meta := SamplingMeta(s)
	for _, k := range sortedKeys(meta) {
		kvs = append(kvs, gguf.KV{Key: k, Value: meta[k]})
	}
	if _, err := readSampling(meta); err != nil {
		return fmt.Errorf("write sampling: %w", err)
	}
	tensors := make([]gguf.Tensor, 0, len(src.Tensors))
	for i := range src.Tensors {
		ti := &src.Tensors[i]
		raw, err := src.TensorData(ti)
		if err != nil {
			return fmt.Errorf("write sampling: %w", err)
		}
		tensors = append(tensors, gguf.Tensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Raw: raw})
	}
	return gguf.Write(w, kvs, tensors)
}

// Sampling is the sampling the model's file declares (nil fields where it
// declares none).
func (m *Model) Sampling() llm.Sampling { return m.sampling }
