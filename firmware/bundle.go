package firmware

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
)

// A bundle is one file: the magic, a big-endian uint32 manifest length, the
// manifest JSON, the ed25519 signature of exactly those manifest bytes, then
// each file's bytes in manifest order. Signing the manifest (which holds every
// file's sha256) signs the whole bundle, and the layout lets a device verify
// the signature before reading a single payload byte.
const magic = "PLOTA1\n"

// Limits that keep a hostile bundle from making the device allocate or write
// without bound.
const (
	maxManifest = 1 << 20
	maxFiles    = 256
	maxFileSize = 512 << 20
)

// Manifest describes a bundle.
type Manifest struct {
	Version string `json:"version"` // dotted numeric, e.g. 1.4.2
	Board   string `json:"board"`   // board profile the bundle is built for
	// Kind is what the bundle updates: KindAgent (the default when empty,
	// as in bundles made before kinds existed), KindPredictor or KindModel.
	Kind string `json:"kind,omitempty"`
	// RollbackFrom is a signed rollback statement: the one version this
	// bundle, though older, may replace. A device running exactly that
	// version accepts it; every other device holds its version as the
	// floor (Open). Empty for an ordinary, forward bundle.
	RollbackFrom string    `json:"rollback_from,omitempty"`
	Created      time.Time `json:"created"`
	Files        []File    `json:"files"`
	// WholeFile writes no chunk lists, as bundles were before chunking
	// (chunk.go): such a bundle installs only by a whole download. For
	// tests that such bundles still install; not part of the manifest.
	WholeFile bool `json:"-"`
}

// Artifact kinds: the agent binary (installed into an A/B slot and booted
// on trial by the supervisor), the router model (ONNX) and the edge
// language model (GGUF), both hot-swapped by the running agent.
const (
	KindAgent     = "agent"
	KindPredictor = "predictor"
	KindModel     = "model"
	kindList      = "agent, predictor or model"
)

func validKind(k string) bool {
	return k == "" || k == KindAgent || k == KindPredictor || k == KindModel
}

// ArtifactKind is m.Kind with the default applied.
func (m Manifest) ArtifactKind() string {
	if m.Kind == "" {
		return KindAgent
	}
	return m.Kind
}

// File is one payload of a bundle.
type File struct {
	Name   string `json:"name"` // relative path inside the slot
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Chunking and Chunks describe the file as content-addressed chunks
	// (chunk.go); both empty in bundles made before chunking, which a
	// device downloads whole.
	Chunking string  `json:"chunking,omitempty"`
	Chunks   []Chunk `json:"chunks,omitempty"`
}

// Chunked reports whether every file of m lists its chunks, so a device
// may fetch only the chunks it lacks.
func (m Manifest) Chunked() bool {
	for _, f := range m.Files {
		if len(f.Chunks) == 0 && f.Size > 0 {
			return false
		}
	}
	return true
}

// Errors callers branch on.
var (
	ErrBadSignature = errors.New("bundle signature does not verify")
	ErrWrongBoard   = errors.New("bundle is for another board")
	ErrNotNewer     = errors.New("bundle is not newer than the running version")
	ErrCorrupt      = errors.New("bundle is corrupt")
)

// Write builds a signed bundle of files (name → content) into w.
func Write(w io.Writer, key ed25519.PrivateKey, version, board string, files map[string][]byte, names []string) error {
	return WriteKind(w, key, KindAgent, version, board, files, names)
}

// WriteKind is Write for an artifact of the given kind.
func WriteKind(w io.Writer, key ed25519.PrivateKey, kind, version, board string, files map[string][]byte, names []string) error {
	return WriteManifest(w, key, Manifest{Version: version, Board: board, Kind: kind}, files, names)
}

// WriteManifest builds a signed bundle from m's version, board, kind and
// rollback statement; Created and Files are filled in here.
func WriteManifest(w io.Writer, key ed25519.PrivateKey, m Manifest, files map[string][]byte, names []string) error {
	m.Created, m.Files = time.Now().UTC(), nil
	if _, err := ParseVersion(m.Version); err != nil {
		return err
	}
	if !validKind(m.Kind) {
		return fmt.Errorf("artifact kind %q: want %s", m.Kind, kindList)
	}
	if m.RollbackFrom != "" {
		newer, err := Newer(m.RollbackFrom, m.Version)
		if err != nil {
			return fmt.Errorf("rollback from: %w", err)
		}
		if !newer {
			return fmt.Errorf("a rollback bundle replaces a newer version: %s is not newer than %s", m.RollbackFrom, m.Version)
		}
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return err
		}
		sum := sha256.Sum256(files[n])
		f := File{Name: n, Size: int64(len(files[n])), SHA256: hex.EncodeToString(sum[:])}
		if !m.WholeFile && f.Size > 0 {
			var err error
			if f.Chunking, f.Chunks, err = ChunkFile(n, bytes.NewReader(files[n]), f.Size); err != nil {
				return fmt.Errorf("chunk %s: %w", n, err)
			}
		}
		m.Files = append(m.Files, f)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var hdr bytes.Buffer
	hdr.WriteString(magic)
	binary.Write(&hdr, binary.BigEndian, uint32(len(mb)))
	hdr.Write(mb)
	hdr.Write(ed25519.Sign(key, mb))
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := w.Write(files[n]); err != nil {
			return err
		}
	}
	return nil
}

