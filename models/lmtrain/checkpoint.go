package lmtrain

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"

	"github.com/phaseless/phaseless/internal/atomicfile"
)

// A checkpoint file is
//
//	"PLMCKPT1" | u32 header length | header JSON | n×f32 weights | n×f32 Adam m | n×f32 Adam v | u32 CRC-32 (IEEE) of all before
//
// little-endian. The header carries both configs, the step and the data
// fingerprint so a resume refuses a checkpoint from another run.
const ckptMagic = "PLMCKPT1"

// maxCkptParams bounds what a checkpoint may claim before anything is
// allocated (a 256M-weight model is far beyond what this trainer makes).
const maxCkptParams = 1 << 28

// Checkpoint is a resumable training state.
type Checkpoint struct {
	Model Config      `json:"model"`
	Train TrainConfig `json:"train"`
	Step  int         `json:"step"` // optimizer steps done
	Data  string      `json:"data"` // Dataset.Fingerprint of the training data
	Flat  []float32   `json:"-"`    // weights
	M, V  []float32   `json:"-"`    // AdamW moments
}

// MarshalBinary encodes c in the checkpoint format.
func (c *Checkpoint) MarshalBinary() ([]byte, error) {
	hdr, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString(ckptMagic)
	binary.Write(&buf, binary.LittleEndian, uint32(len(hdr)))
	buf.Write(hdr)
	for _, s := range [][]float32{c.Flat, c.M, c.V} {
		binary.Write(&buf, binary.LittleEndian, s)
	}
	binary.Write(&buf, binary.LittleEndian, crc32.ChecksumIEEE(buf.Bytes()))
	return buf.Bytes(), nil
}

// UnmarshalBinary decodes a checkpoint, checking its structure, sizes and CRC
// before trusting any of it.
func (c *Checkpoint) UnmarshalBinary(b []byte) error {
	if len(b) < len(ckptMagic)+8 || string(b[:len(ckptMagic)]) != ckptMagic {
		return errors.New("checkpoint: not a checkpoint file (bad magic)")
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return errors.New("checkpoint: CRC mismatch (truncated or corrupt)")
	}
	rest := body[len(ckptMagic):]
	n := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest)) {
		return fmt.Errorf("checkpoint: header of %d bytes in %d", n, len(rest))
	}
	var h Checkpoint
	if err := json.Unmarshal(rest[:n], &h); err != nil {
		return fmt.Errorf("checkpoint: header: %w", err)
	}
	rest = rest[n:]
	h.Model = h.Model.WithDefaults()
	if err := h.Model.Validate(); err != nil {
		return fmt.Errorf("checkpoint: model: %w", err)
	}
	count, ok := paramCount(h.Model)
	if !ok || count > maxCkptParams {
		return fmt.Errorf("checkpoint: model of more than %d weights", maxCkptParams)
	}
	if h.Step < 0 {
		return fmt.Errorf("checkpoint: step %d", h.Step)
	}
	if uint64(len(rest)) != 3*4*uint64(count) {
		return fmt.Errorf("checkpoint: %d bytes of tensors, want %d for this model", len(rest), 3*4*count)
	}
	read := func() []float32 {
		out := make([]float32, count)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
		}
		rest = rest[4*count:]
		return out
	}
	h.Flat, h.M, h.V = read(), read(), read()
	*c = h
	return nil
}

// paramCount is NewParams(c).Count() without allocating, with overflow checks
// so a hostile header cannot wrap around.
func paramCount(c Config) (int, bool) {
	// Bounding each factor keeps every product below 2^62.
	const lim = 1 << 20
	if c.Vocab > lim || c.Dim > lim || c.FFN > lim || c.Layers > 1<<10 {
		return 0, false
	}
	hd := uint64(c.Dim / c.Heads)
	d, v, f := uint64(c.Dim), uint64(c.Vocab), uint64(c.FFN)
	qw, kw := uint64(c.Heads)*hd, uint64(c.KVHeads)*hd
	perLayer := 2*d + qw*d + 2*kw*d + d*qw + 3*f*d
	total := 2*v*d + d + uint64(c.Layers)*perLayer
	if total > maxCkptParams {
		return 0, false
	}
	return int(total), true
}

// Save writes c to path atomically (temp file + rename), so a crash never
// leaves a half-written checkpoint where a resume would find it.
func (c *Checkpoint) Save(path string) error {
	b, err := c.MarshalBinary()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint reads a checkpoint file.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Checkpoint
	if err := c.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}
