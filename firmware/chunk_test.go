package firmware

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// shared is the bytes of b's chunks that also are chunks of a.
func shared(a, b []Chunk) int64 {
	have := map[string]bool{}
	for _, c := range a {
		have[c.SHA256] = true
	}
	var n int64
	for _, c := range b {
		if have[c.SHA256] {
			n += c.Size
		}
	}
	return n
}

func chunksOf(t *testing.T, name string, data []byte) (string, []Chunk) {
	t.Helper()
	kind, cs, err := ChunkFile(name, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, c := range cs {
		sum += c.Size
	}
	if sum != int64(len(data)) {
		t.Fatalf("%s: chunks cover %d of %d bytes", name, sum, len(data))
	}
	return kind, cs
}

// An insertion moves only the boundaries next to it: content-defined
// chunking keeps every chunk away from the edit, wherever it now lies.
func TestCDCInsertion(t *testing.T) {
	old := randomBytes(1, 4<<20)
	edited := append(append(append([]byte{}, old[:2<<20]...), []byte("one new line\n")...), old[2<<20:]...)
	kind, a := chunksOf(t, "agent", old)
	_, b := chunksOf(t, "agent", edited)
	if kind != ChunkingCDC {
		t.Fatalf("chunking %q", kind)
	}
	for i, c := range a[:len(a)-1] {
		if c.Size < cdcMin || c.Size > cdcMax {
			t.Fatalf("chunk %d has %d bytes, outside [%d,%d]", i, c.Size, cdcMin, cdcMax)
		}
	}
	avg := len(old) / len(a)
	if avg < cdcAvg/2 || avg > cdcAvg*2 {
		t.Errorf("average chunk %d bytes, want about %d", avg, cdcAvg)
	}
	fresh := int64(len(edited)) - shared(a, b)
	if fresh > 2*cdcMax {
		t.Errorf("an insertion of 13 bytes made %d bytes of new chunks", fresh)
	}
}

// A GGUF file is cut at every tensor's first byte: changing one tensor
// changes only its chunks and the header's.
func TestGGUFChunksFollowTensors(t *testing.T) {
	w := func(second []float32) []byte {
		var b bytes.Buffer
		big := make([]float32, 600_000) // 2.4 MB: three chunks
		for i := range big {
			big[i] = float32(i % 977)
		}
		err := gguf.Write(&b, []gguf.KV{{Key: "general.architecture", Value: "llama"}}, []gguf.Tensor{
			{Name: "big", Dims: []uint64{uint64(len(big))}, Type: gguf.F32, Data: big},
			{Name: "small", Dims: []uint64{uint64(len(second))}, Type: gguf.F32, Data: second},
			{Name: "tail", Dims: []uint64{1000}, Type: gguf.F32, Data: make([]float32, 1000)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	old, edited := w([]float32{1, 2, 3}), w([]float32{1, 2, 4, 5, 6, 7})
	kind, a := chunksOf(t, "m.gguf", old)
	_, b := chunksOf(t, "m.gguf", edited)
	if kind != ChunkingGGUF {
		t.Fatalf("chunking %q", kind)
	}
	f, err := gguf.ReadBytes(old)
	if err != nil {
		t.Fatal(err)
	}
	starts := map[int64]bool{}
	var off int64
	for _, c := range a {
		starts[off] = true
		if c.Size > ggufSplit {
			t.Fatalf("chunk of %d bytes", c.Size)
		}
		off += c.Size
	}
	for _, ti := range f.Tensors {
		if !starts[f.DataOffset+int64(ti.Offset)] {
			t.Errorf("no chunk starts at tensor %s", ti.Name)
		}
	}
	// The big tensor and the tail (moved by the small one's growth) are
	// shared; the header and the small tensor are new.
	fresh := int64(len(edited)) - shared(a, b)
	if fresh > f.DataOffset+64 {
		t.Errorf("%d bytes of new chunks; want the header (%d) and the small tensor only", fresh, f.DataOffset)
	}
}

// The shipped edge model is cut by its tensors.
func TestShippedModelChunks(t *testing.T) {
	data, err := os.ReadFile("../models/edgemodel/edge.gguf")
	if err != nil {
		t.Fatal(err)
	}
	kind, cs := chunksOf(t, "edge.gguf", data)
	if kind != ChunkingGGUF || len(cs) < 10 {
		t.Fatalf("%s, %d chunks", kind, len(cs))
	}
}

// A signed chunk list that does not describe the payload makes the bundle
// corrupt: Extract refuses it though the whole file's hash matches.
func TestExtractChecksChunks(t *testing.T) {
	pub, priv := newKey(t)
	data := randomBytes(2, 300<<10)
	var b bytes.Buffer
	if err := WriteKind(&b, priv, KindPredictor, "1.0", "rpi4", map[string][]byte{"r.onnx": data}, []string{"r.onnx"}); err != nil {
		t.Fatal(err)
	}
	m, err := Inspect(bytes.NewReader(b.Bytes()), pub)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Chunked() || len(m.Files[0].Chunks) < 2 {
		t.Fatalf("manifest not chunked: %+v", m.Files[0].Chunks)
	}
	if _, err := Check(bytes.NewReader(b.Bytes()), pub); err != nil {
		t.Fatalf("good bundle: %v", err)
	}
	other := sha256.Sum256([]byte("other"))
	m.Files[0].Chunks[1].SHA256 = hex.EncodeToString(other[:])
	raw, _ := json.Marshal(m)
	bad := signedBundle(priv, raw, data)
	if _, err := Check(bytes.NewReader(bad), pub); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lying chunk list: %v, want ErrCorrupt", err)
	}
}

// The shipped router is cut at its four initializers, so its first
// layer (57 KB of its 58 KB) is one chunk that a new output layer
// leaves alone; the fuzz seeds' small models parse as the comments say.
func TestONNXChunking(t *testing.T) {
	shipped, err := os.ReadFile("../models/predictor/predictor.onnx")
	if err != nil {
		t.Fatal(err)
	}
	chunking, chunks, err := ChunkFile("predictor.onnx", bytes.NewReader(shipped), int64(len(shipped)))
	if err != nil || chunking != ChunkingONNX {
		t.Fatalf("chunking %q, %v", chunking, err)
	}
	var biggest int64
	for _, c := range chunks {
		biggest = max(biggest, c.Size)
	}
	if biggest < 50<<10 || len(chunks) < 5 {
		t.Errorf("%d chunks, the biggest %d bytes: the first layer is not one chunk", len(chunks), biggest)
	}
	for _, tc := range []struct {
		data string
		cuts int
	}{
		{":\x07*\x03B\x01w*\x00", 4},
		{":\x05*\x09B\x01w", 0},
		{":\x02*\x00:\x00", 0}, // two graphs
		{"J\x02*\x00", 0},      // field 9, not a graph
	} {
		cuts, err := onnxCuts([]byte(tc.data))
		if len(cuts) != tc.cuts || (err == nil) != (tc.cuts > 0) {
			t.Errorf("onnxCuts(%q) = %v, %v; want %d cuts", tc.data, cuts, err, tc.cuts)
		}
	}
	// Not ONNX: cut by content, as before.
	if chunking, _, err := ChunkFile("x.onnx", bytes.NewReader([]byte("not onnx")), 8); err != nil || chunking != ChunkingCDC {
		t.Errorf("a .onnx file that is no model: %q, %v", chunking, err)
	}
}
