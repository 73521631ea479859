package lm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/diskcache"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// The prompt-state cache on disk (EngineConfig.PromptCacheDir): the KV
// blocks of a chat's stable prefix, its leading system turns (a system
// prompt, the tool definitions), are written to a directory when a second
// request since start computes or reuses them, and loaded into the
// engine's prefix cache when the next engine starts, so the first request
// after a restart does not prefill them again (RKLLM's prompt cache,
// llama.cpp's --prompt-cache). Only that prefix is kept, not
// every cache breakpoint: a breakpoint on a conversation's turns would write
// a new file per turn to the device's flash, and pinning already keeps
// those in memory.
//
// A file is a Handoff encoding (handoff.go: magic, version, the model's
// fingerprint, layers and KV width, the prefix's token ids, the keys and
// values as float32, a CRC-32C) of a prefix of whole blocks, with no
// generated token, seed or draws (all zero). Its name is the model's
// fingerprint and a hash of the token ids, so an engine lists its own
// model's files without reading the others, and a file whose contents do
// not match its name is not loaded. The directory is bounded in bytes,
// least recently used first out (diskcache); a prefix a request reuses is
// touched at most once per promptTouchEvery.

// DefaultPromptCacheBytes bounds the prompt cache's directory when
// EngineConfig.PromptCacheBytes is 0: the car's 13 tool definitions and a
// system prompt are 800 tokens with Qwen3's vocabulary (docs/engine.md),
// 19.7 MB in Qwen2.5-0.5B's shape (24 layers × 2 KV heads × 64 × K and V ×
// float32: 24,576 bytes a token), so 64 MiB keeps three such prefixes and
// many of smaller models.
const DefaultPromptCacheBytes = 64 << 20

// promptFileSuffix ends the names of the cache's files.
const promptFileSuffix = ".kv"

// promptTouchEvery is how often a reused prefix's file has its use recorded:
// often enough for the least-recently-used order across restarts, seldom
// enough not to write to flash on every request.
const promptTouchEvery = time.Hour

// promptDisk is an engine's prompt cache on disk: the directory, the writer
// goroutine the step loop hands prefixes to, and what this engine knows is
// on disk.
type promptDisk struct {
	dir   *diskcache.Dir
	log   *slog.Logger
	model uint64
	now   func() time.Time
	jobs  chan promptJob // to the writer; closed by close
	done  chan struct{}  // closed when the writer has exited
	once  sync.Once

	mu    sync.Mutex           // guards known, seen and memo
	known map[string]time.Time // this model's files on disk → when last touched
	seen  map[string]bool      // prefixes used once since start, not written
	memo  map[uint64][]int32   // stable prefixes' tokens by their turns' hash

	loadedFiles, loadedBlocks, ignored, written, dropped, failed atomic.Uint64
}

// promptJob is one file for the writer: a prefix's KV to write, or, with h
// nil, a use to record.
type promptJob struct {
	name string
	h    *Handoff
}

// PromptDiskStats are the prompt cache's counters since the engine started
// (Stats.PromptDisk).
type PromptDiskStats struct {
	// LoadedFiles and LoadedBlocks count what the engine loaded at start.
	LoadedFiles, LoadedBlocks uint64
	// Ignored counts files not loaded: corrupt, truncated, or holding
	// another model's keys and values under this model's name (each also
	// logged and removed). Files other models wrote are left alone.
	Ignored uint64
	// Written counts prefixes written; Dropped those not written because
	// the writer was still busy; Failed writes that failed (logged).
	Written, Dropped, Failed uint64
}

// promptQueue is how many prefixes may wait for the writer; more are
// dropped (a later request with the same prefix offers it again).
const promptQueue = 4

// openPromptDisk opens the engine's cache directory and starts its writer.
func openPromptDisk(cfg EngineConfig, model uint64) (*promptDisk, error) {
	dir, err := diskcache.Open(cfg.PromptCacheDir, cfg.PromptCacheBytes, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("engine config: PromptCacheDir: %w", err)
	}
	d := &promptDisk{
		dir: dir, log: cfg.Logger, model: model, now: cfg.Now,
		jobs: make(chan promptJob, promptQueue), done: make(chan struct{}),
		known: map[string]time.Time{}, seen: map[string]bool{}, memo: map[uint64][]int32{},
	}
	go d.write()
	return d, nil
}

