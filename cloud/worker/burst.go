package worker

import (
	"math"
	"sync"
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
type BurstMeter struct {
	mu     sync.Mutex // guards counts, stamps
	counts [burstSlots + 1]int
	stamps [burstSlots + 1]int64 // which slot number each entry holds
}

// NewBurstMeter returns an empty meter.
func NewBurstMeter() *BurstMeter { return &BurstMeter{} }

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(burstSlot) }

// Record counts one token emitted at now.
func (m *BurstMeter) Record(now time.Time) {
	s := slotOf(now)
	i := int(s % int64(len(m.counts)))
	m.mu.Lock()
	if m.stamps[i] != s {
		m.stamps[i], m.counts[i] = s, 0
	}
	m.counts[i]++
	m.mu.Unlock()
}

// Sigma returns σ of tokens per slot over the complete slots before now;
// 0 when nothing was emitted.
func (m *BurstMeter) Sigma(now time.Time) float64 {
	cur := slotOf(now)
	var sum, sq float64
	m.mu.Lock()
	for k := int64(1); k <= burstSlots; k++ {
		s := cur - k
		i := int(s % int64(len(m.counts)))
		c := 0
		if m.stamps[i] == s {
			c = m.counts[i]
		}
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	m.mu.Unlock()
	mean := sum / burstSlots
	v := sq/burstSlots - mean*mean
	if v <= 0 {
		return 0
	}
	return math.Sqrt(v)
}
