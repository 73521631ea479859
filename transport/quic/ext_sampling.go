package quic

import (
	"encoding/binary"

	"github.com/phaseless/phaseless/llm"
)

// The sampling section (tag 60) carries llm.Request.Omitted, the sampling
// fields the app left out, so the engine at the far end fills them from
// its own model's declared sampling (llm/sampling.go). A peer that
// predates it skips the section and runs the placeholder values the fixed
// fields carry (temperature 1.0, top_p and top_k off), as before.
const extTagSampling = 60

func init() {
	requestExts = append(requestExts, ext[llm.Request]{
		tag: extTagSampling, name: "sampling",
		append: func(b []byte, r *llm.Request) []byte {
			if r.Omitted == 0 {
				return b
			}
			return binary.AppendUvarint(b, uint64(r.Omitted))
		},
		decode: func(d *decoder, r *llm.Request) {
			v := d.uvarint()
			if v > uint64(llm.FieldTemperature|llm.FieldTopP|llm.FieldTopK) {
				d.fail("sampling fields %#x: unknown bits", v)
			}
			r.Omitted = llm.SamplingFields(v)
		},
	})
}