// close stops the writer once it has written what is queued, and waits for
// it. The step loop, which queues, must have exited.
func (d *promptDisk) close() {
	d.once.Do(func() { close(d.jobs) })
	<-d.done
}

func (d *promptDisk) stats() PromptDiskStats {
	return PromptDiskStats{
		LoadedFiles: d.loadedFiles.Load(), LoadedBlocks: d.loadedBlocks.Load(), Ignored: d.ignored.Load(),
		Written: d.written.Load(), Dropped: d.dropped.Load(), Failed: d.failed.Load(),
	}
}

// fileName is the name of the file of model's prefix tokens.
func fileName(model uint64, tokens []int32) string {
	return fmt.Sprintf("%016x-%016x%s", model, kvcache.NextHash(kvcache.RootHash, 0, tokens), promptFileSuffix)
}

// write is the writer goroutine: encoding and fsync stay off the step loop.
func (d *promptDisk) write() {
	defer close(d.done)
	for j := range d.jobs {
		if j.h == nil {
			if err := d.dir.Touch(j.name); errors.Is(err, fs.ErrNotExist) {
				d.forget(j.name) // trimmed: the next request writes it again
			}
			continue
		}
		raw, err := j.h.MarshalBinary()
		if err == nil {
			err = d.dir.Write(j.name, raw)
		}
		if err != nil {
			// Kept as known: a full disk or a prefix over the bound is not
			// tried again on every request.
			d.failed.Add(1)
			d.log.Warn("prompt cache: prefix not written", "file", j.name, "tokens", len(j.h.Prompt), "err", err)
			continue
		}
		d.written.Add(1)
	}
}

func (d *promptDisk) forget(name string) {
	d.mu.Lock()
	delete(d.known, name)
	d.mu.Unlock()
}

// offer reports whether the prefix file name should be written: on its
// second use since start, so a prefix used once (a system prompt that
// carries the time) costs no write to flash; false when it is on disk
// already (queueing a record of its use when one is due).
func (d *promptDisk) offer(name string) bool {
	now := d.now()
	d.mu.Lock()
	last, ok := d.known[name]
	if !ok && !d.seen[name] {
		if len(d.seen) >= 256 {
			clear(d.seen) // a bound, not a policy: one-off prefixes pile up here
		}
		d.seen[name] = true
		d.mu.Unlock()
		return false
	}
	if ok && now.Sub(last) < promptTouchEvery {
		d.mu.Unlock()
		return false
	}
	delete(d.seen, name)
	d.known[name] = now
	d.mu.Unlock()
	if ok {
		d.send(promptJob{name: name})
		return false
	}
	return true
}

// send queues a job, dropping it when the writer is behind.
func (d *promptDisk) send(j promptJob) {
	select {
	case d.jobs <- j:
	default:
		d.dropped.Add(1)
		if j.h != nil {
			d.forget(j.name)
		}
	}
}

// stablePrefix is how many leading tokens of prompt are msgs' leading
// system turns as the model renders them alone (0 when there are none or
// the template refuses them). The rendering is remembered by the turns'
// text, so a request repeating a system prompt does not tokenize it again.
func (d *promptDisk) stablePrefix(m *Model, msgs []llm.Message, prompt []int32) int {
	k := 0
	for k < len(msgs) && msgs[k].Role == "system" {
		k++
	}
	if k == 0 {
		return 0
	}
	f := fnv.New64a()
	for _, msg := range msgs[:k] {
		f.Write([]byte(msg.Content))
		f.Write([]byte{0})
	}
	key := f.Sum64()
	d.mu.Lock()
	ids, ok := d.memo[key]
	d.mu.Unlock()
	if !ok {
		ids, _ = m.ChatPromptTokens(msgs[:k]) // nil when refused: remembered as none
		d.mu.Lock()
		if len(d.memo) >= 64 {
			clear(d.memo) // a bound, not a policy: devices repeat a few system prompts
		}
		d.memo[key] = ids
		d.mu.Unlock()
	}
	n := 0
	for n < len(ids) && n < len(prompt) && ids[n] == prompt[n] {
		n++
	}
	return n
}

