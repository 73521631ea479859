package worker

import "sync"

// prefixIndex remembers the prompt blocks this coordinator sent to an engine
// that cannot report its own cache: a direct-mapped table of block hashes,
// where a newer block overwrites an older one in its slot, which ages
// entries out roughly as an engine's LRU cache would. Routers such as
// SGLang's keep the same kind of approximate tree for the same reason.
type prefixIndex struct {
	mu    sync.Mutex // guards slots
	slots []uint64   // 0 = empty
	mask  uint64
}

func newPrefixIndex(entries int) *prefixIndex {
	n := 1
	for n < entries {
		n <<= 1
	}
	return &prefixIndex{slots: make([]uint64, n), mask: uint64(n - 1)}
}

func (p *prefixIndex) slot(h uint64) uint64 {
	h ^= h >> 29 // the hashes are already mixed; fold the high bits in anyway
	return h & p.mask
}

func (p *prefixIndex) add(hashes []uint64) {
	p.mu.Lock()
	for _, h := range hashes {
		if h == 0 {
			h = 1
		}
		p.slots[p.slot(h)] = h
	}
	p.mu.Unlock()
}

// match counts the leading hashes present.
func (p *prefixIndex) match(hashes []uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range hashes {
		if h == 0 {
			h = 1
		}
		if p.slots[p.slot(h)] != h {
			return i
		}
	}
	return len(hashes)
}
