package firmware

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// A chunked manifest lists each file as a run of chunks, each with its
// size and sha256, in file order; the chunks' sizes add up to the file's.
// A device that already holds a chunk (in either A/B slot, an installed
// artifact or its chunk store) copies it instead of downloading it, so an
// update costs the chunks that changed. How a file is cut:
//
//   - ChunkingGGUF: the header (metadata and tensor table) by
//     content-defined chunking, then the data section at every tensor's
//     first byte and every ggufSplit bytes inside a tensor. A model whose
//     tool prior, router head or one layer changed shares every other
//     tensor's chunks with the installed one, wherever they now lie.
//   - ChunkingONNX (onnxcut.go): at every initializer of an ONNX model.
//   - ChunkingCDC: content-defined chunking (cdc.go) for every other file.
//
// The chunks are signed with the manifest, and Extract checks them as it
// checks the whole file, so a bundle whose chunk list lies is corrupt.
const (
	ChunkingGGUF = "gguf-tensors-v1"
	ChunkingCDC  = "cdc-v1"
)

// ggufSplit is the most a tensor's chunk holds: big enough that a 0.5B
// model at Q4_K_M (~400 MB) is ~700 chunks, a manifest of ~70 KB; small
// enough that a resumed download refetches at most this much.
const ggufSplit = 1 << 20

// maxChunk bounds a chunk a manifest may list (cdcMax and ggufSplit are
// below it), so a device never buffers or refetches more than this for
// one chunk.
const maxChunk = 4 << 20

// Chunk is one piece of a file in a chunked manifest.
type Chunk struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ChunkFile cuts a file of the given size into chunks: a name ending in
// .gguf that parses as GGUF by its tensors, anything else by content.
func ChunkFile(name string, r io.ReaderAt, size int64) (chunking string, chunks []Chunk, err error) {
	chunking = ChunkingCDC
	var sizes []int64
	if strings.EqualFold(path.Ext(name), ".gguf") {
		if f, err := gguf.Read(r, size); err == nil {
			chunking = ChunkingGGUF
			sizes, err = ggufSizes(f, r, size)
			if err != nil {
				return "", nil, err
			}
		}
	}
	if strings.EqualFold(path.Ext(name), ".onnx") && size <= maxONNXCut {
		data := make([]byte, size)
		if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
			return "", nil, err
		}
		if cuts, err := onnxCuts(data); err == nil {
			chunking, sizes = ChunkingONNX, cutSizes(append(cuts, 0, size), size)
		}
	}
	if sizes == nil {
		if sizes, err = cdcSizes(io.NewSectionReader(r, 0, size), size); err != nil {
			return "", nil, err
		}
	}
	chunks, err = hashChunks(r, sizes)
	return chunking, chunks, err
}

// ggufSizes cuts the header by content and the data section at tensor
// starts and every ggufSplit bytes inside a tensor.
func ggufSizes(f *gguf.File, r io.ReaderAt, size int64) ([]int64, error) {
	data := min(f.DataOffset, size)
	sizes, err := cdcSizes(io.NewSectionReader(r, 0, data), data)
	if err != nil {
		return nil, err
	}
	cuts := []int64{data, size}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		n, err := t.Bytes()
		if err != nil {
			return nil, fmt.Errorf("gguf tensor %q: %w", t.Name, err)
		}
		start := data + int64(t.Offset)
		for off := start; off < start+int64(n) && off < size; off += ggufSplit {
			cuts = append(cuts, off)
		}
	}
	return append(sizes, cutSizes(cuts, size)...), nil
}

// cutSizes is the chunk sizes of the bytes from the least cut to size
// (cuts past size ignored): a chunk ends at every cut, and at every
// ggufSplit bytes past one, so no chunk exceeds ggufSplit.
func cutSizes(cuts []int64, size int64) []int64 {
	cuts = append(cuts, size)
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var sizes []int64
	for i := 1; i < len(cuts) && cuts[i] <= size; i++ {
		for from := cuts[i-1]; from < cuts[i]; from += ggufSplit {
			sizes = append(sizes, min(ggufSplit, cuts[i]-from))
		}
	}
	return sizes
}

// hashChunks reads r in runs of sizes and returns each run's sha256.
func hashChunks(r io.ReaderAt, sizes []int64) ([]Chunk, error) {
	out := make([]Chunk, 0, len(sizes))
	var off int64
	h := sha256.New()
	for _, n := range sizes {
		h.Reset()
		if _, err := io.Copy(h, io.NewSectionReader(r, off, n)); err != nil {
			return nil, err
		}
		out = append(out, Chunk{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		off += n
	}
	return out, nil
}

// checkChunks is the manifest check of a file's chunk list.
func (f *File) checkChunks() error {
	if len(f.Chunks) == 0 {
		if f.Chunking != "" {
			return fmt.Errorf("file %q names chunking %q but lists no chunks", f.Name, f.Chunking)
		}
		return nil
	}
	var sum int64
	for i, c := range f.Chunks {
		if c.Size <= 0 || c.Size > maxChunk || len(c.SHA256) != 64 {
			return fmt.Errorf("file %q chunk %d: size %d", f.Name, i, c.Size)
		}
		if _, err := hex.DecodeString(c.SHA256); err != nil {
			return fmt.Errorf("file %q chunk %d: sha256 is not hex", f.Name, i)
		}
		sum += c.Size
	}
	if sum != f.Size {
		return fmt.Errorf("file %q: chunks add up to %d bytes, the file has %d", f.Name, sum, f.Size)
	}
	return nil
}

// chunkChecker is a writer that checks the bytes written to it against a
// chunk list as they pass, so Extract refuses a bundle whose signed chunk
// list does not describe its payload.
type chunkChecker struct {
	chunks []Chunk
	i      int   // chunk being written
	left   int64 // its bytes still to come
	h      hashWriter
	err    error
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
	Reset()
}

func newChunkChecker(chunks []Chunk) *chunkChecker {
	c := &chunkChecker{chunks: chunks, h: sha256.New()}
	if len(chunks) > 0 {
		c.left = chunks[0].Size
	}
	return c
}

func (c *chunkChecker) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && c.err == nil {
		if c.i >= len(c.chunks) {
			c.err = fmt.Errorf("%w: more bytes than the chunk list holds", ErrCorrupt)
			break
		}
		k := min(int64(len(p)), c.left)
		c.h.Write(p[:k])
		p, c.left = p[k:], c.left-k
		if c.left == 0 {
			if hex.EncodeToString(c.h.Sum(nil)) != c.chunks[c.i].SHA256 {
				c.err = fmt.Errorf("%w: chunk %d does not match its manifest entry", ErrCorrupt, c.i)
				break
			}
			c.h.Reset()
			c.i++
			if c.i < len(c.chunks) {
				c.left = c.chunks[c.i].Size
			}
		}
	}
	return n, c.err
}

// done reports whether every chunk was written and matched.
func (c *chunkChecker) done() error {
	if c.err == nil && c.i != len(c.chunks) {
		c.err = fmt.Errorf("%w: %d of %d chunks written", ErrCorrupt, c.i, len(c.chunks))
	}
	return c.err
}
