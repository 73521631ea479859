package quic

import (
	"encoding/binary"

	"github.com/phaseless/phaseless/llm"
)

// Extensions are the optional sections at the end of a request, token or
// final payload, after every fixed field:
//
//	tag     uvarint  (unique per payload type, registered below)
//	length  4 bytes  big-endian section length
//	body    length bytes, in the section's own field layout
//
// A feature that adds fields to llm.Request, llm.Token or llm.Final (tool
// calls, cache breakpoints, trace context) registers one section in its own
// file instead of appending to the fixed layout, so features can land in any
// order and a peer skips the sections it does not know. A section whose
// append writes nothing is left out, so a payload without the feature's
// fields is byte-identical to one from a peer that predates it.
type ext[T any] struct {
	tag  uint64
	name string // for errors
	// append appends the section body for v, or nothing when v has none.
	append func(b []byte, v *T) []byte
	// decode reads the body written by append into v.
	decode func(d *decoder, v *T)
}

// Section registries, one per payload type. Tags are never reused: a
// retired section's tag stays reserved so old peers do not misread it.
var (
	requestExts []ext[llm.Request]
	tokenExts   []ext[llm.Token]
	finalExts   []ext[llm.Final]
)

// appendExts appends the sections of v that have content.
func appendExts[T any](b []byte, exts []ext[T], v *T) []byte {
	for i := range exts {
		e := &exts[i]
		mark := len(b)
		b = binary.AppendUvarint(b, e.tag)
		b = append(b, 0, 0, 0, 0)
		body := len(b)
		b = e.append(b, v)
		if len(b) == body {
			b = b[:mark] // nothing to say: leave the section out
			continue
		}
		binary.BigEndian.PutUint32(b[body-4:], uint32(len(b)-body))
	}
	return b
}

// decodeExts reads sections until the payload ends. Unknown tags are
// skipped; a known tag seen twice, or a body its decoder finds malformed,
// fails the frame. Bytes a section's decoder leaves unread are ignored, so a
// section may grow fields the same way a payload does.
func decodeExts[T any](d *decoder, exts []ext[T], v *T) {
	var seen uint64 // bit i: exts[i] already read (at most 64 sections per type)
	for d.more() {
		tag := d.uvarint()
		if d.err != nil {
			return
		}
		if len(d.b) < 4 {
			d.fail("truncated extension %d", tag)
			return
		}
		n := binary.BigEndian.Uint32(d.b)
		d.b = d.b[4:]
		if uint64(n) > uint64(len(d.b)) {
			d.fail("extension %d of %d bytes with %d left", tag, n, len(d.b))
			return
		}
		body := d.b[:n]
		d.b = d.b[n:]
		for i := range exts {
			if exts[i].tag != tag {
				continue
			}
			if seen&(1<<i) != 0 {
				d.fail("extension %s twice", exts[i].name)
				return
			}
			seen |= 1 << i
			sub := decoder{b: body}
			exts[i].decode(&sub, v)
			if sub.err != nil {
				d.fail("extension %s: %v", exts[i].name, sub.err.(*ProtocolError).Reason)
				return
			}
			break
		}
	}
}
