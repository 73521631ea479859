package ota

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// chunkStore keeps the chunks of an update that the device fetched, one
// file per chunk named by its sha256 (DATA_DIR/ota/chunks), until the
// update is committed: with the bytes of a chunk being fetched in
// SHA.part, it is the download's progress, which survives a lost link, a
// restart and a kill -9. It never holds more than max bytes (an update
// that would need more is refused before its download) and is emptied
// once the update it served is committed (Updater.gcChunks), not when
// its files are written: an update rolled back (a failed trial, a probe
// gate) keeps its chunks, so trying it again, or a fixed build that
// shares most of them, fetches only what it does not share. The next
// download drops whatever it does not want (keepOnly).
type chunkStore struct {
	dir string
	max int64
}

func (s *chunkStore) path(sum string) string { return filepath.Join(s.dir, sum) }
func (s *chunkStore) part(sum string) string { return filepath.Join(s.dir, sum+".part") }

func (s *chunkStore) has(sum string) bool {
	_, err := os.Stat(s.path(sum))
	return err == nil
}

// partLen is the bytes of a chunk being fetched that the store holds.
func (s *chunkStore) partLen(sum string) int64 {
	fi, err := os.Stat(s.part(sum))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// keepProbe stores what the header probe fetched past the header: the
// chunks it holds whole and the start of the one it cut, so that no byte
// is fetched twice (for a file the device shares nothing with, a chunked
// update then costs exactly the whole bundle).
func (s *chunkStore) keepProbe(p *plan, probe []byte) error {
	for _, c := range p.chunks {
		if c.at >= int64(len(probe)) {
			break
		}
		if !c.fetch || s.has(c.SHA256) {
			continue
		}
		data := probe[c.at:min(c.at+c.Size, int64(len(probe)))]
		if int64(len(data)) == c.Size && sumOf(data) != c.SHA256 {
			continue // not the bundle the manifest describes; Extract will say so
		}
		if s.partLen(c.SHA256) >= int64(len(data)) {
			continue
		}
		if err := os.WriteFile(s.part(c.SHA256), data, 0o644); err != nil {
			return err
		}
		if int64(len(data)) == c.Size {
			if err := os.Rename(s.part(c.SHA256), s.path(c.SHA256)); err != nil {
				return err
			}
		}
	}
	return nil
}

// used is the bytes the store holds, partial chunks included.
func (s *chunkStore) used() int64 {
	var n int64
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && !fi.IsDir() {
			n += fi.Size()
		}
	}
	return n
}

// keepOnly removes every chunk (and partial chunk) not in keep: what an
// earlier, abandoned update left.
func (s *chunkStore) keepOnly(keep map[string]bool) {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if !keep[strings.TrimSuffix(e.Name(), ".part")] {
			os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
}

// clear empties the store once its update is committed: its chunks then
// live in the files in force.
func (s *chunkStore) clear() { s.keepOnly(nil) }

// gcChunks empties the chunk store if the last download's update is
// committed; see gcChunksLocked. It waits for a download in progress.
func (o *Updater) gcChunks() {
	o.dl.run.Lock()
	defer o.dl.run.Unlock()
	o.gcChunksLocked()
}

// gcChunksLocked (its caller holds dl.run) empties the chunk store when
// the last download was installed and what it installed is committed: a
// hot-swapped kind is committed by its install (the health check and
// probe gate run inside it, and a failed one returns an error, so its
// state is failed, not installed); an agent build once its slot is the
// active one and no trial is pending. A trial, or a build rolled back
// (the active slot holds another version), keeps its chunks.
func (o *Updater) gcChunksLocked() {
	st := o.dl.report()
	if st.State != fleetwire.UpdateInstalled {
		return // downloading, deferred, refused or failed: the chunks serve a retry
	}
	if st.Kind == firmware.KindAgent {
		ss := o.slots.State()
		if ss.Trial != "" || ss.Versions[ss.Active] != st.Version {
			return
		}
	}
	o.dl.store.clear()
}

// localChunk is where a chunk may be read on the device without a
// download: a section of an installed file.
type localChunk struct {
	path string
	mem  []byte // an image embedded in the binary, instead of path
	off  int64
}

// localIndex maps the chunks of the device's installed files (both A/B
// slots, the installed versions of an artifact kind, the running binary)
// by sha256. It is a hint: every chunk read from it is hashed again.
type localIndex map[string]localChunk

// addDir indexes the files of an installed directory: by the chunk lists
// of the manifest kept beside them, or, for a file installed from a bundle
// without them, by cutting it as a bundle would.
func (ix localIndex) addDir(dir string) {
	m, err := firmware.InstalledManifest(dir)
	if err != nil {
		return
	}
	for _, f := range m.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if len(f.Chunks) == 0 {
			ix.addSource(Source{Path: p, Name: f.Name})
			continue
		}
		var off int64
		for _, c := range f.Chunks {
			if _, ok := ix[c.SHA256]; !ok {
				ix[c.SHA256] = localChunk{path: p, off: off}
			}
			off += c.Size
		}
	}
}

