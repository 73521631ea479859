package worker

import (
	"math"
	"sync/atomic"
	"time"
)

// burstSlot is the bucket width of DESIGN.md §5's burstiness signal
// ("output burst σ > 8.3 per 100 ms").
const burstSlot = 100 * time.Millisecond

// burstSlots is how many complete slots σ is computed over (2 s): long
// enough for a stable σ, short enough to follow load changes.
const burstSlots = 20

// BurstMeter measures output burstiness: the standard deviation of tokens
// emitted per 100 ms over the last 2 s.
//
// Record runs for every token of every stream on the worker, so it takes
// no lock: each slot is one atomic word holding the slot number and its
// count (a mutex here was a per-token lock every stream of a worker
// contended for; see docs/reliability.md, "Load").
type BurstMeter struct {
	slots [burstSlots + 1]atomic.Uint64 // slotNumber<<countBits | count
}

// countBits is the width of a slot's count: 16M tokens per 100 ms per
// worker, far above any engine; the count saturates there.
const (
	countBits = 24
	countMask = 1<<countBits - 1
)

// NewBurstMeter returns an empty meter.
func NewBurstMeter() *BurstMeter { return &BurstMeter{} }

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(burstSlot) }

// Record counts one token emitted at now.
func (m *BurstMeter) Record(now time.Time) {
	s := slotOf(now)
	a := &m.slots[int(s%int64(len(m.slots)))]
	for {
		old := a.Load()
		next := uint64(s)<<countBits | 1
		if int64(old>>countBits) == s {
			if old&countMask == countMask {
				return
			}
			next = old + 1
		}
		if a.CompareAndSwap(old, next) {
			return
		}
	}
}

// Sigma returns σ of tokens per slot over the complete slots before now;
// 0 when nothing was emitted.
func (m *BurstMeter) Sigma(now time.Time) float64 {
	cur := slotOf(now)
	var sum, sq float64
	for k := int64(1); k <= burstSlots; k++ {
		s := cur - k
		v := m.slots[int(s%int64(len(m.slots)))].Load()
		c := 0.0
		if int64(v>>countBits) == s {
			c = float64(v & countMask)
		}
		sum += c
		sq += c * c
	}
	mean := sum / burstSlots
	v := sq/burstSlots - mean*mean
	if v <= 0 {
		return 0
	}
	return math.Sqrt(v)
}
