package quic

import (
	"encoding/binary"

	"github.com/phaseless/phaseless/llm"
)

// metaExts are the tagged sections after the meta frame's fixed fields
// (ext.go's layout), so a begin event can grow fields the way request,
// token and final payloads do. A peer that predates them stops reading at
// the fixed fields.
var metaExts []ext[llm.Meta]

// Tag 30 (pd's range, 30-39): the decode half of a prefill/decode split,
// so an agent learns both workers (llm.Split).
func init() {
	metaExts = append(metaExts, ext[llm.Meta]{
		tag: 30, name: "split",
		append: func(b []byte, m *llm.Meta) []byte {
			if !m.Split.IsSet() {
				return b
			}
			b = appendString(b, m.Split.DecodePool)
			b = appendString(b, m.Split.DecodeWorker)
			return binary.AppendVarint(b, m.Split.KVBytes)
		},
		decode: func(d *decoder, m *llm.Meta) {
			m.Split.DecodePool, m.Split.DecodeWorker = d.string(), d.string()
			if m.Split.KVBytes = d.varint(); m.Split.KVBytes < 0 {
				d.fail("negative handoff size %d", m.Split.KVBytes)
			}
		},
	})
}
