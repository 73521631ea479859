package telemetry

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"time"
)

// On-disk value layout of one record (the key is the 8-byte big-endian seq):
//
//	version   1 byte  (recordVersion)
//	crc32c    4 bytes over everything after it
//	unixnano  8 bytes big-endian
//	kindLen   1 byte
//	kind      kindLen bytes
//	data      the rest (JSON)
//
// bbolt checksums only its meta pages, so a flipped bit in a data page would
// otherwise reach the cloud as a plausible record; the CRC lets Pending drop
// such a record and count it instead.
const (
	recordVersion = 1
	headerLen     = 1 + 4 + 8 + 1
	maxKindLen    = 255
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a stored value that does not decode; callers count and
// drop such records rather than fail the whole batch.
var errCorrupt = errors.New("telemetry: corrupt record")

func encodeRecord(t time.Time, kind string, data []byte) []byte {
	b := make([]byte, headerLen+len(kind)+len(data))
	b[0] = recordVersion
	binary.BigEndian.PutUint64(b[5:13], uint64(t.UnixNano()))
	b[13] = byte(len(kind))
	copy(b[headerLen:], kind)
	copy(b[headerLen+len(kind):], data)
	binary.BigEndian.PutUint32(b[1:5], crc32.Checksum(b[5:], castagnoli))
	return b
}

// decodeRecord parses a stored value. The returned slices alias b, which bbolt
// owns only for the life of the transaction: copy before keeping them.
func decodeRecord(b []byte) (t time.Time, kind string, data []byte, err error) {
	if len(b) < headerLen || b[0] != recordVersion {
		return time.Time{}, "", nil, errCorrupt
	}
	if crc32.Checksum(b[5:], castagnoli) != binary.BigEndian.Uint32(b[1:5]) {
		return time.Time{}, "", nil, errCorrupt
	}
	n := int(b[13])
	if headerLen+n > len(b) {
		return time.Time{}, "", nil, errCorrupt
	}
	t = time.Unix(0, int64(binary.BigEndian.Uint64(b[5:13]))).UTC()
	return t, string(b[headerLen : headerLen+n]), b[headerLen+n:], nil
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

func keySeq(k []byte) (uint64, bool) {
	if len(k) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k), true
}
