package gguf

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func sampleFile(t testing.TB) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]float32, 64*3)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	kvs := []KV{
		{"general.architecture", "llama"},
		{"llama.block_count", uint32(2)},
		{"llama.rope.freq_base", float32(10000)},
		{"tokenizer.ggml.tokens", []string{"a", "b", "<0x00>"}},
		{"tokenizer.ggml.scores", []float32{0, -1, -2}},
		{"tokenizer.ggml.token_type", []int32{1, 1, 6}},
		{"tokenizer.ggml.add_bos_token", true},
		{"x.f64", 1.5},
		{"x.i64", int64(-3)},
	}
	tensors := []Tensor{
		{Name: "a", Dims: []uint64{64, 3}, Type: F32, Data: data},
		{Name: "b", Dims: []uint64{64, 3}, Type: F16, Data: data},
		{Name: "c", Dims: []uint64{64, 3}, Type: Q8_0, Data: data},
	}
	var buf bytes.Buffer
	if err := Write(&buf, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	raw := sampleFile(t)
	f, err := Read(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || len(f.KVs) != 9 || len(f.Tensors) != 3 {
		t.Fatalf("version %d, %d kvs, %d tensors", f.Version, len(f.KVs), len(f.Tensors))
	}
	if v, _ := f.Get("tokenizer.ggml.tokens"); !reflect.DeepEqual(v, []string{"a", "b", "<0x00>"}) {
		t.Fatalf("tokens = %#v", v)
	}
	if v, _ := f.Get("llama.block_count"); v != uint32(2) {
		t.Fatalf("block_count = %#v", v)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]float32, 64*3)
	for i := range want {
		want[i] = float32(rng.NormFloat64())
	}
	for _, tc := range []struct {
		name string
		tol  float64
	}{{"a", 0}, {"b", 1e-3}, {"c", 0.02}} {
		ti, ok := f.Tensor(tc.name)
		if !ok {
			t.Fatalf("tensor %s missing", tc.name)
		}
		if (f.DataOffset+int64(ti.Offset))%DefaultAlignment != 0 {
			t.Errorf("tensor %s not aligned", tc.name)
		}
		got, err := f.Float32s(ti)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > tc.tol*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s[%d] = %v, want %v (tol %v)", tc.name, i, got[i], want[i], tc.tol)
			}
		}
	}
}

func TestF16(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {6.1035156e-05, 0x0400}, {5.9604645e-08, 0x0001},
		{0.33325195, 0x3555}, {1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, // ties to even
	} {
		if got := F32ToF16(tc.f); got != tc.h {
			t.Errorf("F32ToF16(%v) = %#x, want %#x", tc.f, got, tc.h)
		}
		if tc.h != 0x7c00 || tc.f == float32(math.Inf(1)) {
			if back := F16ToF32(tc.h); tc.h != 0x3c00 && back != tc.f {
				t.Errorf("F16ToF32(%#x) = %v, want %v", tc.h, back, tc.f)
			}
		}
	}
	if h := F32ToF16(float32(math.NaN())); F16ToF32(h) == F16ToF32(h) {
		t.Errorf("NaN did not stay NaN: %#x", h)
	}
	// Every half value survives a round trip through float32.
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if f != f {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("round trip %#x -> %v -> %#x", h, f, back)
		}
	}
}

func TestRejects(t *testing.T) {
	raw := sampleFile(t)
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", func(b []byte) []byte { b[4] = 9; return b }},
		{"truncated header", func(b []byte) []byte { return b[:100] }},
		{"truncated data", func(b []byte) []byte { return b[:len(b)-1] }},
		{"huge tensor count", func(b []byte) []byte { b[15] = 0x7f; return b }},
		{"huge kv count", func(b []byte) []byte { b[23] = 0x7f; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mut(append([]byte(nil), raw...))
			_, err := Read(bytes.NewReader(b), int64(len(b)))
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
		})
	}
}

func TestQ8RowMustFitBlocks(t *testing.T) {
	err := Write(new(bytes.Buffer), nil, []Tensor{{Name: "x", Dims: []uint64{10}, Type: Q8_0, Data: make([]float32, 10)}})
	if err == nil {
		t.Fatal("q8_0 with 10 columns was accepted")
	}
}

// FuzzRead checks that no input makes the reader panic, hang, or allocate far
// beyond the input's size, and that whatever it accepts has readable tensors.
func FuzzRead(f *testing.F) {
	f.Add(sampleFile(f))
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for i := range file.Tensors {
			if _, err := file.Float32s(&file.Tensors[i]); err != nil {
				t.Fatalf("accepted file has unreadable tensor %q: %v", file.Tensors[i].Name, err)
			}
		}
	})
}
