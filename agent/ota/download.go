package ota

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/backoff"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// LinkPolicy is how update downloads may use the device's link: fleet
// config keys update-bandwidth and update-on-metered, and whether the link
// is metered now (flag --metered, which the fleet may set too: a device
// whose modem reports a cellular link is started with it).
type LinkPolicy struct {
	Bandwidth int64  // bytes per second; 0 = no cap
	OnMetered string // "defer" (the default) or "allow"
	Metered   bool
}

// Update-on-metered values.
const (
	MeteredDefer = "defer"
	MeteredAllow = "allow"
)

// allowed reports whether a download may run now.
func (l LinkPolicy) allowed() bool { return !l.Metered || l.OnMetered == MeteredAllow }

// Download tuning.
const (
	// stallsBeforeBackground is how many consecutive failed attempts of a
	// chunk (none of which fetched a byte) the update command waits out
	// before it returns and leaves the download to RunPending, so a dead
	// link does not hold the device's command queue.
	stallsBeforeBackground = 5
	// pendingRetry is how often RunPending tries a pending download again.
	pendingRetry = 30 * time.Second
	// defaultChunkStore bounds the chunk store when Config says nothing.
	defaultChunkStore = 1 << 30
	downloadFile      = "download.json"
)

var retryPolicy = backoff.Policy{Initial: 250 * time.Millisecond, Max: 30 * time.Second, Factor: 2}

// errDeferred ends a download that the link policy holds back.
var errDeferred = errors.New("update deferred: the link is metered and update-on-metered is defer; it starts when the link is not metered")

// downloads is the Updater's download state: one download at a time, its
// progress kept in DATA_DIR/ota/download.json after every chunk and at
// every state change, so a restart resumes it.
type downloads struct {
	store *chunkStore
	pace  *pacer
	clock backoff.Clock
	dir   string // DATA_DIR/ota
	free  func(dir string) (int64, error)
	kick  chan struct{} // (cap 1) the link policy changed

	run sync.Mutex // held by the download in progress

	mu     sync.Mutex // guards link, status, base
	link   LinkPolicy
	status fleetwire.UpdateStatus
	base   int64        // status.TransferredBytes before this process's download began
	got    atomic.Int64 // bytes this process's current download read
}

func (d *downloads) open(dir string, storeMax int64, link LinkPolicy, clock backoff.Clock) error {
	if clock == nil {
		clock = backoff.System{}
	}
	if storeMax <= 0 {
		storeMax = defaultChunkStore
	}
	if link.OnMetered == "" {
		link.OnMetered = MeteredDefer
	}
	d.dir, d.clock, d.link, d.free = dir, clock, link, freeBytes
	d.store = &chunkStore{dir: filepath.Join(dir, "chunks"), max: storeMax}
	d.pace = &pacer{clock: clock, rate: link.Bandwidth, last: clock.Now()}
	d.kick = make(chan struct{}, 1)
	if err := os.MkdirAll(d.store.dir, 0o755); err != nil {
		return err
	}
	if raw, err := os.ReadFile(filepath.Join(dir, downloadFile)); err == nil {
		_ = json.Unmarshal(raw, &d.status) // a damaged file only loses the report
	}
	return nil
}

// report is the status the fleet sees.
func (d *downloads) report() *fleetwire.UpdateStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.status
	if st.State == fleetwire.UpdateDownloading {
		st.TransferredBytes = d.base + d.got.Load()
	}
	st.Bandwidth, st.OnMetered, st.Metered = d.link.Bandwidth, d.link.OnMetered, d.link.Metered
	return &st
}

// set changes the status and keeps it on disk.
func (d *downloads) set(fn func(st *fleetwire.UpdateStatus)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.status.State == fleetwire.UpdateDownloading {
		d.status.TransferredBytes = d.base + d.got.Load()
	}
	fn(&d.status)
	raw, _ := json.Marshal(d.status)
	_ = firmware.WriteAtomic(d.dir, downloadFile, raw) // best effort: the report, not the download, is lost
}

// pending is the URL of a download to resume, "" when none.
func (d *downloads) pending() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.status.State; s == fleetwire.UpdateDownloading || s == fleetwire.UpdateDeferred {
		return d.status.URL
	}
	return ""
}

// SetLink applies a new link policy at once: the bandwidth cap to the
// download in progress, and a download that was deferred starts when the
// policy now allows it.
func (o *Updater) SetLink(l LinkPolicy) {
	if l.OnMetered == "" {
		l.OnMetered = MeteredDefer
	}
	o.dl.mu.Lock()
	o.dl.link = l
	o.dl.mu.Unlock()
	o.dl.pace.setRate(l.Bandwidth)
	select {
	case o.dl.kick <- struct{}{}:
	default:
	}
	o.notifyChanged()
}

