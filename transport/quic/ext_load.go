package quic

import "github.com/phaseless/phaseless/llm"

// Tag 50 (others' range, 50+): the engine's time to first token, so an
// agent's Server-Timing header reports the cloud engine's share and
// phaselessctl load can tell what the path added (llm.Meta.EngineTTFT).
func init() {
	metaExts = append(metaExts, ext[llm.Meta]{
		tag: 50, name: "engine TTFT",
		append: func(b []byte, m *llm.Meta) []byte {
			if m.EngineTTFT <= 0 {
				return b
			}
			return appendDuration(b, m.EngineTTFT)
		},
		decode: func(d *decoder, m *llm.Meta) {
			if m.EngineTTFT = d.duration(); m.EngineTTFT <= 0 {
				d.fail("engine TTFT %v", m.EngineTTFT)
			}
		},
	})
}