// Policy is what the device accepts.
type Policy struct {
	TrustedKey     ed25519.PublicKey
	Board          string
	RunningVersion string
	// anyVersion skips the version rule, for tools that read a bundle
	// without installing it (ReadPayload). Devices never set it: whoever
	// sends commands must not be able to relax the floor, so a rollback is
	// only ever a signed manifest's RollbackFrom.
	anyVersion bool
}

// Verified is a bundle whose manifest is signed, meant for this board and
// acceptable by version; its payloads are still to be checked as they are
// read by Extract.
type Verified struct {
	Manifest Manifest
	r        io.Reader
}

// Open reads and verifies a bundle's header from r against p.
func Open(r io.Reader, p Policy) (*Verified, error) {
	m, err := readHeader(r, p.TrustedKey)
	if err != nil {
		return nil, err
	}
	if m.Board != p.Board {
		return nil, fmt.Errorf("%w: bundle %q, device %q", ErrWrongBoard, m.Board, p.Board)
	}
	newer, err := Newer(m.Version, p.RunningVersion)
	if err != nil {
		return nil, err
	}
	if !newer && !p.anyVersion && !rollbackFor(m, p.RunningVersion) {
		if m.RollbackFrom != "" {
			return nil, fmt.Errorf("%w: bundle %s is a signed rollback from %s only, running %s", ErrNotNewer, m.Version, m.RollbackFrom, p.RunningVersion)
		}
		return nil, fmt.Errorf("%w: bundle %s, running %s", ErrNotNewer, m.Version, p.RunningVersion)
	}
	return &Verified{Manifest: m, r: r}, nil
}

// rollbackFor reports whether m is a signed rollback from exactly running.
func rollbackFor(m Manifest, running string) bool {
	if m.RollbackFrom == "" || running == "" {
		return false
	}
	later, err1 := Newer(m.RollbackFrom, running)
	earlier, err2 := Newer(running, m.RollbackFrom)
	return err1 == nil && err2 == nil && !later && !earlier
}

// Inspect reads a bundle's manifest for the cloud, which serves bundles to
// devices and names their version in rollouts. With a key the signature is
// checked as a device checks it; without one the manifest is only parsed
// (devices verify it anyway). Payloads are not read.
func Inspect(r io.Reader, key ed25519.PublicKey) (Manifest, error) {
	if key == nil {
		return readHeaderUnverified(r)
	}
	return readHeader(r, key)
}