// UpdateStatus is the device's update download and link policy, for the
// fleet status.
func (o *Updater) UpdateStatus() *fleetwire.UpdateStatus { return o.dl.report() }

// RunPending resumes an update download that a restart, a lost link or a
// metered link interrupted, at start and whenever the link policy changes,
// and retries it every pendingRetry while it stays pending. It returns
// when ctx ends.
func (o *Updater) RunPending(ctx context.Context) {
	for {
		if raw := o.dl.pending(); raw != "" && o.key != nil {
			if u, err := url.Parse(raw); err == nil && o.allowed(u) {
				msg, err := o.download(ctx, u)
				o.log.Info("pending update download", "url", u.Redacted(), "result", msg, "err", err)
			}
		}
		var retry <-chan time.Time
		if o.dl.pending() != "" {
			retry = o.dl.clock.After(pendingRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-o.dl.kick:
		case <-retry:
		}
	}
}

// download fetches the bundle at u and installs it. A chunked bundle
// costs the header and the chunks the device holds nowhere, each resumed
// by a range request where an earlier try stopped; a bundle without chunk
// lists (made before them), or a server that ignores ranges, is read whole.
func (o *Updater) download(ctx context.Context, u *url.URL) (string, error) {
	d := &o.dl
	d.run.Lock()
	defer d.run.Unlock()
	d.mu.Lock()
	link, prev := d.link, d.status
	d.mu.Unlock()
	fresh := prev.URL != u.String() || (prev.State != fleetwire.UpdateDownloading && prev.State != fleetwire.UpdateDeferred)
	base := prev.TransferredBytes
	if fresh {
		base = 0
	}
	d.mu.Lock()
	d.base = base
	d.got.Store(0)
	d.mu.Unlock()
	if !link.allowed() {
		d.set(func(st *fleetwire.UpdateStatus) {
			*st = fleetwire.UpdateStatus{URL: u.String(), State: fleetwire.UpdateDeferred, Kind: prev.Kind, Version: prev.Version, FullBytes: prev.FullBytes, PlannedBytes: prev.PlannedBytes, TransferredBytes: base}
		})
		o.notifyChanged()
		return errDeferred.Error(), nil
	}
	d.set(func(st *fleetwire.UpdateStatus) {
		if fresh {
			*st = fleetwire.UpdateStatus{}
		}
		st.URL, st.State, st.Error = u.String(), fleetwire.UpdateDownloading, ""
	})
	o.notifyChanged()
	msg, err := o.fetchAndInstall(ctx, u)
	var stalled *stalledError
	switch {
	case err == nil:
		d.set(func(st *fleetwire.UpdateStatus) { st.State = fleetwire.UpdateInstalled })
		o.gcChunksLocked()
	case errors.As(err, &stalled) || ctx.Err() != nil:
		// The link went away: the chunks fetched so far stay, and
		// RunPending (or the next start) resumes the download.
		// Not a failure: a rollout waits for the device (within its
		// update timeout) rather than counting a tunnel as a bad update.
		d.set(func(st *fleetwire.UpdateStatus) { st.Error = err.Error() })
		msg, err = fmt.Sprintf("%v; the download resumes in the background", err), nil
	default:
		d.set(func(st *fleetwire.UpdateStatus) {
			if st.State != fleetwire.UpdateRefused {
				st.State = fleetwire.UpdateFailed
			}
			st.Error = err.Error()
		})
	}
	o.notifyChanged()
	return msg, err
}

func (o *Updater) notifyChanged() {
	if o.changed != nil {
		go o.changed()
	}
}

// stalledError is a download that made no progress for
// stallsBeforeBackground attempts in a row.
type stalledError struct{ err error }

func (e *stalledError) Error() string {
	return fmt.Sprintf("update download stalled (%d attempts without a byte): %v", stallsBeforeBackground, e.err)
}
func (e *stalledError) Unwrap() error { return e.err }

func (o *Updater) fetchAndInstall(ctx context.Context, u *url.URL) (string, error) {
	d := &o.dl
	var hdr, probe []byte
	var whole io.ReadCloser
	err := o.retry(ctx, "header", func() (bool, error) {
		var err error
		hdr, probe, whole, err = o.fetchHeader(ctx, u)
		return false, err
	})
	if err != nil {
		return "", err
	}
	if whole != nil { // the server ignores ranges: read the bundle as it comes
		defer whole.Close()
		return o.installStream(ctx, whole)
	}
	m, _, err := firmware.Peek(bytes.NewReader(hdr), o.key)
	if err != nil {
		return "", err
	}
	policy, install, err := o.target(m)
	if err != nil {
		return "", err
	}
	if _, err := firmware.Open(bytes.NewReader(hdr), policy); err != nil {
		return "", err // wrong board, not newer: refused before any payload byte
	}
	var full int64
	for _, f := range m.Files {
		full += f.Size
	}
	d.set(func(st *fleetwire.UpdateStatus) {
		st.Kind, st.Version, st.FullBytes = m.ArtifactKind(), m.Version, int64(len(hdr))+full
	})
	if !m.Chunked() {
		// A bundle made before chunk lists: the whole of it, as before.
		d.set(func(st *fleetwire.UpdateStatus) { st.PlannedBytes = st.FullBytes })
		body, err := o.get(ctx, u, int64(len(probe)), -1)
		if err != nil {
			return "", err
		}
		defer body.Close()
		return o.installStream(ctx, io.MultiReader(bytes.NewReader(probe), body))
	}
	ix := o.localChunks(m.ArtifactKind())
	p := newPlan(m, int64(len(hdr)), ix, d.store)
	d.store.keepOnly(p.wanted())
	if err := d.store.keepProbe(p, probe); err != nil {
		return "", err
	}
	p = newPlan(m, int64(len(hdr)), ix, d.store)
	if err := o.checkSpace(p, full); err != nil {
		d.set(func(st *fleetwire.UpdateStatus) { st.State = fleetwire.UpdateRefused })
		return "", err
	}
	d.set(func(st *fleetwire.UpdateStatus) {
		if st.PlannedBytes == 0 { // a resumed download keeps what it planned first
			st.PlannedBytes = int64(len(probe)) + p.missing
		}
	})
	for _, c := range p.chunks {
		if c.fetch && !d.store.has(c.SHA256) {
			if err := o.fetchChunk(ctx, u, c); err != nil {
				return "", err
			}
			d.set(func(*fleetwire.UpdateStatus) {})
		}
	}
	asm := &assembly{ctx: ctx, p: p, ix: ix, store: d.store, fetch: func(ctx context.Context, c plannedChunk) error { return o.fetchChunk(ctx, u, c) }}
	v, err := firmware.Open(io.MultiReader(bytes.NewReader(hdr), asm), policy)
	if err != nil {
		return "", err
	}
	return install(ctx, v)
}

// installStream installs a bundle read whole from r.
func (o *Updater) installStream(ctx context.Context, r io.Reader) (string, error) {
	m, bundle, err := firmware.Peek(http.MaxBytesReader(nil, io.NopCloser(r), maxBundleBytes), o.key)
	if err != nil {
		return "", err
	}
	policy, install, err := o.target(m)
	if err != nil {
		return "", err
	}
	v, err := firmware.Open(bundle, policy)
	if err != nil {
		return "", err
	}
	return install(ctx, v)
}

// checkSpace refuses an update that does not fit: the chunks to fetch
// must fit the chunk store's bound, and they and the installed files the
// free space of the data directory.
func (o *Updater) checkSpace(p *plan, files int64) error {
	s := o.dl.store
	if p.missing > s.max {
		return fmt.Errorf("update refused before download: it needs %d bytes of chunks, the chunk store holds at most %d (Config.ChunkStoreMax)", p.missing, s.max)
	}
	free, err := o.dl.free(o.dl.dir)
	if err != nil {
		return nil // not measurable here: the install itself fails if the disk fills
	}
	need := p.missing + files
	if need > free {
		return fmt.Errorf("update refused before download: it needs %d bytes (%d of chunks to fetch, %d of files to install), the disk has %d free", need, p.missing, files, free)
	}
	return nil
}

// localChunks indexes the chunks the device holds for an artifact kind.
func (o *Updater) localChunks(kind string) localIndex {
	ix := localIndex{}
	if kind == firmware.KindAgent {
		for _, s := range []string{"a", "b"} {
			ix.addDir(o.slots.Path(s))
		}
		if o.ownBinary {
			for sum, lc := range o.exeChunks() {
				if _, ok := ix[sum]; !ok {
					ix[sum] = lc
				}
			}
		}
		return ix
	}
	if h := o.hot[kind]; h != nil {
		st := h.state()
		for _, v := range []string{st.Current, st.Previous} {
			if v != "" {
				ix.addDir(h.store.Path(v))
			}
		}
		ix.addSource(h.own)
	}
	return ix
}

// exeChunks indexes the running binary once: it does not change while
// the process runs, and cutting 25 MB costs a second on a device.
func (o *Updater) exeChunks() localIndex {
	o.exeOnce.Do(func() {
		o.exeIndex = localIndex{}
		if exe, err := os.Executable(); err == nil {
			o.exeIndex.addSource(Source{Path: exe})
		}
	})
	return o.exeIndex
}

// fetchHeader asks for the bundle's first bytes by range and returns its
// whole header and every byte fetched (the header and what followed it in
// the probe); a server that answers 200 instead ignores ranges, and its
// body (the whole bundle) comes back to be read as it is.
func (o *Updater) fetchHeader(ctx context.Context, u *url.URL) (hdr, probe []byte, whole io.ReadCloser, err error) {
	body, err := o.get(ctx, u, 0, firmware.HeaderProbe)
	if errors.Is(err, errNoRanges) {
		return nil, nil, body, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	hdr, err = io.ReadAll(body)
	body.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("download bundle header: %w", err)
	}
	n, err := firmware.HeaderSize(hdr)
	if err != nil {
		return nil, nil, nil, err
	}
	if int64(len(hdr)) < n {
		rest, err := o.get(ctx, u, int64(len(hdr)), n-int64(len(hdr)))
		if err != nil {
			return nil, nil, nil, err
		}
		more, err := io.ReadAll(rest)
		rest.Close()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("download bundle header: %w", err)
		}
		hdr = append(hdr, more...)
	}
	if int64(len(hdr)) < n {
		return nil, nil, nil, fmt.Errorf("%w: truncated header", firmware.ErrCorrupt)
	}
	return hdr[:n], hdr, nil, nil
}

