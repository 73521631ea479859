package lmtrain

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"testing"
)

func tinyCheckpoint() *Checkpoint {
	c := tinyConfig()
	p := NewParams(c)
	p.Init(1, 0.1)
	n := p.Count()
	ck := &Checkpoint{Model: c, Train: TrainConfig{Steps: 10, Batch: 2, SeqLen: 4}.WithDefaults(), Step: 3, Data: "abc",
		Flat: p.Flat, M: make([]float32, n), V: make([]float32, n)}
	ck.M[5], ck.V[7] = 0.5, 0.25
	return ck
}

func TestCheckpointRoundTrip(t *testing.T) {
	ck := tinyCheckpoint()
	b, err := ck.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Checkpoint
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.Step != 3 || got.Data != "abc" || got.Model != ck.Model || got.Train != ck.Train ||
		!slices.Equal(got.Flat, ck.Flat) || !slices.Equal(got.M, ck.M) || !slices.Equal(got.V, ck.V) {
		t.Fatal("round trip changed the checkpoint")
	}
	// Every truncation and every single-byte flip is an error, never a panic
	// or a silently different state.
	for n := range len(b) {
		if err := new(Checkpoint).UnmarshalBinary(b[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	for i := 0; i < len(b); i += 7 {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if err := new(Checkpoint).UnmarshalBinary(c); err == nil {
			t.Fatalf("byte %d flipped: no error", i)
		}
	}
}

// FuzzCheckpoint: hostile or corrupt checkpoint files are errors, not panics
// or huge allocations. The CRC is recomputed over the fuzzed body so the
// fuzzer reaches the header and size checks behind it.
func FuzzCheckpoint(f *testing.F) {
	b, _ := tinyCheckpoint().MarshalBinary()
	f.Add(b[:len(b)-4])
	f.Add([]byte(ckptMagic + "\x10\x00\x00\x00{\"model\":{}}"))
	f.Add([]byte(ckptMagic + "\x40\x00\x00\x00{\"model\":{\"vocab\":1000000,\"dim\":1000000,\"layers\":1000,\"heads\":1,\"ffn\":1000000,\"context\":9}}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var c Checkpoint
		c.UnmarshalBinary(withCRC(body))
		c.UnmarshalBinary(body)
	})
}

func withCRC(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.ChecksumIEEE(body))
}
