package affinity

import (
	"context"

	"github.com/phaseless/phaseless/cloud/place"
)

// The coordinator's cache layer and the simulator read and write the
// directory around a decision through Locate and PinnedBlock, so what a
// place.Request's Pinned says is found, and what is recorded, the same way
// in both.

// Lookup is how a directory lookup ended, as the coordinator's
// phaseless_cache_directory_lookups_total counts it.
type Lookup uint8

// Lookup results.
const (
	Miss  Lookup = iota // nothing of the prompt is recorded
	Hit                 // a worker holds part of it pinned
	Error               // the directory did not answer (Redis down, the deadline)
)

func (r Lookup) String() string {
	return [...]string{"miss", "hit", "error"}[r]
}

// Locate asks d where the prompt whose block hashes are hashes is pinned:
// the place.Request.Pinned that the Placer raises that worker's prefix
// to. index maps a worker's name to its index in the decision's View, -1
// for one this replica does not have (a hit that places nothing). Without
// an answer the request is placed on the engines' own tables.
func Locate(ctx context.Context, d Directory, hashes []uint64, index func(name string) int) (place.Pin, Lookup) {
	name, n, err := d.Lookup(ctx, hashes)
	switch {
	case err != nil:
		return place.Pin{}, Error
	case n == 0:
		return place.Pin{}, Miss
	}
	if i := index(name); i >= 0 {
		return place.Pin{Worker: i, Blocks: n}, Hit
	}
	return place.Pin{}, Hit
}

// PinnedBlock is the block hash the directory records for a pin of the
// first pinTokens tokens of a prompt whose full blocks of blockSize tokens
// hash to hashes: the last full block the pin covers (its chained hash
// covers every token before it). False when the pin covers no full block,
// or more blocks than the prompt has (a breakpoint that renders nothing).
func PinnedBlock(hashes []uint64, pinTokens, blockSize int) (uint64, bool) {
	n := pinTokens / blockSize
	if n <= 0 || n > len(hashes) {
		return 0, false
	}
	return hashes[n-1], true
}
