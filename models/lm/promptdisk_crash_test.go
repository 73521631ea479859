package lm

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/llm"
)

// TestPromptDiskKilledMidWrite kills an engine that writes one stable
// prefix after another (each request its own system prompt), many times
// over one directory bounded to a few files. After every kill an engine
// started on it loads only whole, correct files: none is ignored as
// corrupt, no temporary file survives its start, each file is the prefix
// of a request a child made, and the last prefix a child saw written is
// there and serves its request with the reply of an engine without a
// cache.
func TestPromptDiskKilledMidWrite(t *testing.T) {
	m := promptDiskModel(t, 3) // in the child too: the same weights, the same fingerprint
	req := func(i int) *llm.Request {
		r := carRequest("open the windows", 1)
		r.MaxTokens = 2
		r.Messages[0].Content = fmt.Sprintf("Vehicle %d. %s", i, r.Messages[0].Content)
		return r
	}
	dir := filepath.Join(t.TempDir(), "prompt-cache")
	cfg := diskEngineConfig(dir, nil)
	cfg.PromptCacheBytes = 1 << 20 // some ten files: older ones are trimmed as the child writes
	var plain *Engine
	torn := 0 // rounds killed mid-write: a temporary file was left
	crashtest.Run(t, crashtest.Config{
		Cycles:   crashtest.Cycles(t, 10),
		Arg:      dir,
		MinRun:   20 * time.Millisecond,
		MaxRun:   250 * time.Millisecond,
		Progress: true, // a round whose child acknowledged nothing checks recovery but does not count
		Setup: func(t *testing.T) {
			plain = newEngine(t, m, EngineConfig{BlockSize: promptDiskBlock, MaxBatch: 2})
		},
		Child: func(dir string, ack *crashtest.Acker) {
			cfg.PromptCacheDir = dir // the parent's: this process's t.TempDir is its own
			e, err := NewEngine(m, cfg)
			if err != nil {
				crashtest.Fail("engine: %v", err)
			}
			for i := int(time.Now().UnixNano() % 1e6); ; i++ {
				ack.Ack("try %d", i)
				want := e.Stats().PromptDisk.Written + 1
				for range 2 { // written on its second use
					if _, err := e.Generate(context.Background(), req(i), nil); err != nil {
						crashtest.Fail("generate: %v", err)
					}
				}
				for e.Stats().PromptDisk.Written < want {
					if st := e.Stats().PromptDisk; st.Failed+st.Dropped > 0 {
						crashtest.Fail("prefix not written: %+v", st)
					}
					time.Sleep(time.Millisecond)
				}
				ack.Ack("wrote %d", i)
			}
		},
		Verify: func(t *testing.T, round int, acked, all []string) {
			if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) > 0 {
				torn++
			}
			e, err := NewEngine(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			st := e.Stats().PromptDisk
			if st.Ignored != 0 {
				t.Fatalf("round %d: %d files ignored as damaged", round, st.Ignored)
			}
			if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
				t.Fatalf("round %d: temporary files %v survive a start", round, tmp)
			}
			// Every file is the prefix of a request a child made.
			names := map[string]bool{}
			last := -1 // the last request whose prefix was written
			for _, a := range all {
				var i int
				if _, err := fmt.Sscanf(a, "try %d", &i); err == nil {
					names[prefixFile(t, e, req(i))] = true
				}
			}
			for _, a := range acked {
				fmt.Sscanf(a, "wrote %d", &last)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*"+promptFileSuffix))
			for _, f := range files {
				if !names[filepath.Base(f)] {
					t.Fatalf("round %d: %s is no request's prefix", round, filepath.Base(f))
				}
			}
			if st.LoadedFiles != uint64(len(files)) {
				t.Fatalf("round %d: loaded %d of %d files", round, st.LoadedFiles, len(files))
			}
			if last < 0 {
				return
			}
			i := last
			if _, err := e.readPromptFile(prefixFile(t, e, req(i))); err != nil {
				t.Fatalf("round %d: the last acknowledged prefix: %v", round, err)
			}
			want := ask(t, plain, req(i))
			if got := ask(t, e, req(i)); got.text != want.text || got.final.PrefixHitTokens != stableTokens(t, e, req(i)) {
				t.Fatalf("round %d: prefix %d replies %q hitting %d tokens, without the cache %q", round, i, got.text, got.final.PrefixHitTokens, strings.TrimSpace(want.text))
			}
		},
	})
	t.Logf("%d rounds killed mid-write", torn)
}

// prefixFile is the name of req's stable prefix's file.
func prefixFile(t *testing.T, e *Engine, req *llm.Request) string {
	t.Helper()
	prompt, _, err := e.chatRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	return fileName(e.m.Fingerprint(), prompt[:stableTokens(t, e, req)])
}
