package lm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"

	"github.com/phaseless/phaseless/models/lm/kernels"
)

// Handoff is one sequence's state after its prefill, as a prefill engine
// hands it to a decode engine (prefill/decode disaggregation): the prompt,
// the keys and values of every prompt position in every layer, the token
// sampled from the last position's logits, and the sampler's seed and
// position so a seeded request draws the same tokens as it would have on
// one engine. The decode engine computes nothing of the prompt again.
//
// KV is stored as float32, whatever the weights' type (the engine's cache is
// float32 for every model, quantized ones included), so a handoff is exact.
type Handoff struct {
	// Model is the fingerprint of the model that computed the keys and
	// values (Model.Fingerprint); an engine refuses another model's.
	Model  uint64
	Layers int
	KVDim  int // KVHeads × HeadDim
	Prompt []int32
	Next   int32  // the first generated token
	Seed   uint64 // the sampler's seed (the engine's pick when the request had none)
	Draws  uint32 // random draws the sampler made (0 at temperature 0)
	// K and V are [layer][position·KVDim + j], len(Prompt) positions.
	K, V [][]float32
}

// Handoff wire format, version 1 (all integers little-endian):
//
//	magic     4 bytes  "PLKV"
//	version   u16      1
//	flags     u16      0 (reserved; a reader refuses any other value)
//	model     u64      fingerprint
//	layers    u32      1..handoffMaxLayers
//	kvdim     u32      1..handoffMaxKVDim
//	tokens    u32      prompt length n, 1..handoffMaxTokens
//	next      i32      first generated token
//	seed      u64
//	draws     u32
//	prompt    n × i32
//	kv        layers × (K then V) × n × kvdim × f32 (IEEE 754 bits)
//	crc       u32      CRC-32C (Castagnoli) of every byte before it
//
// The length is fixed by the header, so a reader checks it exactly before
// reading a value; every key and value must be finite.
const (
	handoffMagic      = "PLKV"
	HandoffVersion    = 1
	handoffHeaderSize = 4 + 2 + 2 + 8 + 4 + 4 + 4 + 4 + 8 + 4
	handoffMaxLayers  = 1024
	handoffMaxKVDim   = 1 << 16
	handoffMaxTokens  = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrHandoffFormat is wrapped by every error DecodeHandoff returns.
var ErrHandoffFormat = errors.New("kv handoff")

func handoffErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrHandoffFormat, fmt.Sprintf(format, args...))
}

// EncodedSize is the length of h's encoding.
func (h *Handoff) EncodedSize() int {
	return handoffHeaderSize + 4*len(h.Prompt) + 2*4*h.Layers*len(h.Prompt)*h.KVDim + 4
}

// check reports whether h's shapes agree with each other.
func (h *Handoff) check() error {
	n := len(h.Prompt)
	switch {
	case h.Layers < 1 || h.Layers > handoffMaxLayers:
		return handoffErr("%d layers outside 1..%d", h.Layers, handoffMaxLayers)
	case h.KVDim < 1 || h.KVDim > handoffMaxKVDim:
		return handoffErr("kv dimension %d outside 1..%d", h.KVDim, handoffMaxKVDim)
	case n < 1 || n > handoffMaxTokens:
		return handoffErr("%d prompt tokens outside 1..%d", n, handoffMaxTokens)
	case len(h.K) != h.Layers || len(h.V) != h.Layers:
		return handoffErr("%d/%d key/value layers for %d", len(h.K), len(h.V), h.Layers)
	}
	for l := range h.K {
		if len(h.K[l]) != n*h.KVDim || len(h.V[l]) != n*h.KVDim {
			return handoffErr("layer %d holds %d/%d values, want %d", l, len(h.K[l]), len(h.V[l]), n*h.KVDim)
		}
	}
	return nil
}