// Check reads a whole bundle from r as a device's install would: its
// manifest (signature checked against key; only parsed without one) and
// every payload against the size and sha256 the manifest lists. It is for
// the cloud, which stores bundles and must not call a corrupted one
// verified; the version and board are not judged here.
func Check(r io.Reader, key ed25519.PublicKey) (Manifest, error) {
	m, err := Inspect(r, key)
	if err != nil {
		return Manifest{}, err
	}
	v := &Verified{Manifest: m, r: r}
	if err := v.Extract(func(string) (io.WriteCloser, error) { return Discard(), nil }); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Peek verifies a bundle's signed manifest, so a device can tell what kind
// of artifact it is before choosing the Policy to Open it with, and returns
// a reader that yields the whole bundle again from its first byte.
func Peek(r io.Reader, key ed25519.PublicKey) (Manifest, io.Reader, error) {
	var head bytes.Buffer
	m, err := readHeader(io.TeeReader(r, &head), key)
	if err != nil {
		return Manifest{}, nil, err
	}
	return m, io.MultiReader(&head, r), nil
}

func readHeader(r io.Reader, key ed25519.PublicKey) (Manifest, error) {
	mb, sig, err := readRawHeader(r)
	if err != nil {
		return Manifest{}, err
	}
	if len(key) != ed25519.PublicKeySize || !ed25519.Verify(key, mb, sig) {
		return Manifest{}, ErrBadSignature
	}
	return parseManifest(mb)
}

func readHeaderUnverified(r io.Reader) (Manifest, error) {
	mb, _, err := readRawHeader(r)
	if err != nil {
		return Manifest{}, err
	}
	return parseManifest(mb)
}

// readRawHeader returns the manifest bytes and their signature.
func readRawHeader(r io.Reader) (manifest, sig []byte, err error) {
	head := make([]byte, len(magic)+4)
	if _, err := io.ReadFull(r, head); err != nil || string(head[:len(magic)]) != magic {
		return nil, nil, fmt.Errorf("%w: not a Phaseless bundle", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(head[len(magic):])
	if n == 0 || n > maxManifest {
		return nil, nil, fmt.Errorf("%w: manifest length %d", ErrCorrupt, n)
	}
	mb := make([]byte, int(n)+ed25519.SignatureSize)
	if _, err := io.ReadFull(r, mb); err != nil {
		return nil, nil, fmt.Errorf("%w: truncated header", ErrCorrupt)
	}
	return mb[:n], mb[n:], nil
}

func parseManifest(mb []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if err := m.check(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func (m *Manifest) check() error {
	if _, err := ParseVersion(m.Version); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if !validKind(m.Kind) {
		return fmt.Errorf("%w: artifact kind %q (want %s)", ErrCorrupt, m.Kind, kindList)
	}
	if len(m.Files) == 0 || len(m.Files) > maxFiles {
		return fmt.Errorf("%w: %d files", ErrCorrupt, len(m.Files))
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if err := checkName(f.Name); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if seen[f.Name] {
			return fmt.Errorf("%w: duplicate file %q", ErrCorrupt, f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 || f.Size > maxFileSize || len(f.SHA256) != 64 {
			return fmt.Errorf("%w: file %q size %d", ErrCorrupt, f.Name, f.Size)
		}
		if err := f.checkChunks(); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	return nil
}

// Extract streams each payload to create(name), checking size and sha256.
// A payload that does not match is an error and the caller discards the slot.
func (v *Verified) Extract(create func(name string) (io.WriteCloser, error)) error {
	for _, f := range v.Manifest.Files {
		w, err := create(f.Name)
		if err != nil {
			return err
		}
		h := sha256.New()
		dst := io.MultiWriter(w, h)
		var cc *chunkChecker
		if len(f.Chunks) > 0 {
			cc = newChunkChecker(f.Chunks)
			dst = io.MultiWriter(cc, w, h) // a bad chunk stops the copy before w sees it
		}
		n, err := io.Copy(dst, io.LimitReader(v.r, f.Size))
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err == nil && cc != nil && n == f.Size {
			err = cc.done()
		}
		if err != nil {
			return err
		}
		if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
			return fmt.Errorf("%w: file %q does not match its manifest entry", ErrCorrupt, f.Name)
		}
	}
	return nil
}

func checkName(n string) error {
	// "." would be the slot directory itself, written as a file.
	if n == "" || n == "." || path.IsAbs(n) || path.Clean(n) != n || strings.HasPrefix(n, "..") || strings.ContainsAny(n, "\\\x00") {
		return fmt.Errorf("unsafe file name %q", n)
	}
	if n == manifestFile {
		return fmt.Errorf("file name %q is reserved for the slot's manifest", n)
	}
	return nil
}

// ParseVersion parses a dotted numeric version (1, 1.2, 1.2.3, at most 4 parts).
func ParseVersion(v string) ([]int, error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if v == "" || len(parts) > 4 {
		return nil, fmt.Errorf("version %q: want dotted numbers like 1.2.3", v)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("version %q: want dotted numbers like 1.2.3", v)
		}
		out[i] = n
	}
	return out, nil
}

// Newer reports whether version a is strictly newer than b. A running
// version that is not numeric (a "dev" build) accepts any bundle.
func Newer(a, b string) (bool, error) {
	va, err := ParseVersion(a)
	if err != nil {
		return false, err
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return true, nil
	}
	for i := 0; i < max(len(va), len(vb)); i++ {
		x, y := at(va, i), at(vb, i)
		if x != y {
			return x > y, nil
		}
	}
	return false, nil
}

func at(v []int, i int) int {
	if i < len(v) {
		return v[i]
	}
	return 0
}

// WriteCloser is what Extract writes each payload to.
type WriteCloser = io.WriteCloser

// Discard returns a WriteCloser that drops what it is given, to verify a
// bundle's payloads without keeping them.
func Discard() WriteCloser { return discard{} }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Close() error                { return nil }

// HeaderPrefix is how many bytes of a bundle HeaderSize needs.
const HeaderPrefix = len(magic) + 4

// HeaderSize reads a bundle's first HeaderPrefix bytes and returns the
// length of its whole header (magic, length, manifest, signature): where
// the first payload starts, so a device can fetch the signed manifest
// alone and then only the payload ranges it lacks.
func HeaderSize(prefix []byte) (int64, error) {
	if len(prefix) < HeaderPrefix || string(prefix[:len(magic)]) != magic {
		return 0, fmt.Errorf("%w: not a Phaseless bundle", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(prefix[len(magic):])
	if n == 0 || n > maxManifest {
		return 0, fmt.Errorf("%w: manifest length %d", ErrCorrupt, n)
	}
	return int64(HeaderPrefix) + int64(n) + ed25519.SignatureSize, nil
}
