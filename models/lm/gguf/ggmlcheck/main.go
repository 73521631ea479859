// Command ggmlcheck compares this repository's GGUF tensor codecs with ggml's,
// bit for bit, using the output of ggml/check.c, a small C program linked
// against a ggml built outside the repository (docs/engine.md has the
// commands):
//
//	ggmlcheck dump model.gguf ggml.bin  every tensor of a file we wrote, as
//	                                    ggml's gguf reader and to_float decode it
//	ggmlcheck ref ggml-ref.bin          blocks ggml's reference quantizers made,
//	                                    decoded by us; our quantizer on the same
//	                                    input, bytes and error compared
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"os"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func readFile(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func main() {
	if len(os.Args) < 3 || (os.Args[1] == "dump" && len(os.Args) < 4) {
		log.Fatal("usage: ggmlcheck dump model.gguf ggml.bin | ggmlcheck ref ggml-ref.bin")
	}
	switch os.Args[1] {
	case "dump": // gocheck dump model.gguf ggml.bin
		raw, ref := readFile(os.Args[2]), readFile(os.Args[3])
		want := f32s(ref)
		f, err := gguf.Read(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			log.Fatal(err)
		}
		off, bad := 0, 0
		types := map[string]int{}
		for i := range f.Tensors {
			t := &f.Tensors[i]
			got, err := f.Float32s(t)
			if err != nil {
				log.Fatal(err)
			}
			diff := 0
			for j, g := range got {
				if math.Float32bits(g) != math.Float32bits(want[off+j]) {
					diff++
				}
			}
			off += len(got)
			types[t.Type.String()]++
			if diff > 0 {
				bad++
				fmt.Printf("%s (%s): %d of %d values differ\n", t.Name, t.Type, diff, len(got))
			}
		}
		fmt.Printf("%s: %d tensors %v, %d values, %d tensors differ from ggml's dequantization\n", os.Args[2], len(f.Tensors), types, off, bad)
	case "ref": // gocheck ref ggml-ref.bin
		b := readFile(os.Args[2])
		for len(b) > 0 {
			d, nb := gguf.DType(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
			raw, want := b[8:8+nb], f32s(b[8+nb:8+nb+4*4096])
			x := f32s(b[8+nb+4*4096 : 8+nb+8*4096])
			b = b[8+nb+8*4096:]
			got := make([]float32, 4096)
			if err := gguf.Decode(got, raw, d); err != nil {
				log.Fatal(err)
			}
			diff := 0
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					diff++
				}
			}
			// Our encoder on the same input, decoded by us, for the error ratio.
			enc, err := gguf.Encode(nil, x, d)
			if err != nil {
				log.Fatal(err)
			}
			ours := make([]float32, 4096)
			_ = gguf.Decode(ours, enc, d)
			rms := func(y []float32) float64 {
				var se, ss float64
				for i := range x {
					se += float64(y[i]-x[i]) * float64(y[i]-x[i])
					ss += float64(x[i]) * float64(x[i])
				}
				return math.Sqrt(se / ss)
			}
			fmt.Printf("%-5s ggml-quantized blocks (%d bytes): %d of 4096 values differ from ggml's dequantization; relative RMS error ggml %.4f, ours %.4f, identical bytes %v\n",
				d, nb, diff, rms(want), rms(ours), bytes.Equal(enc, raw))
		}
	}
}