// AppendBinary appends h's encoding to b.
func (h *Handoff) AppendBinary(b []byte) ([]byte, error) {
	if err := h.check(); err != nil {
		return b, err
	}
	start := len(b)
	b = append(b, handoffMagic...)
	b = binary.LittleEndian.AppendUint16(b, HandoffVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, h.Model)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Layers))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.KVDim))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Prompt)))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Next))
	b = binary.LittleEndian.AppendUint64(b, h.Seed)
	b = binary.LittleEndian.AppendUint32(b, h.Draws)
	for _, t := range h.Prompt {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	for l := range h.K {
		for _, vs := range [2][]float32{h.K[l], h.V[l]} {
			for _, v := range vs {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (h *Handoff) MarshalBinary() ([]byte, error) {
	return h.AppendBinary(make([]byte, 0, h.EncodedSize()))
}

// DecodeHandoff reads a handoff written by AppendBinary. It checks the
// magic, version, reserved flags, every size against its bound, the exact
// length, the checksum, and that tokens are non-negative and values finite;
// the decode engine checks the rest against its model (Engine.Resume).
func DecodeHandoff(b []byte) (*Handoff, error) {
	if len(b) < handoffHeaderSize+4 {
		return nil, handoffErr("%d bytes is shorter than the header", len(b))
	}
	if string(b[:4]) != handoffMagic {
		return nil, handoffErr("bad magic %q", b[:4])
	}
	le := binary.LittleEndian
	if v := le.Uint16(b[4:]); v != HandoffVersion {
		return nil, handoffErr("version %d, this reader knows %d", v, HandoffVersion)
	}
	if f := le.Uint16(b[6:]); f != 0 {
		return nil, handoffErr("unknown flags %#x", f)
	}
	h := &Handoff{Model: le.Uint64(b[8:])}
	layers, kvDim, n := le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:])
	switch {
	case layers < 1 || layers > handoffMaxLayers:
		return nil, handoffErr("%d layers outside 1..%d", layers, handoffMaxLayers)
	case kvDim < 1 || kvDim > handoffMaxKVDim:
		return nil, handoffErr("kv dimension %d outside 1..%d", kvDim, handoffMaxKVDim)
	case n < 1 || n > handoffMaxTokens:
		return nil, handoffErr("%d prompt tokens outside 1..%d", n, handoffMaxTokens)
	}
	// Bounded above, so this cannot overflow a uint64.
	want := uint64(handoffHeaderSize) + 4*uint64(n) + 8*uint64(layers)*uint64(n)*uint64(kvDim) + 4
	if uint64(len(b)) != want {
		return nil, handoffErr("%d bytes, the header says %d", len(b), want)
	}
	body := b[:len(b)-4]
	if got, sum := crc32.Checksum(body, castagnoli), le.Uint32(b[len(b)-4:]); got != sum {
		return nil, handoffErr("checksum %#08x, computed %#08x", sum, got)
	}
	h.Layers, h.KVDim = int(layers), int(kvDim)
	h.Next = int32(le.Uint32(b[28:]))
	h.Seed = le.Uint64(b[32:])
	h.Draws = le.Uint32(b[40:])
	if h.Next < 0 {
		return nil, handoffErr("next token %d is negative", h.Next)
	}
	p := body[handoffHeaderSize:]
	h.Prompt = make([]int32, n)
	for i := range h.Prompt {
		if h.Prompt[i] = int32(le.Uint32(p[4*i:])); h.Prompt[i] < 0 {
			return nil, handoffErr("prompt token %d is %d", i, h.Prompt[i])
		}
	}
	p = p[4*n:]
	per := int(n) * h.KVDim
	h.K, h.V = make([][]float32, h.Layers), make([][]float32, h.Layers)
	for l := 0; l < h.Layers; l++ {
		for _, dst := range [2]*[]float32{&h.K[l], &h.V[l]} {
			vs := make([]float32, per)
			src := p[:4*per]
			for j := range vs {
				bits := le.Uint32(src[4*j:])
				if bits&0x7f800000 == 0x7f800000 { // every exponent bit: ±Inf or NaN
					return nil, handoffErr("layer %d holds a non-finite value", l)
				}
				vs[j] = math.Float32frombits(bits)
			}
			*dst = vs
			p = p[4*per:]
		}
	}
	return h, nil
}

// Fingerprint identifies the model for KV handoffs: engines whose models
// have the same fingerprint compute the same keys and values. It hashes the
// configuration, the weights' type and the first and last bytes of every
// weight tensor and norm, which tells apart different trainings, seeds and
// quantizations without reading a multi-gigabyte file.
func (m *Model) Fingerprint() uint64 {
	m.fpOnce.Do(func() {
		f := fnv.New64a()
		fmt.Fprintf(f, "%+v|%v|%v", m.Config, m.DType, m.tied)
		sample := func(x []byte) {
			const edge = 256
			if len(x) <= 2*edge {
				f.Write(x)
				return
			}
			f.Write(x[:edge])
			f.Write(x[len(x)-edge:])
		}
		floats := func(v []float32) {
			var buf []byte
			for _, x := range v {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			}
			sample(buf)
		}
		mat := func(x *kernels.Matrix) {
			if x.F32() != nil {
				floats(x.F32()[:min(len(x.F32()), 128)])
				floats(x.F32()[max(0, len(x.F32())-128):])
				return
			}
			sample(x.Raw())
		}
		mat(m.embd)
		mat(m.output)
		floats(m.outNorm)
		for i := range m.layers {
			l := &m.layers[i]
			for _, x := range []*kernels.Matrix{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
				mat(x)
			}
			for _, v := range [][]float32{l.attnNorm, l.ffnNorm, l.qBias, l.kBias, l.vBias, l.qNorm, l.kNorm} {
				floats(v)
			}
		}
		m.fp = f.Sum64()
	})
	return m.fp
}