// addSource indexes what an artifact kind started from (a file or an
// embedded image) by cutting it as a bundle would (name picks how).
func (ix localIndex) addSource(src Source) {
	var r io.ReaderAt
	var size int64
	switch {
	case src.Bytes != nil:
		r, size = bytes.NewReader(src.Bytes), int64(len(src.Bytes))
	case src.Path != "":
		f, err := os.Open(src.Path)
		if err != nil {
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return
		}
		r, size = f, fi.Size()
	default:
		return
	}
	name := src.Name
	if name == "" {
		name = filepath.Base(src.Path)
	}
	_, chunks, err := firmware.ChunkFile(name, r, size)
	if err != nil {
		return
	}
	var off int64
	for _, c := range chunks {
		if _, ok := ix[c.SHA256]; !ok {
			ix[c.SHA256] = localChunk{path: src.Path, mem: src.Bytes, off: off}
		}
		off += c.Size
	}
}

// Source is what an artifact kind started from, offered as chunks to its
// updates: a file (Path) or an image embedded in the binary (Bytes, with
// Name for its extension).
type Source struct {
	Path  string
	Bytes []byte
	Name  string
}

// read returns chunk c from the device if it holds it intact.
func (ix localIndex) read(c firmware.Chunk) ([]byte, bool) {
	lc, ok := ix[c.SHA256]
	if !ok {
		return nil, false
	}
	if lc.mem != nil {
		if lc.off+c.Size > int64(len(lc.mem)) {
			return nil, false
		}
		b := lc.mem[lc.off : lc.off+c.Size]
		return b, sumOf(b) == c.SHA256
	}
	f, err := os.Open(lc.path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b := make([]byte, c.Size)
	if _, err := f.ReadAt(b, lc.off); err != nil {
		return nil, false
	}
	return b, sumOf(b) == c.SHA256
}

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// plan is one chunked update: for each chunk of the bundle, where it
// lies in the bundle (for a range request) and whether the device must
// fetch it.
type plan struct {
	m      firmware.Manifest
	header int64 // the bundle's header bytes; the first payload starts here
	chunks []plannedChunk
	// missing is the bytes of the chunks held neither on the device nor
	// in the store.
	missing int64
}

type plannedChunk struct {
	firmware.Chunk
	at    int64 // offset in the bundle
	fetch bool  // not on the device: fetched into the store
}

func newPlan(m firmware.Manifest, header int64, ix localIndex, store *chunkStore) *plan {
	p := &plan{m: m, header: header}
	at := header
	counted := map[string]bool{} // a chunk that repeats is fetched once
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			_, local := ix[c.SHA256]
			pc := plannedChunk{Chunk: c, at: at, fetch: !local}
			if pc.fetch && !counted[c.SHA256] && !store.has(c.SHA256) {
				counted[c.SHA256] = true
				p.missing += c.Size - min(store.partLen(c.SHA256), c.Size)
			}
			p.chunks = append(p.chunks, pc)
			at += c.Size
		}
	}
	return p
}

// wanted is the set of chunks the plan keeps in the store.
func (p *plan) wanted() map[string]bool {
	w := map[string]bool{}
	for _, c := range p.chunks {
		if c.fetch {
			w[c.SHA256] = true
		}
	}
	return w
}

// assembly yields the bundle's payloads in manifest order, chunk by
// chunk, from the device's files and the store, for firmware.Open to
// check and install. A chunk the index named that no longer matches (a
// file changed on disk) is fetched after all.
type assembly struct {
	ctx   context.Context
	p     *plan
	ix    localIndex
	store *chunkStore
	fetch func(ctx context.Context, c plannedChunk) error
	next  int
	buf   bytes.Reader
}

func (a *assembly) Read(b []byte) (int, error) {
	for a.buf.Len() == 0 {
		if a.next == len(a.p.chunks) {
			return 0, io.EOF
		}
		c := a.p.chunks[a.next]
		data, err := a.chunk(c)
		if err != nil {
			return 0, err
		}
		a.buf.Reset(data)
		a.next++
	}
	return a.buf.Read(b)
}

func (a *assembly) chunk(c plannedChunk) ([]byte, error) {
	if !c.fetch {
		if data, ok := a.ix.read(c.Chunk); ok {
			return data, nil
		}
	}
	if !a.store.has(c.SHA256) {
		if err := a.fetch(a.ctx, c); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(a.store.path(c.SHA256))
	if err != nil {
		return nil, err
	}
	if sumOf(data) != c.SHA256 {
		os.Remove(a.store.path(c.SHA256))
		return nil, fmt.Errorf("%w: stored chunk %s… changed on disk", firmware.ErrCorrupt, c.SHA256[:12])
	}
	return data, nil
}

var errNoRanges = errors.New("the server does not serve byte ranges")
