package firmware

import (
	"bytes"
	"fmt"
)

// HeaderProbe is the first range a device asks for (agent/ota): a
// router's header (~850 bytes) fits; a bigger one's rest (a 1.7 MB
// model's is ~4 KB, a 400 MB model's ~70 KB) is a second request for
// exactly what is missing. Small because what the probe holds past the
// header is payload the device may already hold: at 16 KiB the probe
// alone was 28% of a 58 KB router update that changed 426 bytes, where a
// second round trip costs no byte.
const HeaderProbe = 1 << 10

// Cost is what a device fetches of a chunked bundle.
type Cost struct {
	Bundle            int64 // the whole bundle: what a device without chunks fetches
	Fetch             int64 // what a device that holds the old files fetches: Probe + NewBytes
	Probe             int64 // the header probe (at least the whole header)
	Chunks, NewChunks int   // chunks in the bundle, and those the device lacks
	NewBytes          int64 // the bytes of those fetched after the probe
}

// FetchCost is what a device that holds the files held (any names; each
// cut as its name says, as a device cuts what it holds) fetches of bundle:
// its header probe and every chunk whose sha256 is no chunk of a held file.
// It is the plan agent/ota makes, for operators to price an update
// (phaselessctl ota delta) before rolling it out.
func FetchCost(bundle []byte, held map[string][]byte) (Cost, error) {
	m, err := Inspect(bytes.NewReader(bundle), nil)
	if err != nil {
		return Cost{}, err
	}
	hdr, err := HeaderSize(bundle)
	if err != nil {
		return Cost{}, err
	}
	have := map[string]bool{}
	for name, data := range held {
		_, cs, err := ChunkFile(name, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return Cost{}, fmt.Errorf("chunk %s: %w", name, err)
		}
		for _, c := range cs {
			have[c.SHA256] = true
		}
	}
	c := Cost{Bundle: int64(len(bundle)), Probe: max(hdr, min(HeaderProbe, int64(len(bundle))))}
	if !m.Chunked() {
		c.Fetch = c.Bundle
		return c, nil
	}
	fetched := map[string]bool{}
	at := hdr
	for _, f := range m.Files {
		for _, ch := range f.Chunks {
			c.Chunks++
			if !have[ch.SHA256] && !fetched[ch.SHA256] {
				fetched[ch.SHA256] = true // a repeated chunk is fetched once
				c.NewChunks++
				// What the probe fetched of it is kept, not fetched again.
				c.NewBytes += ch.Size - max(0, min(at+ch.Size, c.Probe)-at)
			}
			at += ch.Size
		}
	}
	c.Fetch = c.Probe + c.NewBytes
	return c, nil
}
