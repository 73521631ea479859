package fleet

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// FuzzSeqSet decodes arbitrary bytes as a stored seq set (it comes from
// disk): invalid input is an error, never a panic, and anything accepted
// re-encodes to the same bytes and keeps its invariants under adds.
func FuzzSeqSet(f *testing.F) {
	var s seqSet
	for _, q := range []uint64{1, 2, 3, 7, 9, 10, 1 << 40} {
		s.add(q)
	}
	f.Add(s.encode(), uint64(8))
	f.Add([]byte{0}, uint64(0))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}, ^uint64(0))
	f.Add([]byte{2, 1, 0, 1, 0}, uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64) {
		s, err := decodeSeqSet(b)
		if err != nil {
			return
		}
		if len(b) > 0 && !bytes.Equal(s.encode(), b) {
			t.Fatalf("re-encode differs: %x vs %x", s.encode(), b)
		}
		had := s.has(seq)
		added, _ := s.add(seq)
		if added == had || !s.has(seq) {
			t.Fatalf("add(%d): had %v added %v has %v", seq, had, added, s.has(seq))
		}
		for i := 1; i < len(s.iv); i++ {
			if s.iv[i][0] <= s.iv[i-1][1]+1 || s.iv[i][0] > s.iv[i][1] {
				t.Fatalf("intervals not sorted, disjoint and gapped: %v", s.iv)
			}
		}
		if _, err := decodeSeqSet(s.encode()); err != nil {
			t.Fatalf("own encoding rejected: %v", err)
		}
	})
}

// FuzzDeliver feeds arbitrary payloads to every device topic of a real
// Manager (the path every broker message takes): malformed input is a
// counted error, never a panic, and whatever is stored stays exportable.
func FuzzDeliver(f *testing.F) {
	f.Add(uint8(0), []byte(`{"device_id":"fz-1","batch_id":"b","records":[{"seq":1,"time":"2026-01-01T00:00:00Z","kind":"request","data":{"trace_id":"t"}}],"dropped":3}`))
	f.Add(uint8(0), []byte(`{"records":[{"seq":18446744073709551615},{"seq":0},{"seq":0}]}`))
	f.Add(uint8(0), []byte(`{"records":[{"seq":1,"data":"\u0000"}]}`))
	f.Add(uint8(0), []byte(`{"records":null}`))
	f.Add(uint8(1), []byte(`{"device_id":"zz","state":"online","version":"1","time":"2026-01-01T00:00:00Z"}`))
	f.Add(uint8(2), []byte(`{"version":3,"applied":false,"error":"x"}`))
	f.Add(uint8(3), []byte(`{"id":"abc","ok":true}`))
	f.Add(uint8(0), []byte(`[]`))
	m := fuzzManager(f)
	suffixes := []string{fleetwire.SuffixTelemetry, fleetwire.SuffixStatus, fleetwire.SuffixConfigReported, fleetwire.SuffixCmdResult, fleetwire.SuffixTelemetryAck}
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		suffix := suffixes[int(which)%len(suffixes)]
		before := m.mDecodeErrors.With(suffix).Value()
		m.deliver(topics.Device("fz-1", suffix), payload)
		// Anything that is not JSON on a topic the cloud reads is a counted
		// error (an empty payload is a cleared retained message, not one).
		if suffix != fleetwire.SuffixTelemetryAck && len(payload) > 0 && !json.Valid(payload) && m.mDecodeErrors.With(suffix).Value() != before+1 {
			t.Fatalf("malformed %s payload not counted", suffix)
		}
		c, err := m.Counts()
		if err != nil {
			t.Fatal(err)
		}
		if c.Stored > 1000 {
			t.Fatalf("retention bound broken: %d stored", c.Stored)
		}
	})
}
