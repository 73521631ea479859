package semantic

import (
	"errors"
	"sync"
	"time"
)

// GroupConfig tunes a Grouper. The zero value means DESIGN.md's numbers.
type GroupConfig struct {
	// Window is how long an open group takes new members: the batching
	// window (default 150 ms).
	Window time.Duration
	// MinSize is the members from which a group counts as formed (default 3).
	MinSize int
	// MaxSize is the most members a group takes (default 16).
	MaxSize int
	// Threshold is the least estimated similarity to a group's first
	// member for a request to join, when the request names none
	// (x-batch-threshold). Default 0.5.
	Threshold float64
}

func (c *GroupConfig) fill() {
	if c.Window == 0 {
		c.Window = 150 * time.Millisecond
	}
	if c.MinSize == 0 {
		c.MinSize = 3
	}
	if c.MaxSize == 0 {
		c.MaxSize = 16
	}
	if c.Threshold == 0 {
		c.Threshold = 0.5
	}
}

// Validate names the first bad field.
func (c GroupConfig) Validate() error {
	switch {
	case c.Window < 0:
		return errors.New("semantic: GroupConfig.Window is negative")
	case c.MinSize < 0 || c.MaxSize < 0 || c.MaxSize > 0 && c.MinSize > c.MaxSize:
		return errors.New("semantic: GroupConfig.MinSize/MaxSize: want 0 ≤ MinSize ≤ MaxSize")
	case c.Threshold < 0 || c.Threshold > 1:
		return errors.New("semantic: GroupConfig.Threshold outside 0..1")
	}
	return nil
}

// LSH layout: 16 bands of 2 values. A request is a candidate for a group
// when one band matches: probability 1-(1-J²)¹⁶, 0.99 at J = 0.5 and 0.48
// at J = 0.2, so the threshold check, not the index, decides.
const (
	bands   = 16
	bandLen = NumHashes / bands
)

func bandKey(fp *Fingerprint, b int) uint64 {
	return uint64(fp[b*bandLen])<<32 | uint64(fp[b*bandLen+1])
}

// Grouper keeps the open groups of recent requests. It reads no clock: each
// call says when it happens (wall time live, virtual time in the
// simulator), so the same calls group the same way in both. It is safe for
// concurrent use.
type Grouper struct {
	cfg GroupConfig

	mu     sync.Mutex // guards open, index, stats
	open   []*group
	index  [bands]map[uint64][]*group
	stats  GroupStats
	closed int // groups closed since the last sweep of index
}

type group struct {
	lead    Fingerprint
	prefix  uint64 // the first member's first block hash (0 = prompt shorter than a block)
	worker  int
	opened  time.Time
	members int
	done    bool
}

// GroupStats count what the Grouper did since it was made.
type GroupStats struct {
	Formed    uint64 // groups that reached MinSize
	Joined    uint64 // requests placed with an open group
	Conflicts uint64 // similar requests kept out of a group because their prompts diverged
	// Sizes counts closed groups by final size (index = members, capped at MaxSize).
	Sizes []uint64
}

// NewGrouper validates cfg and fills its defaults.
func NewGrouper(cfg GroupConfig) (*Grouper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	g := &Grouper{cfg: cfg}
	for i := range g.index {
		g.index[i] = map[uint64][]*group{}
	}
	g.stats.Sizes = make([]uint64, cfg.MaxSize+1)
	return g, nil
}

// Config returns the configuration with defaults filled in.
func (g *Grouper) Config() GroupConfig { return g.cfg }

// JoinResult is what Join did with a request.
type JoinResult uint8

// Join results; Joined and Formed mean the request joined a group.
const (
	NoGroup  JoinResult = iota // nothing similar is open: the caller places it and calls Open
	Conflict                   // similar groups are open, but their prompts start differently
	Joined                     // joined an open group
	Formed                     // joined, and the group reached MinSize with it
)

// Join looks for an open group whose first member is at least threshold
// similar to fp (0 = the configured default) and returns its worker. A
// similar group whose prompts start differently (prefix, the request's
// first block hash, differs) is a conflict: grouping them would share no
// KV, so the request is kept out. A result below Joined means the request
// joined nothing; the caller places it and calls Open. now is when it
// arrives.
func (g *Grouper) Join(now time.Time, fp *Fingerprint, prefix uint64, threshold float64) (worker int, r JoinResult) {
	if threshold == 0 {
		threshold = g.cfg.Threshold
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now)
	var best *group
	bestSim, conflict := -1.0, false
	for b := range bands {
		for _, gr := range g.index[b][bandKey(fp, b)] {
			if gr.done {
				continue
			}
			sim := Similarity(fp, &gr.lead)
			if sim < threshold || sim <= bestSim {
				continue
			}
			if gr.prefix != prefix {
				conflict = true
				continue
			}
			best, bestSim = gr, sim
		}
	}
	if best == nil {
		if conflict {
			g.stats.Conflicts++
			return 0, Conflict
		}
		return 0, NoGroup
	}
	best.members++
	g.stats.Joined++
	r = Joined
	if best.members == g.cfg.MinSize {
		g.stats.Formed++
		r = Formed
	}
	if best.members >= g.cfg.MaxSize {
		g.close(best)
	}
	return best.worker, r
}

// Open starts a group led by a request the policy placed on worker at now.
func (g *Grouper) Open(now time.Time, fp *Fingerprint, prefix uint64, worker int) {
	if g.cfg.MaxSize < 2 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := &group{lead: *fp, prefix: prefix, worker: worker, opened: now, members: 1}
	g.open = append(g.open, gr)
	for b := range bands {
		k := bandKey(fp, b)
		g.index[b][k] = append(g.index[b][k], gr)
	}
}

// Stats returns a copy of the counters.
func (g *Grouper) Stats() GroupStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Sizes = append([]uint64(nil), g.stats.Sizes...)
	return s
}

// expire closes the groups whose window has passed (open is in opening
// order) and, once many have closed, drops them from the index.
func (g *Grouper) expire(now time.Time) {
	cut := now.Add(-g.cfg.Window)
	n := 0
	for n < len(g.open) && !g.open[n].opened.After(cut) {
		g.close(g.open[n])
		n++
	}
	if n > 0 {
		g.open = append(g.open[:0], g.open[n:]...)
	}
	if g.closed > 64 && g.closed > len(g.open) {
		for b := range g.index {
			for k, list := range g.index[b] {
				live := list[:0]
				for _, gr := range list {
					if !gr.done {
						live = append(live, gr)
					}
				}
				if len(live) == 0 {
					delete(g.index[b], k)
				} else {
					g.index[b][k] = live
				}
			}
		}
		g.closed = 0
	}
}

func (g *Grouper) close(gr *group) {
	if gr.done {
		return
	}
	gr.done = true
	g.closed++
	g.stats.Sizes[min(gr.members, g.cfg.MaxSize)]++
}