// persistPrefix hands the first k blocks of s, its stable prefix, to the
// writer unless they are on disk already. It runs in the step loop once
// those blocks are computed and registered.
func (e *Engine) persistPrefix(s *sequence, k int) {
	tokens := s.tokens[:k*e.cfg.BlockSize]
	name := fileName(e.disk.model, tokens)
	if !e.disk.offer(name) {
		return
	}
	e.disk.send(promptJob{name: name, h: e.readKV(s.blocks[:k], tokens)})
}

// loadPromptCache loads this model's prefixes from disk into the prefix
// cache, most recently used first, while the cache has free blocks. It runs
// in NewEngine, before the step loop starts.
func (e *Engine) loadPromptCache() {
	d := e.disk
	es, err := d.dir.List()
	if err != nil {
		d.log.Warn("prompt cache: directory not read", "dir", d.dir.Path(), "err", err)
		return
	}
	own := fmt.Sprintf("%016x-", d.model)
	for _, en := range es {
		if !strings.HasSuffix(en.Name, promptFileSuffix) {
			continue
		}
		if !strings.HasPrefix(en.Name, own) {
			d.log.Info("prompt cache: file of another model not loaded", "file", en.Name)
			continue
		}
		if _, _, free := e.alloc.Counts(); free == 0 {
			break
		}
		h, err := e.readPromptFile(en.Name)
		if err != nil {
			d.ignored.Add(1)
			d.log.Warn("prompt cache: file ignored and removed", "file", en.Name, "err", err)
			if err := d.dir.Remove(en.Name); err != nil {
				d.log.Warn("prompt cache: file not removed", "file", en.Name, "err", err)
			}
			continue
		}
		d.loadedBlocks.Add(uint64(e.installPrefix(h)))
		d.loadedFiles.Add(1)
		d.mu.Lock()
		d.known[en.Name] = time.Time{} // loaded is not used: the first reuse records it
		d.mu.Unlock()
	}
}

// readPromptFile reads and checks one of this model's files.
func (e *Engine) readPromptFile(name string) (*Handoff, error) {
	raw, err := e.disk.dir.Read(name)
	if err != nil {
		return nil, err
	}
	return e.decodePromptFile(name, raw)
}

// decodePromptFile decodes the file name's contents raw and checks them
// against this engine's model and the name.
func (e *Engine) decodePromptFile(name string, raw []byte) (*Handoff, error) {
	h, err := DecodeHandoff(raw)
	if err != nil {
		return nil, err
	}
	if err := e.accepts(h); err != nil {
		return nil, err
	}
	switch {
	case h.Next != 0 || h.Seed != 0 || h.Draws != 0:
		return nil, errors.New("a generation's handoff, not a prompt prefix")
	case len(h.Prompt) < e.cfg.BlockSize:
		return nil, fmt.Errorf("%d tokens, less than a block of %d", len(h.Prompt), e.cfg.BlockSize)
	case fileName(h.Model, h.Prompt) != name:
		return nil, errors.New("its tokens do not hash to its name")
	}
	for _, t := range h.Prompt {
		if int(t) >= e.m.Config.Vocab {
			return nil, fmt.Errorf("token %d outside the vocabulary", t)
		}
	}
	return h, nil
}

// installPrefix writes h's whole blocks into free blocks of the cache and
// registers them under their hashes, held by nobody: the leading blocks
// the cache holds already are kept, and it stops when no block is free
// (loading never evicts what it loaded before). It returns the blocks
// written.
func (e *Engine) installPrefix(h *Handoff) int {
	bs := e.cfg.BlockSize
	hashes := kvcache.BlockHashes(h.Prompt, bs)
	blocks := e.alloc.Acquire(hashes)
	have := len(blocks)
	for len(blocks) < len(hashes) {
		if _, _, free := e.alloc.Counts(); free == 0 {
			break
		}
		id, _, ok := e.alloc.Allocate()
		if !ok {
			break
		}
		blocks = append(blocks, id)
	}
	e.writeKV(blocks, h, have*bs, len(blocks)*bs)
	for i := have; i < len(blocks); i++ {
		e.alloc.Register(blocks[i], hashes[i])
	}
	// Last first, as releaseBlocks: the cache then evicts the prefix's tail
	// before its head.
	for _, b := range slices.Backward(blocks) {
		e.alloc.Release(b)
	}
	return len(blocks) - have
}