// get fetches n bytes of the bundle from off (n < 0: to its end), paced
// and counted. A server that answers a range request with the whole file
// returns errNoRanges and, for a request from 0, that body.
func (o *Updater) get(ctx context.Context, u *url.URL, off, n int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("bytes=%d-", off)
	if n >= 0 {
		rng += strconv.FormatInt(off+n-1, 10)
	}
	req.Header.Set("Range", rng)
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download bundle: %w", err)
	}
	body := struct {
		io.Reader
		io.Closer
	}{o.dl.pace.reader(ctx, resp.Body, &o.dl.got), resp.Body}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", off)) {
			resp.Body.Close()
			return nil, fmt.Errorf("download bundle: asked for %s, got %q", rng, resp.Header.Get("Content-Range"))
		}
		return body, nil
	case http.StatusOK:
		if off == 0 {
			return body, errNoRanges
		}
		resp.Body.Close()
		return nil, errNoRanges
	default:
		resp.Body.Close()
		return nil, &statusError{code: resp.StatusCode, status: resp.Status}
	}
}

// fetchChunk fetches chunk c into the store, resuming from the bytes of it
// an earlier try kept, and checks its sha256 before it counts as held.
func (o *Updater) fetchChunk(ctx context.Context, u *url.URL, c plannedChunk) error {
	return o.retry(ctx, "chunk "+c.SHA256[:12], func() (bool, error) { return o.fetchChunkOnce(ctx, u, c) })
}

