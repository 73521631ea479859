package lmtrain

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Dataset is a token stream with the offsets where documents (chat examples,
// sentences) begin. Training windows start at document starts so the model
// learns from position 0 the way the engine runs a prompt.
type Dataset struct {
	Tokens []int32
	Starts []int
	// Learn marks the tokens the model is trained to predict (the replies);
	// nil means all. Prompts are read but not predicted: the capacity of a
	// small model goes to answering, not to modelling users' wording.
	Learn []bool
}

// Windows returns how many windows of seqLen+1 tokens can start at a document start.
func (d *Dataset) usableStarts(seqLen int) []int {
	n := len(d.Starts)
	for n > 0 && d.Starts[n-1]+seqLen+1 > len(d.Tokens) {
		n--
	}
	return d.Starts[:n]
}

// Validate reports whether d can give windows of seqLen tokens over vocab.
func (d *Dataset) Validate(seqLen, vocab int, name string) error {
	if len(d.usableStarts(seqLen)) == 0 {
		return fmt.Errorf("%s data: %d tokens give no window of %d tokens", name, len(d.Tokens), seqLen+1)
	}
	if d.Learn != nil && len(d.Learn) != len(d.Tokens) {
		return fmt.Errorf("%s data: %d learn flags for %d tokens", name, len(d.Learn), len(d.Tokens))
	}
	for i, t := range d.Tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%s data: token %d at %d is outside the vocabulary of %d", name, t, i, vocab)
		}
	}
	return nil
}

// Fingerprint identifies the data so a checkpoint is not resumed on other data.
func (d *Dataset) Fingerprint() string {
	h := sha256.New()
	var b [4]byte
	for _, t := range d.Tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	for _, s := range d.Starts {
		binary.LittleEndian.PutUint32(b[:], uint32(s))
		h.Write(b[:])
	}
	for _, l := range d.Learn {
		if l {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:12])
}

// batch fills tokens and targets with b windows of s tokens. The windows of
// step depend only on (seed, step), so a resumed run sees exactly the batches
// the uninterrupted run would have.
func (d *Dataset) batch(seed uint64, step, b, s int, tokens, targets []int32) {
	starts := d.usableStarts(s)
	rng := rand.New(rand.NewPCG(seed, uint64(step)+1))
	for i := range b {
		d.window(starts[rng.IntN(len(starts))], s, tokens[i*s:(i+1)*s], targets[i*s:(i+1)*s])
	}
}

// window fills s tokens from st and their targets, -1 where not learned.
func (d *Dataset) window(st, s int, tokens, targets []int32) {
	copy(tokens, d.Tokens[st:st+s])
	copy(targets, d.Tokens[st+1:st+s+1])
	if d.Learn != nil {
		for i, l := range d.Learn[st+1 : st+s+1] {
			if !l {
				targets[i] = -1
			}
		}
	}
}

// evalWindows spreads n windows evenly over the usable document starts, the
// same ones every evaluation.
func (d *Dataset) evalWindows(n, s int) []int {
	starts := d.usableStarts(s)
	n = min(n, len(starts))
	out := make([]int, n)
	for i := range out {
		out[i] = starts[i*len(starts)/n]
	}
	return out
}
