package firmware

import (
	"bufio"
	"io"
)

// Content-defined chunking for files with no structure the bundle knows
// (the router's ONNX file, the agent binary): a boundary falls where a
// rolling hash of the last bytes matches a mask, so an insertion or a
// deletion moves only the boundaries next to it and every other chunk keeps
// its bytes and its sha256. The hash is FastCDC's gear hash (Xia et al.,
// USENIX ATC 2016): one table lookup, a shift and an add per byte, with its
// normalised chunking (a stricter mask before the average size, a looser
// one after) so sizes cluster near the average.
//
// Sizes: at least cdcMin, at most cdcMax, about cdcAvg on average (the
// last chunk of a file may be shorter than cdcMin). casync's defaults are
// 16/64/256 KiB; these are the same, small enough that a one-line change
// in a 25 MB agent binary or a new initializer in a 60 KB router costs
// little, large enough that a 512 MiB file's manifest stays under 1 MiB.
const (
	cdcMin = 16 << 10
	cdcAvg = 64 << 10
	cdcMax = 256 << 10
	// maskS has two more bits than log2(cdcAvg) and maskL two fewer
	// (FastCDC's normalisation level 2).
	maskS = 1<<18 - 1
	maskL = 1<<14 - 1
)

// gear is the gear hash's table: 256 pseudo-random words from a fixed
// seed (splitmix64), so every build cuts the same boundaries.
var gear = func() (g [256]uint64) {
	x := uint64(0x5048415345_4c4553) // "PHASELES"
	for i := range g {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		g[i] = z ^ z>>31
	}
	return g
}()

// cdcCut returns the length of the first chunk of b (len(b) ≤ cdcMax
// unless more follows; a b shorter than cdcMin is one chunk).
func cdcCut(b []byte) int {
	n := len(b)
	if n <= cdcMin {
		return n
	}
	n = min(n, cdcMax)
	mid := min(n, cdcAvg)
	var h uint64
	i := cdcMin
	for ; i < mid; i++ {
		h = h<<1 + gear[b[i]]
		if h&maskS == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		h = h<<1 + gear[b[i]]
		if h&maskL == 0 {
			return i + 1
		}
	}
	return n
}

// cdcSizes cuts r (size bytes) into content-defined chunks and returns
// their sizes.
func cdcSizes(r io.Reader, size int64) ([]int64, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, size), 2*cdcMax)
	var out []int64
	for {
		b, err := br.Peek(cdcMax)
		if len(b) == 0 {
			if err == io.EOF {
				return out, nil
			}
			return nil, err
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		n := cdcCut(b)
		out = append(out, int64(n))
		br.Discard(n)
	}
}