// retry runs try until it succeeds, waiting out link failures with
// backoff: a failure that fetched something starts the count again, and
// stallsBeforeBackground failures in a row without a byte end it with a
// stalledError (the download stays pending). What a retry cannot fix (a
// corrupt bundle, a server without ranges, a 4xx) ends it at once.
func (o *Updater) retry(ctx context.Context, what string, try func() (progressed bool, err error)) error {
	stalls := 0
	for {
		progressed, err := try()
		if err == nil {
			return nil
		}
		var status *statusError
		if ctx.Err() != nil || errors.Is(err, firmware.ErrCorrupt) || errors.Is(err, errNoRanges) || errors.Is(err, errOffOrigin) || (errors.As(err, &status) && status.code < 500) {
			return err
		}
		if progressed {
			stalls = 0
		} else if stalls++; stalls >= stallsBeforeBackground {
			return &stalledError{err: err}
		}
		o.log.Debug("update download interrupted; resuming", "what", what, "err", err)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-o.dl.clock.After(retryPolicy.Delay(stalls, backoff.Rand())):
		}
	}
}

// statusError is an HTTP answer other than the one asked for.
type statusError struct {
	code   int
	status string
}

func (e *statusError) Error() string { return "download bundle: " + e.status }

func (o *Updater) fetchChunkOnce(ctx context.Context, u *url.URL, c plannedChunk) (progressed bool, err error) {
	s := o.dl.store
	f, err := os.OpenFile(s.part(c.SHA256), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	if have > c.Size { // not this chunk's bytes: start over
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		have, _ = f.Seek(0, io.SeekStart)
	}
	if have < c.Size {
		body, err := o.get(ctx, u, c.at+have, c.Size-have)
		if err != nil {
			return false, err
		}
		n, err := io.Copy(f, io.LimitReader(body, c.Size-have))
		body.Close()
		if err != nil {
			return n > 0, err
		}
		if have+n < c.Size {
			return n > 0, fmt.Errorf("chunk %s…: %d of %d bytes before the response ended", c.SHA256[:12], have+n, c.Size)
		}
	}
	if err := f.Sync(); err != nil {
		return true, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return true, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return true, err
	}
	if sumOf(data) != c.SHA256 {
		f.Truncate(0)
		return true, fmt.Errorf("chunk %s… does not match its sha256; fetching it again", c.SHA256[:12])
	}
	return true, os.Rename(s.part(c.SHA256), s.path(c.SHA256))
}
