package telemetry

import (
	"bytes"
	"testing"
	"time"
)

// FuzzDecodeRecord feeds arbitrary bytes to the on-disk record decoder (a
// bad disk page must not crash the agent) and checks that whatever encodes
// decodes back unchanged.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(time.Unix(1700000000, 5), "request", []byte(`{"trace_id":"a"}`)), "request", []byte(`{}`))
	f.Add([]byte{recordVersion, 0, 0, 0, 0}, "", []byte(nil))
	f.Add([]byte{}, "k", []byte(`1`))
	f.Fuzz(func(t *testing.T, raw []byte, kind string, data []byte) {
		if tm, k, d, err := decodeRecord(raw); err == nil {
			// A value that passes the checksum re-encodes to itself.
			if again := encodeRecord(tm, k, d); !bytes.Equal(again, raw) {
				t.Fatalf("decode/encode not stable: %x vs %x", raw, again)
			}
		}
		if len(kind) > maxKindLen {
			return
		}
		ts := time.Unix(0, int64(len(raw))*1e9+int64(len(data)))
		tm, k, d, err := decodeRecord(encodeRecord(ts, kind, data))
		if err != nil || !tm.Equal(ts) || k != kind || !bytes.Equal(d, data) {
			t.Fatalf("round trip of (%v, %q, %q) = (%v, %q, %q, %v)", ts, kind, data, tm, k, d, err)
		}
	})
}
