package lm

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cartools"
)

// promptDiskBlock is the block size of the prompt-cache tests: small, so
// the prefix spans many blocks of a small context.
const promptDiskBlock = 8

// promptDiskModel is a small model that renders the car tools' definitions
// into its prompt: ChatML where this build renders templates, else the
// byte-level prompt. seed picks its weights (another seed, another model).
func promptDiskModel(t *testing.T, seed uint64) *Model {
	t.Helper()
	cfg := Config{Vocab: 300, Dim: 32, Layers: 2, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 4096}
	w, err := RandomWeights(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	spec := chatMLSpec(t)
	if !rendersTemplates {
		spec.ChatTemplate = ""
	}
	return writeAndRead(t, cfg, spec, w)
}

// carRequest is a tool request as the agent's apps send one: a system
// prompt, the car's first tools and a question. Greedy.
func carRequest(question string, tools int) *llm.Request {
	return &llm.Request{
		MaxTokens: 12,
		Messages: []llm.Message{
			{Role: "system", Content: "You are the car's assistant. Call a tool when one fits; answer in one short sentence otherwise."},
			{Role: "user", Content: question},
		},
		ToolRequest: llm.ToolRequest{Tools: cartools.Tools()[:tools]},
	}
}

// logBuffer collects an engine's log lines.
type logBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func diskEngineConfig(dir string, log *slog.Logger) EngineConfig {
	return EngineConfig{BlockSize: promptDiskBlock, MaxBatch: 2, PromptCacheDir: dir, Logger: log}
}

// reply is what a test compares of one generation: its text (tool calls
// included) and final record.
type reply struct {
	text  string
	final llm.Final
}

func ask(t *testing.T, e *Engine, req *llm.Request) reply {
	t.Helper()
	var b strings.Builder
	fin, err := e.Generate(context.Background(), req, func(tok llm.Token) error {
		b.WriteString(tok.Text)
		if tok.Tool != nil {
			b.WriteString("|" + tok.Tool.Name + tok.Tool.Arguments)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return reply{b.String(), fin}
}

// stableTokens is how many tokens of req's prompt the disk cache keeps:
// the leading system turns', cut to whole blocks.
func stableTokens(t *testing.T, e *Engine, req *llm.Request) int {
	t.Helper()
	prompt, opt, err := e.chatRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range opt.pins {
		if p.disk {
			if p.tokens >= len(prompt) {
				t.Fatalf("stable prefix of %d tokens is the whole %d-token prompt", p.tokens, len(prompt))
			}
			return p.tokens / e.cfg.BlockSize * e.cfg.BlockSize
		}
	}
	t.Fatal("no stable prefix found")
	return 0
}

// TestPromptDiskSurvivesRestart: the first tool request writes its stable
// prefix (system prompt and tool definitions) to disk; an engine started
// afterwards loads it and serves the same request from it, with the reply
// an engine without the cache gives, token for token, and a request with
// another question hits the same prefix.
func TestPromptDiskSurvivesRestart(t *testing.T) {
	m := promptDiskModel(t, 3)
	dir := t.TempDir()
	req := carRequest("set the temperature to 21 degrees", 4)

	plain := newEngine(t, m, EngineConfig{BlockSize: promptDiskBlock, MaxBatch: 2})
	want := ask(t, plain, req)
	other := ask(t, plain, carRequest("play some jazz", 4))

	first, err := NewEngine(m, diskEngineConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	stable := stableTokens(t, first, req)
	if stable < 300 {
		t.Fatalf("stable prefix of %d tokens: the tool definitions are missing", stable)
	}
	if got := ask(t, first, req); got.text != want.text {
		t.Fatalf("first engine replied %q, the engine without a cache %q", got.text, want.text)
	}
	if st := first.Stats().PromptDisk; st.Written != 0 {
		t.Fatalf("a prefix used once was written: %+v", st)
	}
	ask(t, first, req) // a second use: now it is written
	first.Close()      // waits for the writer
	if st := first.Stats().PromptDisk; st.Written != 1 || st.Failed != 0 || st.Dropped != 0 {
		t.Fatalf("first engine's disk stats %+v, want one prefix written", st)
	}

	second := newEngine(t, m, diskEngineConfig(dir, nil))
	st := second.Stats()
	if st.PromptDisk.LoadedFiles != 1 || st.PromptDisk.LoadedBlocks != uint64(stable/promptDiskBlock) {
		t.Fatalf("loaded %+v, want 1 file of %d blocks", st.PromptDisk, stable/promptDiskBlock)
	}
	got := ask(t, second, req)
	if got.text != want.text {
		t.Fatalf("after a restart the reply is %q, without the cache %q", got.text, want.text)
	}
	if got.final.PrefixHitTokens != stable {
		t.Fatalf("the first request after a restart hit %d prompt tokens, want the stable prefix's %d", got.final.PrefixHitTokens, stable)
	}
	if got := ask(t, second, carRequest("play some jazz", 4)); got.text != other.text || got.final.PrefixHitTokens < stable {
		t.Fatalf("another question: %q hitting %d tokens, want %q hitting at least %d", got.text, got.final.PrefixHitTokens, other.text, stable)
	}
	second.Close()
	if st := second.Stats().PromptDisk; st.Written != 0 {
		t.Fatalf("the second engine wrote %d prefixes it had loaded", st.Written)
	}
}

// onlyFile is the one prompt-cache file in dir.
func onlyFile(t *testing.T, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+promptFileSuffix))
	if err != nil || len(names) != 1 {
		t.Fatalf("files %v (%v), want one", names, err)
	}
	return names[0]
}

// writePrefix runs req on an engine of m with the cache in dir, so the
// directory holds its stable prefix, and returns that file's path.
func writePrefix(t *testing.T, m *Model, dir string, req *llm.Request) string {
	t.Helper()
	e, err := NewEngine(m, diskEngineConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	ask(t, e, req)
	ask(t, e, req) // written on its second use
	e.Close()
	return onlyFile(t, dir)
}

// TestPromptDiskIgnoresBadFiles: a corrupt, truncated, misnamed or
// foreign file under this model's name is not loaded: the engine starts,
// logs the file, removes it and answers as an engine without a cache does.
// Another model's file under its own name is left for that model, and a
// write a crash interrupted is cleaned up.
func TestPromptDiskIgnoresBadFiles(t *testing.T) {
	m := promptDiskModel(t, 3)
	req := carRequest("open the driver window", 1)
	want := ask(t, newEngine(t, m, EngineConfig{BlockSize: promptDiskBlock, MaxBatch: 2}), req)
	src := t.TempDir()
	good, err := os.ReadFile(writePrefix(t, m, src, req))
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(onlyFile(t, src))
	foreignModel := promptDiskModel(t, 4)
	foreignPath := writePrefix(t, foreignModel, t.TempDir(), req)
	foreign, err := os.ReadFile(foreignPath)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := slices.Clone(good)
		b[i] ^= 0x10
		return b
	}
	h, err := DecodeHandoff(good)
	if err != nil {
		t.Fatal(err)
	}
	h.Prompt[3]++ // contents of another prefix under this one's name
	misnamed, _ := h.MarshalBinary()
	h.Prompt[3]--
	h.Next = 7 // a generation's handoff
	generation, _ := h.MarshalBinary()

	for _, tc := range []struct {
		name    string
		file    string // under the test's directory
		data    []byte
		ignored bool // counted, logged and removed; else left alone
		log     string
	}{
		{"corrupt value", name, flip(len(good) - 100), true, "checksum"},
		{"corrupt header", name, flip(20), true, "kv handoff"},
		{"truncated", name, good[:len(good)/2], true, "bytes, the header says"},
		{"empty", name, nil, true, "shorter than the header"},
		{"another model's contents", name, foreign, true, "from model"},
		{"misnamed", name, misnamed, true, "do not hash to its name"},
		{"generation handoff", name, generation, true, "not a prompt prefix"},
		{"another model's file", filepath.Base(foreignPath), foreign, false, "file of another model not loaded"},
		{"interrupted write", name + ".123.tmp", good[:len(good)/3], false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var log logBuffer
			e := newEngine(t, m, diskEngineConfig(dir, log.logger()))
			st := e.Stats().PromptDisk
			if st.LoadedFiles != 0 {
				t.Fatalf("loaded %d files", st.LoadedFiles)
			}
			if got := st.Ignored == 1; got != tc.ignored {
				t.Fatalf("ignored %d files, want ignored=%v", st.Ignored, tc.ignored)
			}
			if !strings.Contains(log.String(), tc.log) {
				t.Fatalf("log %q does not say %q", log.String(), tc.log)
			}
			_, statErr := os.Stat(path)
			removed := errors.Is(statErr, os.ErrNotExist)
			if wantRemoved := tc.ignored || strings.HasSuffix(tc.file, ".tmp"); removed != wantRemoved {
				t.Fatalf("file removed=%v, want %v", removed, wantRemoved)
			}
			if got := ask(t, e, req); got.text != want.text || got.final.PrefixHitTokens != 0 {
				t.Fatalf("reply %q hitting %d tokens, want %q hitting none", got.text, got.final.PrefixHitTokens, want.text)
			}
		})
	}
}

// TestPromptDiskBoundAndLoadOrder: prefixes of several system prompts fill
// the directory up to its bound, the least recently used leaving first; a
// restart loads the newest first and stops when the KV cache has no free
// block, without evicting what it loaded.
func TestPromptDiskBoundAndLoadOrder(t *testing.T) {
	m := promptDiskModel(t, 3)
	dir := t.TempDir()
	req := func(i int) *llm.Request {
		r := carRequest("lock the doors", 2)
		r.Messages[0].Content = strings.Repeat("Be brief. ", i+1) + r.Messages[0].Content
		return r
	}
	fi, err := os.Stat(writePrefix(t, m, t.TempDir(), req(0)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := diskEngineConfig(dir, nil)
	cfg.PromptCacheBytes = 2*fi.Size() + fi.Size()/2 // two files and a half: the third write drops the oldest
	e, err := NewEngine(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ask(t, e, req(i))
		ask(t, e, req(i))
		e.Close()
		if e, err = NewEngine(m, cfg); err != nil { // a restart between writes orders their times
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+promptFileSuffix))
	if len(files) != 2 {
		t.Fatalf("%d files under a bound of two", len(files))
	}
	for i, keep := range []bool{false, true, true} {
		prompt, _, _ := e.chatRequest(req(i))
		_, err := os.Stat(filepath.Join(dir, fileName(m.Fingerprint(), prompt[:stableTokens(t, e, req(i))])))
		if present := err == nil; present != keep {
			t.Errorf("prefix %d on disk=%v, want %v", i, present, keep)
		}
	}
	if st := e.Stats().PromptDisk; st.LoadedFiles != 2 {
		t.Fatalf("restart loaded %+v, want both files", st)
	}
	e.Close()

	// A KV cache with room for little more than one context loads the
	// newest prefix and leaves the rest on disk.
	small := cfg
	small.KVBudgetBytes = (int64(m.Config.ContextLen/promptDiskBlock) + 4) * blockBytes(m.Config, promptDiskBlock)
	e = newEngine(t, m, small)
	st := e.Stats()
	if st.PromptDisk.LoadedFiles == 0 || st.KVBlocksFree != st.KVBlocksTotal {
		t.Fatalf("loaded %+v into %d free of %d blocks", st.PromptDisk, st.KVBlocksFree, st.KVBlocksTotal)
	}
	newest := req(2)
	if got := ask(t, e, newest); got.final.PrefixHitTokens != stableTokens(t, e, newest) {
		t.Fatalf("the newest prefix hit %d tokens, want %d", got.final.PrefixHitTokens, stableTokens(t, e, newest))
	}
}

func FuzzPromptFile(f *testing.F) {
	m, _ := buildModel(f, Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 64}, F32, 1, false)
	e, err := NewEngine(m, EngineConfig{BlockSize: 4, PromptCacheDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	h := &Handoff{Model: m.Fingerprint(), Layers: 1, KVDim: m.Config.KVHeads * m.Config.HeadDim(), Prompt: []int32{1, 2, 3, 4, 5, 6, 7, 8}}
	h.K, h.V = [][]float32{make([]float32, 8*h.KVDim)}, [][]float32{make([]float32, 8*h.KVDim)}
	for i := range h.K[0] {
		h.K[0][i], h.V[0][i] = float32(i%7)/3, -float32(i%5)/2
	}
	good, _ := h.MarshalBinary()
	f.Add(good)
	f.Add(good[:handoffHeaderSize])
	name := fileName(m.Fingerprint(), h.Prompt)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := e.decodePromptFile(name, b)
		if err != nil {
			return
		}
		// Accepted: the name holds, so these are the seed's tokens, of this
		// model and shape, and whole blocks of them load.
		if !slices.Equal(got.Prompt, h.Prompt) || got.Model != m.Fingerprint() {
			t.Fatalf("accepted the prefix %v of model %x", got.Prompt, got.Model)
		}
	})
}

// TestPromptDiskUnopenableDirectory: a cache directory that cannot be
// made (here a path under a file) turns the cache off with a log line;
// the engine starts and serves.
func TestPromptDiskUnopenableDirectory(t *testing.T) {
	m := promptDiskModel(t, 3)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	e := newEngine(t, m, diskEngineConfig(filepath.Join(file, "prompt-cache"), log.logger()))
	if !strings.Contains(log.String(), "prompt cache off") {
		t.Fatalf("log %q", log.String())
	}
	if got := ask(t, e, carRequest("lock the doors", 1)); got.final.CompletionTokens == 0 {
		t.Fatalf("no reply: %+v", got.final)
	}
}
