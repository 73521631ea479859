package agent

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/phaseless/phaseless/models/cartools"
	"github.com/phaseless/phaseless/models/lm"
)

// runUntilStopped runs a built agent and returns its base URL and a stop
// that ends Run and waits for it, so a test can restart an agent on the
// same data directory.
func runUntilStopped(t *testing.T, a *Agent) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return "http://" + a.Addr().String(), stop
}

// engineStats are the agent's built-in engine's counters.
func engineStats(t *testing.T, a *Agent) lm.Stats {
	t.Helper()
	e, _ := a.engine.swap.Current()
	le, ok := e.(*lm.Engine)
	if !ok {
		t.Fatalf("the agent's engine is a %T", e)
	}
	return le.Stats()
}

// TestPromptCacheSurvivesAgentRestart: a tool request's system prompt and
// tool definitions are kept in the data directory; the agent started
// again on it loads them, and the same request then reuses them and
// answers as before. --prompt-cache-bytes -1 keeps nothing.
func TestPromptCacheSurvivesAgentRestart(t *testing.T) {
	tool := cartools.Tools()[1] // set_fan_speed
	raw, err := json.Marshal(map[string]any{
		"messages": []map[string]string{
			{"role": "system", "content": "You are the car. Be brief."},
			{"role": "user", "content": "set the fan to 3"},
		},
		"tools":      []any{map[string]any{"type": "function", "function": map[string]any{"name": tool.Name, "description": tool.Description, "parameters": tool.Parameters}}},
		"max_tokens": 64, "temperature": 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(url string) string {
		t.Helper()
		resp := post(t, url+"/v1/chat/completions", string(raw), "x-phaseless-route", "local")
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var c struct {
			Choices []struct {
				Message struct {
					Content   *string
					ToolCalls []struct{ Function json.RawMessage } `json:"tool_calls"` // less the random call id
				}
			}
		}
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("reply %s: %v", b, err)
		}
		out, _ := json.Marshal(c.Choices[0].Message)
		return string(out)
	}
	cfg := testConfig(t)
	cacheDir := filepath.Join(cfg.DataDir, PromptCacheDir)

	a, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	url, stop := runUntilStopped(t, a)
	first := ask(url)
	ask(url) // a prefix is written on its second use
	stop()
	files, _ := filepath.Glob(filepath.Join(cacheDir, "*.kv"))
	if len(files) != 1 {
		t.Fatalf("prompt cache files %v, want one", files)
	}

	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	url, _ = runUntilStopped(t, b)
	if st := engineStats(t, b); st.PromptDisk.LoadedFiles != 1 || st.PromptDisk.LoadedBlocks == 0 {
		t.Fatalf("restarted agent loaded %+v", st.PromptDisk)
	}
	if again := ask(url); again != first {
		t.Fatalf("after a restart the reply is %s, before %s", again, first)
	}
	if st := engineStats(t, b); st.PrefixHitTokens < st.PromptDisk.LoadedBlocks*uint64(st.BlockSize) {
		t.Fatalf("the request after a restart hit %d prompt tokens of %d loaded blocks", st.PrefixHitTokens, st.PromptDisk.LoadedBlocks)
	}

	off := testConfig(t)
	off.PromptCacheBytes = -1
	c, err := New(off, nil)
	if err != nil {
		t.Fatal(err)
	}
	url, _ = runUntilStopped(t, c)
	ask(url)
	if _, err := os.Stat(filepath.Join(off.DataDir, PromptCacheDir)); !os.IsNotExist(err) {
		t.Fatalf("with the cache off its directory exists: %v", err)
	}
}
