package fleet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sort"
)

// seqSet is the set of telemetry seqs already stored for one device, as
// sorted, disjoint, non-adjacent closed intervals. It is what makes ingest
// idempotent on (device, seq), and it outlives the records themselves: a
// batch redelivered after retention deleted its records must still count as
// a duplicate. Devices send seqs in order with few gaps (a gap is a record
// the device dropped), so a device's set is a handful of intervals.
type seqSet struct {
	iv [][2]uint64 // [first, last], sorted, disjoint, with gaps between
}

// maxIntervals bounds a device's set; beyond it the two oldest intervals
// merge (their gap is then treated as seen). Only seqs the device already
// gave up on live in such gaps, so this trades a theoretical late duplicate
// filter for bounded state.
const maxIntervals = 4096

func (s *seqSet) has(seq uint64) bool {
	i := sort.Search(len(s.iv), func(i int) bool { return s.iv[i][1] >= seq })
	return i < len(s.iv) && s.iv[i][0] <= seq
}

// add inserts seq and reports whether it was new; merged counts intervals
// folded away by the bound.
func (s *seqSet) add(seq uint64) (added bool, merged int) {
	i := sort.Search(len(s.iv), func(i int) bool { return s.iv[i][1] >= seq })
	if i < len(s.iv) && s.iv[i][0] <= seq {
		return false, 0
	}
	joinPrev := i > 0 && s.iv[i-1][1]+1 == seq
	joinNext := i < len(s.iv) && seq+1 == s.iv[i][0]
	switch {
	case joinPrev && joinNext:
		s.iv[i-1][1] = s.iv[i][1]
		s.iv = append(s.iv[:i], s.iv[i+1:]...)
	case joinPrev:
		s.iv[i-1][1] = seq
	case joinNext:
		s.iv[i][0] = seq
	default:
		s.iv = append(s.iv, [2]uint64{})
		copy(s.iv[i+1:], s.iv[i:])
		s.iv[i] = [2]uint64{seq, seq}
	}
	for len(s.iv) > maxIntervals {
		s.iv[1][0] = s.iv[0][0]
		s.iv = s.iv[1:]
		merged++
	}
	return true, merged
}

// encode writes the set as uvarints: count, then per interval the distance
// from the previous interval's end (the first from 0) and the length - 1.
func (s *seqSet) encode() []byte {
	b := binary.AppendUvarint(nil, uint64(len(s.iv)))
	var prev uint64
	for _, v := range s.iv {
		b = binary.AppendUvarint(b, v[0]-prev)
		b = binary.AppendUvarint(b, v[1]-v[0])
		prev = v[1]
	}
	return b
}

var errBadSeqSet = errors.New("corrupt seq set")

// decodeSeqSet reads what encode wrote, rejecting anything that is not a
// valid set (it comes from disk).
func decodeSeqSet(orig []byte) (seqSet, error) {
	if len(orig) == 0 {
		return seqSet{}, nil
	}
	b := orig
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxIntervals {
		return seqSet{}, errBadSeqSet
	}
	b = b[k:]
	s := seqSet{iv: make([][2]uint64, 0, n)}
	var prev uint64
	for i := uint64(0); i < n; i++ {
		d, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return seqSet{}, errBadSeqSet
		}
		l, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 {
			return seqSet{}, errBadSeqSet
		}
		b = b[k1+k2:]
		first := prev + d
		// Intervals after the first must leave a gap; no arithmetic may wrap.
		if first < prev || (i > 0 && d < 2) || first+l < first {
			return seqSet{}, errBadSeqSet
		}
		s.iv = append(s.iv, [2]uint64{first, first + l})
		prev = first + l
	}
	// Only the canonical encoding is valid (no padded varints), so a set
	// round-trips byte for byte.
	if len(b) != 0 || !bytes.Equal(s.encode(), orig) {
		return seqSet{}, errBadSeqSet
	}
	return s, nil
}
